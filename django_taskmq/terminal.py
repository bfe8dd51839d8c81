"""The frames ``manage.py qmonitor`` draws with ``rich``: clusters and what each worker runs,
queue × state counts, throughput. Pure functions of the numbers read by :mod:`.monitoring`."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from . import monitoring
from .policy import durations
from .policy.progress import fraction
from .policy.states import JobState

SPARK = "▁▂▃▄▅▆▇█"
#: The states counted per queue besides the ready, delayed and retrying numbers of QueueStats.
FINISHED = (JobState.FAILED, JobState.DEAD, JobState.EXPIRED, JobState.CANCELLED)


def seconds(value: float | None) -> str:
    """Return a short duration: ``850ms``, ``12.5s``, ``4m10s``, ``3h05m``, ``2d04h``."""
    return durations.duration(value, compact=True)


def sparkline(values: Sequence[int]) -> str:
    """Return one block character per value, scaled to the largest."""
    peak = max(values, default=0)
    if peak <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(int(v / peak * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)] for v in values)


def skew(value: float | None) -> str:
    """A cluster's clock skew (host minus database) for the table: ``+120.003s``, ``-`` when unknown."""
    return "-" if value is None else f"{value:+.3f}s"


def clusters_table(clusters: Sequence[monitoring.ClusterInfo]) -> Table:
    """The clusters alive: where, since when, how busy, and their counts."""
    workers = sum(c.workers for c in clusters)
    table = Table(title=f"Clusters alive: {len(clusters)} ({workers} workers)", title_justify="left", expand=True)
    table.add_column("cluster")
    table.add_column("host:pid")
    table.add_column("state")
    for name in ("workers", "busy"):
        table.add_column(name, justify="right")
    table.add_column("queues")
    for name in ("beat", "skew", "succeeded", "failed", "timeouts", "crashes", "up"):
        table.add_column(name, justify="right")
    if not clusters:
        table.add_row(Text("none: nothing runs the queues", style="bold red"))
    for c in clusters:
        table.add_row(c.name, f"{c.host}:{c.pid}", c.state, str(c.workers), str(len(c.tasks)), ",".join(c.queues),
                      seconds(c.heartbeat_age), skew(c.clock_skew), str(c.count("succeeded")), str(c.count("failed")),
                      str(c.count("timeouts")), str(c.count("crashes")), seconds(c.counts.get("uptime")))
    return table


def workers_table(clusters: Sequence[monitoring.ClusterInfo]) -> Table:
    """What each busy worker runs: its cluster, the task, the job and for how long."""
    tasks = [(c, t) for c in clusters for t in sorted(c.tasks, key=lambda t: t.worker)]
    table = Table(title=f"Running: {len(tasks)}", title_justify="left", expand=True)
    table.add_column("host:pid")
    table.add_column("worker", justify="right")
    table.add_column("task")
    table.add_column("job")
    table.add_column("queue")
    table.add_column("for", justify="right")
    table.add_column("progress")
    if not tasks:
        table.add_row(Text("no worker is busy", style="dim"))
    for c, t in tasks:
        table.add_row(f"{c.host}:{c.pid}", str(t.worker), Text(t.task_name or "?", style="cyan"), t.job_id, t.queue,
                      seconds(t.seconds), Text(progress_text(t.progress)))  # Text: no markup
    return table


def progress_text(progress: dict | None, width: int = 10) -> str:
    """A job's progress report as ``[#####     ] 5/10 message`` (``5 message`` without a total)."""
    if progress is None:
        return ""
    share = fraction(progress)
    done, message = progress["done"], progress.get("message") or ""
    if share is None:
        return f"{done:g} {message}".strip()
    filled = round(share * width)
    return f"[{'#' * filled}{' ' * (width - filled)}] {done:g}/{progress['total']:g} {message}".strip()


def queues_table(queues: Sequence[monitoring.QueueStats], counts: Mapping[tuple[str, str], int]) -> Table:
    """Queue × state: ready (by priority), oldest ready, delayed, retrying, running, the finished
    states but succeeded, and dead letters waiting."""
    table = Table(title="Queues", title_justify="left", expand=True)
    table.add_column("queue")
    table.add_column("ready", justify="right")
    table.add_column("by priority")
    for name in ("oldest", "delayed", "retrying", "running", *[s.value.lower() for s in FINISHED], "dead letters"):
        table.add_column(str(name), justify="right")
    for q in queues:
        bands = " ".join(f"{p}:{n}" for p, n in q.ready.items()) or "-"
        finished = [str(counts.get((q.name, s.value), 0)) for s in FINISHED]
        dead = Text(str(q.dead_letters), style="bold red" if q.dead_letters else "")
        name = Text.assemble(q.name, (" (paused)", "bold yellow")) if q.paused else q.name
        table.add_row(name, str(q.ready_total), bands, seconds(q.oldest_ready_age), str(q.delayed),
                      str(q.retrying), str(q.running), *finished, dead)
    return table


def throughput_text(throughput: monitoring.Throughput | None, read_at: datetime.datetime | None) -> Text:
    """Succeeded and failed in the last minute and hour, and a sparkline of the last hour."""
    if throughput is None:
        return Text("throughput: reading ...", style="dim")
    per_minute = [ok + failed for _, ok, failed in throughput.per_minute]
    text = Text("Throughput  ")
    text.append(f"succeeded {throughput.succeeded_minute}/min {throughput.succeeded_hour}/h", style="green")
    text.append("  ")
    text.append(f"failed {throughput.failed_minute}/min {throughput.failed_hour}/h",
                style="bold red" if throughput.failed_minute else "")
    text.append(f"\nlast hour   {sparkline(per_minute)}  (peak {max(per_minute, default=0)}/min")
    if read_at is not None:
        text.append(f", read {read_at:%H:%M:%S}")
    text.append(")")
    return text


def frame(snapshot: monitoring.Snapshot, counts: Mapping[tuple[str, str], int], where: str,
          throughput_read_at: datetime.datetime | None = None, hint: str = "q or Ctrl-C quits") -> RenderableType:
    """One screen of ``qmonitor``."""
    header = Text(f"django_taskmq  {where}  {snapshot.taken_at:%Y-%m-%d %H:%M:%S %Z}", style="bold")
    if hint:
        header.append(f"   {hint}", style="dim")
    return Group(header, clusters_table(snapshot.clusters), workers_table(snapshot.clusters),
                 queues_table(snapshot.queues, counts),
                 throughput_text(snapshot.throughput, throughput_read_at))
