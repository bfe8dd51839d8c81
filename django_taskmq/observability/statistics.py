"""Read-only numbers about the queues and the clusters, for people and scrapers.

The admin's dashboard, ``qmonitor``, ``qinfo --json`` and the metrics endpoint all read them here.
Times are the database's (its clock decides what is ready and which clusters are alive, see
:mod:`.brokers.clock`), read once per snapshot.
Reads need no broker: the models are queried directly on ``TASKMQ['database']``, and every query
is shaped to use a partial index of the job table, so millions of finished rows do not slow it
down: ready rows through ``taskmq_job_ready``, reserved and failed ones through
``taskmq_job_state_queue``, pending dead letters through ``taskmq_dead_pending``; the throughput
comes from its own small rollup (:func:`throughput`), not from job rows.

Running and reserved: a job a cluster holds is ``RUNNING`` in the table from the moment it is
reserved (prefetched, waiting for a worker) until its outcome is recorded; the stored state does not
tell the two apart, and the row's ``started_at`` is written with the outcome. What a worker executes
is in its cluster's heartbeat (``counts["tasks"]``, every 2 s), so the numbers here call *running*
the ``RUNNING`` jobs a worker of a cluster alive reports executing, and *reserved* the others
(:func:`executing_ids`).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import Count, Min, Q

from ..brokers.clock import as_datetime, clock_for
from ..conf import get_settings
from ..models import READY_STATES, Cluster, DeadLetter, Job, OutcomeCount, QueuePause, Workflow, WorkflowStates
from ..policy import retention as retention_policy
from ..policy import throughput as throughput_policy
from ..policy.states import JobState
from ..policy.progress import read as read_progress

#: A cluster is alive while its heartbeat is younger than this (seconds) and it has not stopped.
ALIVE_WITHIN = 30.0
#: Outcomes a heartbeat counts per queue (``counts["queues"]``), as the sentinel names them.
OUTCOMES = ("succeeded", "failed", "timeouts", "crashes", "suspended")  # suspended: durable tasks' sleeps and waits
CHART_MINUTES = 60


@dataclass
class QueueStats:
    """One queue now: ready jobs by priority, delayed, retrying, running, dead letters waiting."""

    name: str
    ready: dict[int, int] = field(default_factory=dict)  # priority -> ready jobs (visible now), highest first
    delayed: int = 0  # QUEUED, not visible yet (delay, eta)
    retrying: int = 0  # RETRYING, waiting for its backoff
    running: int = 0  # RUNNING and executing on a worker (its cluster's heartbeat says so)
    reserved: int = 0  # RUNNING but not started: held by a cluster (prefetched), waiting for a worker
    dead_letters: int = 0  # pending (not replayed)
    oldest_ready_age: float | None = None  # seconds since the oldest ready job became visible
    paused: bool = False  # no cluster claims from it (pause_queue)

    @property
    def ready_total(self) -> int:
        return sum(self.ready.values())


@dataclass
class WorkerTask:
    """What one busy worker of a cluster runs (from the cluster's heartbeat)."""

    worker: int
    job_id: str
    queue: str
    seconds: float
    task_name: str = ""
    progress: dict | None = None  # its latest progress report (see Job.progress)


@dataclass
class ClusterInfo:
    """One cluster alive, from its heartbeat row."""

    id: str
    name: str
    host: str
    pid: int
    state: str
    workers: int
    queues: list[str]
    started_at: datetime.datetime
    heartbeat_age: float  # seconds
    counts: dict[str, Any]
    tasks: list[WorkerTask] = field(default_factory=list)

    def count(self, name: str) -> int:
        value = self.counts.get(name, 0)
        return value if isinstance(value, int) else 0

    @property
    def clock_skew(self) -> float | None:
        """Seconds this cluster's host clock was ahead of the database's at its last heartbeat
        (negative: behind); None on SQLite (one host) or before the first measurement."""
        value = self.counts.get("clock_skew")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class Throughput:
    """Jobs finished recently: totals of the last minute and hour, and per minute of the last hour."""

    succeeded_minute: int = 0
    failed_minute: int = 0
    succeeded_hour: int = 0
    failed_hour: int = 0
    #: (start of the minute, succeeded, failed), oldest first, :data:`CHART_MINUTES` of them.
    per_minute: list[tuple[datetime.datetime, int, int]] = field(default_factory=list)


@dataclass
class Snapshot:
    """Everything the dashboard and ``qmonitor`` show, read at ``taken_at``."""

    taken_at: datetime.datetime
    queues: list[QueueStats]
    clusters: list[ClusterInfo]
    throughput: Throughput

    @property
    def workers_alive(self) -> int:
        return sum(c.workers for c in self.clusters)


def _alias(alias: str | None) -> str:
    return alias or get_settings().database


def database_now(alias: str | None = None) -> datetime.datetime:
    """Return the queue's time now: the database's clock (one query) on a server engine, this
    host's on SQLite."""
    connection = connections[_alias(alias)]
    return as_datetime(clock_for(connection).now(connection))


def executing_ids(clusters: Iterable[ClusterInfo]) -> set[str]:
    """Return the ids of the jobs the workers of ``clusters`` execute, as their last heartbeats say."""
    return {task.job_id for cluster in clusters for task in cluster.tasks}


def queue_stats(alias: str | None = None, now: float | None = None,
                clusters: list[ClusterInfo] | None = None) -> list[QueueStats]:
    """Return every configured queue (and any other one holding work) with its numbers now.

    ``clusters`` (read when not given) tell the running jobs from the reserved ones.
    """
    alias, now = _alias(alias), database_now(alias).timestamp() if now is None else now
    if clusters is None:
        clusters = clusters_alive(alias, as_datetime(now), with_task_names=False)
    started = executing_ids(clusters)
    jobs = Job.objects.using(alias).order_by()
    stats: dict[str, QueueStats] = {name: QueueStats(name) for name in get_settings().queues}

    def of(name: str) -> QueueStats:
        return stats.setdefault(name, QueueStats(name))

    visible = Q(visible_at__lte=now)
    ready_rows = jobs.filter(state__in=READY_STATES).values("queue", "priority").annotate(
        ready=Count("pk", filter=visible),
        delayed=Count("pk", filter=Q(state=JobState.QUEUED.value, visible_at__gt=now)),
        retrying=Count("pk", filter=Q(state=JobState.RETRYING.value, visible_at__gt=now)),
        oldest=Min("visible_at", filter=visible),
    )
    for row in ready_rows:
        queue = of(row["queue"])
        if row["ready"]:
            queue.ready[row["priority"]] = row["ready"]
        queue.delayed += row["delayed"]
        queue.retrying += row["retrying"]
        if row["oldest"] is not None:
            age = max(now - row["oldest"], 0.0)
            queue.oldest_ready_age = max(queue.oldest_ready_age or 0.0, age)
    held = jobs.filter(state=JobState.RUNNING.value).values("queue")
    for row in held.annotate(n=Count("*"), started=Count("pk", filter=Q(pk__in=started))):
        queue = of(row["queue"])
        queue.running, queue.reserved = row["started"], row["n"] - row["started"]
    pending = DeadLetter.objects.using(alias).filter(replayed_at__isnull=True).order_by()
    for row in pending.values("queue").annotate(n=Count("*")):
        of(row["queue"]).dead_letters = row["n"]
    for name in QueuePause.objects.using(alias).values_list("queue", flat=True):
        of(name).paused = True
    for queue in stats.values():
        queue.ready = dict(sorted(queue.ready.items(), reverse=True))
    return sorted(stats.values(), key=lambda q: q.name)


def pruning(alias: str | None = None) -> dict[str, Any]:
    """What deletes old jobs: the retention in force, the cluster holding the pruning chore (empty
    when none holds it now), the rows deleted in all, and when it last ran."""
    from ..models import Chore

    alias = _alias(alias)
    row = Chore.objects.using(alias).filter(name=retention_policy.CHORE).first()
    held = row is not None and row.until >= database_now(alias).timestamp()
    return {
        "retention": dict(get_settings().retention),
        "save_limit": get_settings().save_limit,
        "holder": row.owner if held and row else "",
        "deleted": row.deleted if row else 0,
        "last_run": row.last_run.isoformat() if row and row.last_run else None,
    }


def clusters_alive(alias: str | None = None, now: datetime.datetime | None = None,
                   with_task_names: bool = True) -> list[ClusterInfo]:
    """Return the clusters whose heartbeat is fresh and who have not stopped, by name and host.

    With ``with_task_names`` the task name of each job a worker runs is looked up (one query).
    """
    alias, now = _alias(alias), now or database_now(alias)
    rows = (Cluster.objects.using(alias).filter(beat_at__gte=now - datetime.timedelta(seconds=ALIVE_WITHIN))
            .exclude(state="stopped").order_by("name", "host", "pid"))
    clusters = []
    for row in rows:
        counts = row.counts if isinstance(row.counts, dict) else {}
        tasks = [WorkerTask(int(t[0]), str(t[1]), str(t[2]), float(t[3]))
                 for t in counts.get("tasks") or [] if isinstance(t, list) and len(t) == 4]
        clusters.append(ClusterInfo(
            id=row.id, name=row.name, host=row.host, pid=row.pid, state=row.state, workers=row.workers,
            queues=list(row.queues or []), started_at=row.started_at,
            heartbeat_age=max((now - row.beat_at).total_seconds(), 0.0), counts=counts, tasks=tasks,
        ))
    if with_task_names:
        _name_tasks(alias, [t for c in clusters for t in c.tasks])
    return clusters


def _name_tasks(alias: str, tasks: list[WorkerTask]) -> None:
    if not tasks:
        return
    rows = Job.objects.using(alias).filter(pk__in=[t.job_id for t in tasks])
    found = {pk: (name, read_progress(report, deliveries))
             for pk, name, report, deliveries in rows.values_list("pk", "task_name", "progress_report", "deliveries")}
    for task in tasks:
        task.task_name, task.progress = found.get(task.job_id, ("", None))


def throughput(alias: str | None = None, now: datetime.datetime | None = None) -> Throughput:
    """Return the executions that succeeded and failed (ended FAILED or DEAD) in the last minute and
    hour, and per minute of the last hour, from the throughput rollup (:class:`.models.OutcomeCount`).

    The rollup is written with the outcomes, so pruning job rows (retention, ``save_limit``) takes
    nothing from these numbers. It counts in slots of :data:`.policy.throughput.SLOT` seconds: the
    last minute is every slot that overlaps it, counted whole (60 to 70 s of outcomes), the last
    hour likewise. One indexed range read of at most a few hundred rows per queue.
    """
    alias, now = _alias(alias), now or database_now(alias)
    start = (now - datetime.timedelta(minutes=CHART_MINUTES - 1)).replace(second=0, microsecond=0)
    hour_ago = now - datetime.timedelta(hours=1, seconds=throughput_policy.SLOT)
    minute_ago = now - datetime.timedelta(minutes=1, seconds=throughput_policy.SLOT)
    buckets: dict[datetime.datetime, list[int]] = {start + datetime.timedelta(minutes=i): [0, 0]
                                                   for i in range(CHART_MINUTES)}
    result = Throughput()
    rows = OutcomeCount.objects.using(alias).filter(at__gt=min(hour_ago, start)).order_by()
    for at, ok, failed in rows.values_list("at", "succeeded", "failed"):
        if at > hour_ago:
            result.succeeded_hour, result.failed_hour = result.succeeded_hour + ok, result.failed_hour + failed
        if at > minute_ago:
            result.succeeded_minute, result.failed_minute = result.succeeded_minute + ok, result.failed_minute + failed
        bucket = buckets.get(at.replace(second=0, microsecond=0))
        if bucket is not None:
            bucket[0] += ok
            bucket[1] += failed
    result.per_minute = [(minute, ok, failed) for minute, (ok, failed) in buckets.items()]
    return result


def snapshot(alias: str | None = None) -> Snapshot:
    """Return the queues, the clusters alive and the recent throughput, read now."""
    now = database_now(alias)
    clusters = clusters_alive(alias, now)
    return Snapshot(taken_at=now, queues=queue_stats(alias, now.timestamp(), clusters), clusters=clusters,
                    throughput=throughput(alias, now))


def jobs_by_queue_and_state(alias: str | None = None,
                            states: Iterable[str] | None = None) -> dict[tuple[str, str], int]:
    """Return the number of jobs per (queue, state), of ``states`` or of every state.

    One grouped count over the ``(state, queue)`` index, which reads the index entries of the
    states counted: leaving out SUCCEEDED, usually most of the table, keeps it small.
    """
    jobs = Job.objects.using(_alias(alias)).order_by()
    if states is not None:
        jobs = jobs.filter(state__in=list(states))
    rows = jobs.values("queue", "state").annotate(n=Count("*"))
    return {(row["queue"], row["state"]): row["n"] for row in rows}


def workflow_counts(alias: str | None = None) -> dict[str, int]:
    """Return the number of workflows in each state (every state, 0 when none), in one grouped
    count over the ``(state, created_at)`` index."""
    rows = Workflow.objects.using(_alias(alias)).order_by().values("state").annotate(n=Count("*"))
    return {**dict.fromkeys(WorkflowStates.values, 0), **{row["state"]: row["n"] for row in rows}}


def finished_counters(alias: str | None = None) -> dict[tuple[str, str], int]:
    """Return the finished tasks per (queue, outcome), summed over every heartbeat row ever written.

    Heartbeat rows are not deleted, so the sums only grow (a stopped cluster keeps its last
    counts): counters in Prometheus' sense. Deleting old cluster rows makes them drop, which a
    scraper reads as a counter reset.
    """
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for counts in Cluster.objects.using(_alias(alias)).values_list("counts", flat=True):
        per_queue = counts.get("queues") if isinstance(counts, dict) else None
        for queue, outcomes in (per_queue or {}).items():
            for outcome in OUTCOMES:
                value = outcomes.get(outcome, 0) if isinstance(outcomes, dict) else 0
                if isinstance(value, int):
                    totals[queue, outcome] += value
    return dict(totals)


def as_json(snap: Snapshot, stats: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """Return a snapshot as plain JSON-able data (``qinfo --json``), with the broker's ``stats()``."""
    def when(value: datetime.datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "taken_at": when(snap.taken_at),
        "clusters": [
            {"id": c.id, "name": c.name, "host": c.host, "pid": c.pid, "state": c.state, "workers": c.workers,
             "queues": c.queues, "started_at": when(c.started_at), "heartbeat_age": round(c.heartbeat_age, 1),
             "clock_skew": c.clock_skew,
             "counts": {k: v for k, v in c.counts.items() if k != "tasks"},
             "tasks": [{"worker": t.worker, "job": t.job_id, "queue": t.queue, "task": t.task_name,
                        "seconds": t.seconds,
                        "progress": t.progress and {**t.progress, "updated_at": when(t.progress["updated_at"])}}
                       for t in c.tasks]}
            for c in snap.clusters
        ],
        "queues": [
            {"queue": q.name, "ready": q.ready_total, "ready_by_priority": {str(p): n for p, n in q.ready.items()},
             "delayed": q.delayed, "retrying": q.retrying, "running": q.running, "reserved": q.reserved,
             "dead_letters": q.dead_letters,
             "oldest_ready_age": None if q.oldest_ready_age is None else round(q.oldest_ready_age, 3),
             "paused": q.paused}
            for q in snap.queues
        ],
        "throughput": {
            "succeeded_last_minute": snap.throughput.succeeded_minute,
            "failed_last_minute": snap.throughput.failed_minute,
            "succeeded_last_hour": snap.throughput.succeeded_hour,
            "failed_last_hour": snap.throughput.failed_hour,
        },
        "stats": list(stats),
    }
