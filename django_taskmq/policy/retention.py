"""How long finished jobs are kept, per final state: the defaults and the cut-off times.

Pure: no Django, no database. The cluster deletes a finished job once it is older than its
state's retention (``TASKMQ['retention']``), a dead letter with its job.
"""

from __future__ import annotations

from collections.abc import Mapping

from .states import JobState

DAY = 86400.0
#: The chore (``Broker.hold_chore``) under which one cluster at a time deletes old jobs for all.
CHORE = "prune"
#: Seconds the pruning cluster holds the chore per renewal: another takes over this long after it died.
CHORE_LEASE = 30.0
#: The share of its time the pruning cluster's monitor may spend deleting, a batch at a time.
SHARE = 0.1
#: Seconds one batch of deleting should take: a job that runs meanwhile shares the database with it.
STRETCH = 0.010
#: The fewest and the most jobs one batch deletes (the size adapts between them, see next_batch).
BATCHES = (50, 1000)

#: Seconds each final state is kept by default; ``None`` keeps for ever. Successes are also capped
#: in number by ``save_limit``. Failures are kept long enough to be looked at after a holiday and
#: dead letters long enough to be replayed after a fix has shipped; what was expired or cancelled
#: on purpose is of interest for a week.
DEFAULTS: Mapping[str, float | None] = {
    "succeeded": 7 * DAY,
    "failed": 30 * DAY,
    "dead": 30 * DAY,
    "expired": 7 * DAY,
    "cancelled": 7 * DAY,
}

#: The job state each key names.
STATES: Mapping[str, JobState] = {
    "succeeded": JobState.SUCCEEDED,
    "failed": JobState.FAILED,
    "dead": JobState.DEAD,
    "expired": JobState.EXPIRED,
    "cancelled": JobState.CANCELLED,
}


def merged(given: Mapping[str, float | None]) -> dict[str, float | None]:
    """Return :data:`DEFAULTS` with the keys of ``given`` replaced (a partial dict keeps the rest)."""
    return {**DEFAULTS, **given}


def cutoffs(retention: Mapping[str, float | None], now: float) -> dict[JobState, float]:
    """Return, per final state with a retention, the epoch time before which its jobs finished are
    deleted (``now`` minus the retention)."""
    return {STATES[key]: now - seconds for key, seconds in retention.items() if seconds is not None}


def pause_after(spent: float, share: float = SHARE) -> float:
    """Seconds to wait after a step of deleting that took ``spent`` seconds, so that deleting takes
    ``share`` of the time: a step, then a pause ``(1 - share) / share`` times as long."""
    return max(spent, 0.0) * (1.0 - share) / share


def next_batch(size: int, spent: float, stretch: float = STRETCH, batches: tuple[int, int] = BATCHES) -> int:
    """The size of the next batch after one of ``size`` jobs that took ``spent`` seconds: a quarter
    larger while a batch takes less than ``stretch``, half as large when it takes more, within
    ``batches``. A quiet database deletes in large batches; a loaded one, where each statement
    waits for a core, in batches that stay short."""
    smallest, largest = batches
    grown = size + max(size // 4, 1) if spent < stretch else size // 2
    return min(max(grown, smallest), largest)
