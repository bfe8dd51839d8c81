"""Read-only numbers about the queues and the clusters, for people and scrapers.

The admin's dashboard, ``qmonitor``, ``qinfo --json`` and the metrics endpoint all read them here.
Times are the database's (its clock decides what is ready and which clusters are alive, see
:mod:`.brokers.clock`), read once per snapshot.
Reads need no broker: the models are queried directly on ``TASKMQ['database']``, and every query
is shaped to use a partial index of the job table, so millions of finished rows do not slow it
down: ready rows through ``taskmq_job_ready``, running and failed ones through
``taskmq_job_state_queue``, the last hour's outcomes through ``taskmq_job_succeeded`` and
``taskmq_job_failed`` (named on SQLite, see :func:`throughput`), pending dead letters through
``taskmq_dead_pending``.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import CharField, Count, Min, Q
from django.db.models.functions import Cast, Substr
from django.utils import timezone

from .brokers.clock import as_datetime, clock_for
from .brokers.orm.dialect import dialect_for
from .brokers.orm.sql import finished_index
from .conf import get_settings
from .models import READY_STATES, Cluster, DeadLetter, Job, QueuePause, Workflow, WorkflowStates
from .policy import retention as retention_policy
from .policy.states import JobState
from .policy.progress import read as read_progress

#: A cluster is alive while its heartbeat is younger than this (seconds) and it has not stopped.
ALIVE_WITHIN = 30.0
#: Outcomes a heartbeat counts per queue (``counts["queues"]``), as the sentinel names them.
OUTCOMES = ("succeeded", "failed", "timeouts", "crashes", "suspended")  # suspended: durable tasks' sleeps and waits
CHART_MINUTES = 60
#: The minute of ``finished_at`` as text ("2026-01-31 12:34", UTC): grouping by it is one string
#: operation per row on every engine, where ``TruncMinute`` calls a Python function per row on SQLite
#: (six times slower on the chart's 40,000 rows of a busy hour).
MINUTE = Substr(Cast("finished_at", CharField()), 1, 16)


@dataclass
class QueueStats:
    """One queue now: ready jobs by priority, delayed, retrying, running, dead letters waiting."""

    name: str
    ready: dict[int, int] = field(default_factory=dict)  # priority -> ready jobs (visible now), highest first
    delayed: int = 0  # QUEUED, not visible yet (delay, eta)
    retrying: int = 0  # RETRYING, waiting for its backoff
    running: int = 0  # RUNNING: reserved by a cluster, waiting there or executing
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


def queue_stats(alias: str | None = None, now: float | None = None) -> list[QueueStats]:
    """Return every configured queue (and any other one holding work) with its numbers now."""
    alias, now = _alias(alias), database_now(alias).timestamp() if now is None else now
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
    for row in jobs.filter(state=JobState.RUNNING.value).values("queue").annotate(n=Count("*")):
        of(row["queue"]).running = row["n"]
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
    from .models import Chore

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
    """Return the jobs that succeeded and failed (FAILED or DEAD) in the last minute and hour."""
    alias, now = _alias(alias), now or database_now(alias)
    hour_ago, minute_ago = now - datetime.timedelta(hours=1), now - datetime.timedelta(minutes=1)
    start = (now - datetime.timedelta(minutes=CHART_MINUTES - 1)).replace(second=0, microsecond=0)
    buckets: dict[datetime.datetime, list[int]] = {start + datetime.timedelta(minutes=i): [0, 0]
                                                   for i in range(CHART_MINUTES)}
    result = Throughput()
    connection = connections[alias]
    adapt = connection.ops.adapt_datetimefield_value
    minute_sql, minute_params = _compiled(MINUTE, alias)
    indexed = dialect_for(connection).finished_indexed
    # One statement per partial index of finished jobs by finish time (successes; FAILED and DEAD),
    # over a range closed on both ends: per minute of the last hour, and how many of the last
    # minute. Raw SQL, because SQLite takes the index only when the statement names it (its planner
    # has no statistics): with the ORM it walked every success in the table (114 ms beside 289,000).
    # COUNT(*) and COUNT(CASE ... finished_at ...) read the index's column alone.
    for index, state in enumerate((JobState.SUCCEEDED, JobState.FAILED)):
        statement = (f"SELECT {minute_sql}, COUNT(*), COUNT(CASE WHEN finished_at >= %s THEN 1 END) "
                     f"{finished_index(state, indexed)} AND finished_at >= %s AND finished_at <= %s GROUP BY 1")
        with connection.cursor() as cursor:
            cursor.execute(statement, [*minute_params, adapt(minute_ago), adapt(hour_ago),
                                       adapt(now + datetime.timedelta(days=1))])
            rows = cursor.fetchall()
        hour = last_minute = 0
        for text, n, last in rows:
            hour, last_minute = hour + n, last_minute + last
            at = _minute(text, now)
            bucket = buckets.get(at) if at is not None else None
            if bucket is not None:
                bucket[index] += n
        if index == 0:
            result.succeeded_hour, result.succeeded_minute = hour, last_minute
        else:
            result.failed_hour, result.failed_minute = hour, last_minute
    result.per_minute = [(minute, ok, failed) for minute, (ok, failed) in buckets.items()]
    return result


def _compiled(expression: Any, alias: str) -> tuple[str, list]:
    """SQL and parameters of an expression over the job table, as the ORM writes it for ``alias``."""
    query = Job.objects.using(alias).annotate(value=expression).query
    sql, params = query.get_compiler(alias).compile(query.annotations["value"])
    return sql, list(params)


def _minute(text: str, now: datetime.datetime) -> datetime.datetime | None:
    """Parse a :data:`MINUTE` key back into a datetime (aware in UTC when ``now`` is aware)."""
    try:
        minute = datetime.datetime.strptime(str(text)[:16], "%Y-%m-%d %H:%M")
    except ValueError:
        return None
    return minute.replace(tzinfo=datetime.UTC) if timezone.is_aware(now) else minute


def snapshot(alias: str | None = None) -> Snapshot:
    """Return the queues, the clusters alive and the recent throughput, read now."""
    now = database_now(alias)
    return Snapshot(taken_at=now, queues=queue_stats(alias, now.timestamp()), clusters=clusters_alive(alias, now),
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
             "delayed": q.delayed, "retrying": q.retrying, "running": q.running, "dead_letters": q.dead_letters,
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
