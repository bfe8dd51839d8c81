"""The timing rollup's arithmetic (pure): wait and run times of final outcomes bucketed per slot
(:data:`.throughput.SLOT`), queue, task and bucket of :data:`.distribution.BUCKETS`.

Each rollup row holds, for one bucket, how many waits and how many runs fell in it and their sums
in seconds: an outcome adds its wait to the row of its wait's bucket and its run to the row of its
run's bucket. Summing the rows of a window gives each histogram's per-bucket counts and its sum.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from .distribution import bucket_of
from .throughput import slot_of

Key = tuple[datetime.datetime, str, str, int]  # (slot start, queue, task name, bucket index)
Sums = tuple[int, float, int, float]  # (waits, their seconds, runs, their seconds)


def tally(timed: Iterable[tuple[datetime.datetime, str, str, float, float]]) -> dict[Key, Sums]:
    """Bucket ``(finished at, queue, task name, wait seconds, run seconds)`` outcomes; return the
    rollup rows to add, sorted by key (concurrent recorders lock them in one order)."""
    rows: dict[Key, list] = {}
    for finished, queue, task, wait, run in timed:
        slot = slot_of(finished)
        wait_row = rows.setdefault((slot, queue, task, bucket_of(wait)), [0, 0.0, 0, 0.0])
        wait_row[0] += 1
        wait_row[1] += wait
        run_row = rows.setdefault((slot, queue, task, bucket_of(run)), [0, 0.0, 0, 0.0])
        run_row[2] += 1
        run_row[3] += run
    return {key: (w, ws, r, rs) for key, (w, ws, r, rs) in sorted(rows.items())}
