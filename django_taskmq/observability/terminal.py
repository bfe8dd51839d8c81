"""The frames ``manage.py qmonitor`` draws with ``rich``: clusters and what each worker runs,
queue × state counts, throughput. Pure functions of the numbers read by :mod:`.statistics`.

Each table is laid out for the terminal's width: when its columns do not fit, the least telling
ones go (:class:`Column` ranks them), so its headers are never cut to ``cl…``; at 80 columns the
clusters table keeps the name, state, workers and busy ones.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from . import statistics
from ..policy import durations
from ..policy.progress import fraction
from ..policy.states import JobState

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


#: The width qmonitor lays its tables out for when it cannot ask the terminal.
WIDTH = 140


@dataclass(frozen=True)
class Column:
    """One column of a table: its header (never shortened), its alignment and its rank: columns of
    the highest rank are dropped first when the table does not fit (rank 0 ones always stay)."""

    header: str
    rank: int = 0
    justify: JustifyMethod = "left"


def _cell_width(value: RenderableType) -> int:
    return value.cell_len if isinstance(value, Text) else len(str(value))


def fitted(columns: Sequence[Column], rows: Sequence[Sequence[RenderableType]], width: int) -> list[int]:
    """Return the positions of the columns that fit in ``width`` cells, whole headers and cells,
    dropping the highest ranks first (the last column of a rank first); rank 0 columns always stay,
    their cells shortened with an ellipsis if even they do not fit."""
    def needed(i: int) -> int:  # its widest cell or header, one space of padding each side, a border
        return max([len(columns[i].header), *(_cell_width(row[i]) for row in rows if i < len(row))]) + 3

    kept = list(range(len(columns)))
    droppable = sorted((i for i in kept if columns[i].rank > 0), key=lambda i: (columns[i].rank, i), reverse=True)
    for i in droppable:
        if sum(needed(k) for k in kept) + 1 <= width:
            break
        kept.remove(i)
    return kept


def table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[RenderableType]], width: int,
          empty: Text | None = None) -> Table:
    """A table of the columns that fit in ``width`` (see :func:`fitted`), ``empty`` as its row when
    ``rows`` is empty."""
    kept = fitted(columns, rows, width)
    result = Table(title=title, title_justify="left", expand=True, width=width)
    for i in kept:
        result.add_column(columns[i].header, justify=columns[i].justify, min_width=len(columns[i].header),
                          no_wrap=True, overflow="ellipsis")
    if not rows and empty is not None:
        result.add_row(empty)
    for row in rows:
        result.add_row(*(row[i] for i in kept))
    return result


RIGHT: JustifyMethod = "right"
CLUSTER_COLUMNS = [
    Column("cluster"), Column("host:pid", 1), Column("state"), Column("workers", 0, RIGHT), Column("busy", 0, RIGHT),
    Column("queues", 3), Column("beat", 1, RIGHT), Column("skew", 5, RIGHT), Column("succeeded", 2, RIGHT),
    Column("failed", 2, RIGHT), Column("timeouts", 4, RIGHT), Column("crashes", 4, RIGHT), Column("up", 3, RIGHT),
]


def clusters_table(clusters: Sequence[statistics.ClusterInfo], width: int = WIDTH) -> Table:
    """The clusters alive: where, since when, how busy, and their counts."""
    workers = sum(c.workers for c in clusters)
    rows = [[c.name, f"{c.host}:{c.pid}", c.state, str(c.workers), str(len(c.tasks)), ",".join(c.queues),
             seconds(c.heartbeat_age), skew(c.clock_skew), str(c.count("succeeded")), str(c.count("failed")),
             str(c.count("timeouts")), str(c.count("crashes")), seconds(c.counts.get("uptime"))] for c in clusters]
    return table(f"Clusters alive: {len(clusters)} ({workers} workers)", CLUSTER_COLUMNS, rows, width,
                 empty=Text("none: nothing runs the queues", style="bold red"))


WORKER_COLUMNS = [Column("host:pid", 2), Column("worker", 1, RIGHT), Column("task"), Column("job", 1),
                  Column("queue", 2), Column("for", 0, RIGHT), Column("progress", 3)]


def workers_table(clusters: Sequence[statistics.ClusterInfo], width: int = WIDTH) -> Table:
    """What each busy worker runs (started tasks, not the ones its cluster holds): its cluster, the
    task, the job and for how long."""
    tasks = [(c, t) for c in clusters for t in sorted(c.tasks, key=lambda t: t.worker)]
    rows: list[list[RenderableType]] = [[f"{c.host}:{c.pid}", str(t.worker), Text(t.task_name or "?", style="cyan"), t.job_id, t.queue,
                                         seconds(t.seconds), Text(progress_text(t.progress))]
                                        for c, t in tasks]  # Text: no markup
    return table(f"Running: {len(tasks)}", WORKER_COLUMNS, rows, width, empty=Text("no worker is busy", style="dim"))


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


QUEUE_COLUMNS = [Column("queue"), Column("ready", 0, RIGHT), Column("by priority", 3), Column("oldest", 1, RIGHT),
                 Column("delayed", 2, RIGHT), Column("retrying", 2, RIGHT), Column("running", 0, RIGHT),
                 Column("reserved", 0, RIGHT), *[Column(s.value.lower(), 4, RIGHT) for s in FINISHED],
                 Column("dead letters", 0, RIGHT)]


def queues_table(queues: Sequence[statistics.QueueStats], counts: Mapping[tuple[str, str], int],
                 width: int = WIDTH) -> Table:
    """Queue × state: ready (by priority), oldest ready, delayed, retrying, running (executing on a
    worker), reserved (held by a cluster, not started), the finished states but succeeded, and dead
    letters waiting."""
    rows: list[list[RenderableType]] = []
    for q in queues:
        bands = " ".join(f"{p}:{n}" for p, n in q.ready.items()) or "-"
        finished = [str(counts.get((q.name, s.value), 0)) for s in FINISHED]
        dead = Text(str(q.dead_letters), style="bold red" if q.dead_letters else "")
        name = Text.assemble(q.name, (" (paused)", "bold yellow")) if q.paused else Text(q.name)
        rows.append([name, str(q.ready_total), bands, seconds(q.oldest_ready_age), str(q.delayed), str(q.retrying),
                     str(q.running), str(q.reserved), *finished, dead])
    return table("Queues", QUEUE_COLUMNS, rows, width)


def throughput_text(throughput: statistics.Throughput | None, read_at: datetime.datetime | None,
                    width: int = WIDTH) -> Text:
    """Succeeded and failed in the last minute and hour, and a sparkline of the last hour."""
    if throughput is None:
        return Text("throughput: reading ...", style="dim")
    per_minute = [ok + failed for _, ok, failed in throughput.per_minute]
    text = Text("Throughput  ")
    text.append(f"succeeded {throughput.succeeded_minute}/min {throughput.succeeded_hour}/h", style="green")
    text.append("  ")
    text.append(f"failed {throughput.failed_minute}/min {throughput.failed_hour}/h",
                style="bold red" if throughput.failed_minute else "")
    # The sparkline is one character a minute: at 80 columns what follows it goes on its own line.
    text.append(f"\nlast hour   {sparkline(per_minute)}{'  ' if width >= 110 else chr(10) + ' ' * 12}"
                f"(peak {max(per_minute, default=0)}/min")
    if read_at is not None:
        text.append(f", read {read_at:%H:%M:%S}")
    text.append(")")
    return text


def frame(snapshot: statistics.Snapshot, counts: Mapping[tuple[str, str], int], where: str,
          throughput_read_at: datetime.datetime | None = None, hint: str = "q or Ctrl-C quits",
          width: int = WIDTH) -> RenderableType:
    """One screen of ``qmonitor``, laid out for ``width`` columns (80 and up: narrower tables drop
    their less telling columns, never shorten a header)."""
    header = Text(f"django_taskmq  {snapshot.taken_at:%Y-%m-%d %H:%M:%S %Z}  {where}", style="bold")  # where may wrap
    if hint:
        header.append(f"   {hint}", style="dim")
    return Group(header, clusters_table(snapshot.clusters, width), workers_table(snapshot.clusters, width),
                 queues_table(snapshot.queues, counts, width),
                 throughput_text(snapshot.throughput, throughput_read_at, width))
