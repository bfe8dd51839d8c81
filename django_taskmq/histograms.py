"""Wait and run time distributions of the jobs that finished in the last hour, per task and queue.

Read from the job table, so any web process serves them (the metrics endpoint, the dashboard):
one statement per read, whose two branches (successes, failures) each walk a partial index of
finished jobs by ``finished_at`` (``taskmq_job_succeeded``, ``taskmq_job_failed``) over the last
hour only; the buckets are summed in the database. Only what the table holds is counted: successes pruned by
``save_limit`` are gone from it.

* wait: from enqueue to the first execution's start (``first_started_at - enqueued_at``; a
  requested ``delay`` or ``eta`` is part of it);
* run: the latest execution (``finished_at - started_at``).

Jobs that never started (dead-lettered unopened, expired) are not counted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from django.db import connections
from django.utils import timezone

from .brokers.orm.dialect import dialect_named
from .brokers.orm.sql import finished_index
from .conf import get_settings
from .policy.distribution import BUCKETS, merged, quantile
from .policy.states import JobState

WINDOW = datetime.timedelta(hours=1)


@dataclass
class Histogram:
    """Observations at or below each bound of :data:`BUCKETS` (cumulative), their number and sum."""

    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    count: int = 0
    total: float = 0.0

    def add(self, buckets: list[int], count: int, total: float) -> None:
        self.buckets = merged(self.buckets, buckets)
        self.count += count
        self.total += total

    def quantile(self, q: float) -> float | None:
        """The estimated ``q``-quantile in seconds (see :func:`~.policy.distribution.quantile`)."""
        return quantile(q, BUCKETS, self.buckets, self.count)


@dataclass
class Timing:
    """The wait and run time histograms of one task in one queue."""

    wait: Histogram = field(default_factory=Histogram)
    run: Histogram = field(default_factory=Histogram)


def _statement(vendor: str, quote) -> str:
    """One statement: the buckets of both histograms per task and queue, over two index ranges."""
    dialect = dialect_named(vendor)
    assert dialect is not None  # the broker's engine
    seconds = dialect.seconds_between
    wait = seconds(quote("first_started_at"), quote("enqueued_at"))
    run = seconds(quote("finished_at"), quote("started_at"))
    sums = ", ".join(f"SUM(CASE WHEN {kind} <= {bound!r} THEN 1 ELSE 0 END)"
                     for kind in ("w", "r") for bound in BUCKETS)
    # One branch per partial index of finished jobs by finished_at (successes; FAILED and DEAD),
    # over a range closed on both ends; SQLite takes those indexes only when named (see
    # monitoring.throughput).
    branches = " UNION ALL ".join(
        f"SELECT {quote('task_name')} AS task_name, {quote('queue')} AS queue, {wait} AS w, {run} AS r "
        f"{finished_index(state, dialect.finished_indexed)} AND {quote('finished_at')} >= %s "
        f"AND {quote('finished_at')} <= %s AND {quote('started_at')} IS NOT NULL "
        f"AND {quote('first_started_at')} IS NOT NULL"
        for state in (JobState.SUCCEEDED, JobState.FAILED))
    return (f"SELECT task_name, queue, COUNT(*), SUM(w), SUM(r), {sums} FROM ({branches}) AS finished "
            f"GROUP BY task_name, queue")


def last_hour(alias: str | None = None, now: datetime.datetime | None = None) -> dict[tuple[str, str], Timing]:
    """Return ``{(task name, queue): Timing}`` for the jobs that finished in the last hour."""
    alias = alias or get_settings().database
    now = now or timezone.now()
    connection = connections[alias]
    adapt = connection.ops.adapt_datetimefield_value
    since, until = adapt(now - WINDOW), adapt(now + datetime.timedelta(days=1))
    timings: dict[tuple[str, str], Timing] = {}
    n = len(BUCKETS)
    with connection.cursor() as cursor:
        cursor.execute(_statement(connection.vendor, connection.ops.quote_name), [since, until] * 2)
        for row in cursor.fetchall():
            task, queue, count, wait_sum, run_sum = row[:5]
            counts = [int(c or 0) for c in row[5:]]
            timing = timings.setdefault((task, queue), Timing())
            timing.wait.add(counts[:n], int(count), float(wait_sum or 0))
            timing.run.add(counts[n:], int(count), float(run_sum or 0))
    return timings


def by_task(timings: dict[tuple[str, str], Timing]) -> dict[str, Timing]:
    """The same, every queue of a task added up."""
    tasks: dict[str, Timing] = {}
    for (task, _), timing in sorted(timings.items()):
        total = tasks.setdefault(task, Timing())
        total.wait.add(timing.wait.buckets, timing.wait.count, timing.wait.total)
        total.run.add(timing.run.buckets, timing.run.count, timing.run.total)
    return tasks
