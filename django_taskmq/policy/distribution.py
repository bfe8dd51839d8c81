"""Histograms of durations: the buckets, and quantiles estimated from them.

The estimate is Prometheus's ``histogram_quantile``: the rank's bucket is found in the cumulative
counts, and the value interpolated linearly inside it (from 0 for the first bucket); a rank in the
last, unbounded bucket reads as the largest finite bound.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

#: Upper bounds (seconds) of the wait and run time buckets: from 5 ms to an hour (then +Inf).
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                              300.0, 900.0, 3600.0)


def quantile(q: float, bounds: Sequence[float], cumulative: Sequence[int], total: int) -> float | None:
    """Estimate the ``q``-quantile (0..1) of ``total`` observations whose count at or below each of
    ``bounds`` is ``cumulative`` (the rest are above the last bound); None without observations."""
    if total <= 0:
        return None
    rank = q * total
    previous_count, previous_bound = 0, 0.0
    for bound, count in zip(bounds, cumulative):
        if count >= rank and count > previous_count:
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_count, previous_bound = count, bound
    return float(bounds[-1]) if bounds else None


def merged(*cumulatives: Sequence[int]) -> list[int]:
    """Bucket counts of several histograms with the same bounds, added up."""
    return [sum(counts) for counts in zip(*cumulatives)]


def bucket_of(seconds: float, bounds: Sequence[float] = BUCKETS) -> int:
    """The index of the first of ``bounds`` at or above ``seconds`` (``len(bounds)``: above them
    all, the +Inf bucket). A negative duration (clocks of two hosts) is in the first bucket."""
    return bisect.bisect_left(bounds, seconds)


def cumulative(counts: Sequence[int], bounds: Sequence[float] = BUCKETS) -> list[int]:
    """Per-bucket counts (indexes of :func:`bucket_of`, the last one +Inf) as the cumulative
    counts at or below each of ``bounds``, as Prometheus's ``le`` buckets are."""
    totals, running = [], 0
    for count in counts[:len(bounds)]:
        running += count
        totals.append(running)
    return totals + [running] * (len(bounds) - len(totals))
