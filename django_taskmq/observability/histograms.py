"""Wait and run time distributions of the jobs that finished in the last hour, per task and queue.

Read from the timing rollup (:class:`.models.TimingCount`), written in the transaction that records
each outcome (``Broker.time_outcomes``), so any web process serves them (the metrics endpoint, the
dashboard) and pruning job rows (retention, ``save_limit``) takes nothing from them: one indexed
range read of the last hour's slots, summed in the database per task, queue and bucket.

* wait: from enqueue to the first execution's start (``first_started_at - enqueued_at``; a
  requested ``delay`` or ``eta`` is part of it);
* run: the latest execution (``finished_at - started_at``).

Only final outcomes that count as throughput are timed (SUCCEEDED, FAILED, DEAD); jobs that never
started (dead-lettered unopened, expired) are not counted. Like the throughput, the last hour is
every slot of :data:`.policy.throughput.SLOT` seconds that overlaps it, counted whole.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from django.db.models import Sum
from django.utils import timezone

from ..conf import get_settings
from ..models import TimingCount
from ..policy import throughput as throughput_policy
from ..policy.distribution import BUCKETS, cumulative, merged, quantile

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


def last_hour(alias: str | None = None, now: datetime.datetime | None = None) -> dict[tuple[str, str], Timing]:
    """Return ``{(task name, queue): Timing}`` for the jobs that finished in the last hour."""
    alias = alias or get_settings().database
    since = (now or timezone.now()) - WINDOW - datetime.timedelta(seconds=throughput_policy.SLOT)
    per_bucket: dict[tuple[str, str], tuple[list[int], list[int], list[float]]] = {}
    rows = (TimingCount.objects.using(alias).filter(at__gt=since).order_by().values("task_name", "queue", "bucket")
            .annotate(w=Sum("waits"), ws=Sum("wait_seconds"), r=Sum("runs"), rs=Sum("run_seconds")))
    for row in rows:
        waits, runs, sums = per_bucket.setdefault((row["task_name"], row["queue"]),
                                                  ([0] * (len(BUCKETS) + 1), [0] * (len(BUCKETS) + 1), [0.0, 0.0]))
        bucket = min(int(row["bucket"]), len(BUCKETS))
        waits[bucket] += int(row["w"] or 0)
        runs[bucket] += int(row["r"] or 0)
        sums[0] += float(row["ws"] or 0)
        sums[1] += float(row["rs"] or 0)
    timings: dict[tuple[str, str], Timing] = {}
    for key, (waits, runs, (wait_sum, run_sum)) in sorted(per_bucket.items()):
        timing = timings[key] = Timing()
        timing.wait.add(cumulative(waits), sum(waits), wait_sum)
        timing.run.add(cumulative(runs), sum(runs), run_sum)
    return timings


def by_task(timings: dict[tuple[str, str], Timing]) -> dict[str, Timing]:
    """The same, every queue of a task added up."""
    tasks: dict[str, Timing] = {}
    for (task, _), timing in sorted(timings.items()):
        total = tasks.setdefault(task, Timing())
        total.wait.add(timing.wait.buckets, timing.wait.count, timing.wait.total)
        total.run.add(timing.run.buckets, timing.run.count, timing.run.total)
    return tasks
