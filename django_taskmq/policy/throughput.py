"""The throughput rollup's arithmetic (pure): outcomes counted per queue and slot of
:data:`SLOT` seconds, and how a window of slots is read back.

Slots of ten seconds, not minutes: "the last minute" is then the slots that started in the last
60 seconds, counted whole (a reading spans 60 to 70 s of outcomes), where minute slots would have
to guess how much of the previous minute to count.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable

#: Seconds per slot of the rollup.
SLOT = 10
#: How long the rollup keeps a slot (the dashboard reads the last hour).
KEPT = datetime.timedelta(days=1)
#: The final states counted as failed (as the dashboard always counted them).
FAILED = frozenset({"FAILED", "DEAD"})


def slot_of(moment: datetime.datetime) -> datetime.datetime:
    """The start of the slot ``moment`` falls in."""
    return moment.replace(second=moment.second - moment.second % SLOT, microsecond=0)


Slot = tuple[datetime.datetime, str]  # (slot start, queue)


def tally(outcomes: Iterable[tuple[datetime.datetime, str, str]]) -> dict[Slot, tuple[int, int]]:
    """Count ``(finished at, queue, final state)`` outcomes per (slot, queue) as (succeeded,
    failed); other final states (CANCELLED) are not throughput."""
    succeeded: Counter[Slot] = Counter()
    failed: Counter[Slot] = Counter()
    for finished, queue, state in outcomes:
        if state == "SUCCEEDED":
            succeeded[slot_of(finished), queue] += 1
        elif state in FAILED:
            failed[slot_of(finished), queue] += 1
    return {key: (succeeded[key], failed[key]) for key in sorted({*succeeded, *failed})}
