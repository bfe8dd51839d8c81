"""SQL pieces the ORM broker and its engine modules share: table names, placeholders, chunks, and
the state literals and moves taken from the pure state table (``policy/states.py``), so no query
spells a state by hand."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from ...models import (Chore, DeadLetter, FlowBucket, IdempotencyKey, Job, OutcomeCount, QueueState, TimingCount,
                       UniqueKey)
from ...policy.states import TRANSITIONS, Event, JobState


def marks(n: int) -> str:
    """Return ``n`` placeholders: ``%s, %s, %s``."""
    return ", ".join(["%s"] * n)


def literal(*states: JobState) -> str:
    """Return the SQL list of ``states``: ``('QUEUED', 'RETRYING')``."""
    return "(" + ", ".join(f"'{state.value}'" for state in sorted(states)) + ")"


READY_SQL = literal(*JobState.READY)
RUNNING = f"'{JobState.RUNNING.value}'"


JOB = Job._meta.db_table
JOB_LABEL = Job._meta.label
FINISHED = sorted(state.value for state in JobState.FINAL)
QSTATE = QueueState._meta.db_table
BUCKET = FlowBucket._meta.db_table
DEAD_LETTER = DeadLetter._meta.db_table
CHORE = Chore._meta.db_table
KEYS = IdempotencyKey._meta.db_table
UNIQUE_KEYS = UniqueKey._meta.db_table
OUTCOMES = OutcomeCount._meta.db_table
TIMINGS = TimingCount._meta.db_table
CHUNK = 500  # rows per statement: well under SQLite's variable limit

#: The partial index of jobs by finish time that holds each finished state (see ``Job.Meta``), and
#: the states its condition names, in its order (SQLite matches an ``IN`` list as written).
FINISHED_INDEXES = {
    JobState.SUCCEEDED: ("taskmq_job_succeeded", (JobState.SUCCEEDED,)),
    JobState.FAILED: ("taskmq_job_failed", (JobState.FAILED, JobState.DEAD)),
    JobState.DEAD: ("taskmq_job_failed", (JobState.FAILED, JobState.DEAD)),
    JobState.EXPIRED: ("taskmq_job_ended", (JobState.EXPIRED, JobState.CANCELLED)),
    JobState.CANCELLED: ("taskmq_job_ended", (JobState.EXPIRED, JobState.CANCELLED)),
}


def finished_index(state: str, indexed: bool = False) -> str:
    """``FROM`` and ``WHERE`` of the jobs in the partial index that holds ``state``'s finished jobs
    (every state of its condition: FAILED and DEAD together), to go on with ``AND``.

    The states are written out, not parameters: a partial index serves a query only when the
    query's own condition implies the index's, and SQLite matches an ``IN`` list only as the index
    writes it. ``indexed`` also names the index (SQLite, whose planner has no statistics, otherwise
    takes the index of states and sorts, or walks, every job of those states).
    """
    index, states = FINISHED_INDEXES[JobState(state)]
    hint = f" INDEXED BY {index}" if indexed else ""
    if len(states) == 1:  # the index's condition is "state = ...", and must be matched as such
        return f"FROM {JOB}{hint} WHERE state = '{states[0].value}'"
    named = ", ".join(f"'{s.value}'" for s in states)
    return f"FROM {JOB}{hint} WHERE state IN ({named})"


def finished_in(state: str, indexed: bool = False) -> str:
    """``FROM`` and ``WHERE`` of the jobs finished in ``state``, to go on with ``AND``: its index's
    rows (:func:`finished_index`) of that one state."""
    job_state = JobState(state)
    if job_state not in FINISHED_INDEXES:  # not a finished state: nothing has a finish time
        return f"FROM {JOB} WHERE state = '{job_state.value}'"
    within = finished_index(job_state, indexed)
    return within if len(FINISHED_INDEXES[job_state][1]) == 1 else f"{within} AND state = '{job_state.value}'"

# Ready rows whose key is already at its limit are not candidates at all, so they cannot block the
# rows behind them. The count runs once for each keyed ready row the claim walks past, held ones
# included: it must find a key's running rows by the key (the partial index of running keyed
# rows), never by walking every running row. An engine whose planner cannot be trusted with that
# writes it its own way (:attr:`.Dialect.key_free`).
KEY_FREE = (f"(c.concurrency_key IS NULL OR c.concurrency_limit > (SELECT COUNT(*) FROM {JOB} r "
            f"WHERE r.state = {RUNNING} AND r.concurrency_key = c.concurrency_key))")


def chunks(items: Sequence, size: int = CHUNK) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# -- states in SQL: every literal comes from policy.states, every state change from its table ------
class Move(NamedTuple):
    """One event of the state table as SQL: the state it sets and the states it may leave."""

    to: str  # "'SUCCEEDED'"
    sources: str  # "('RUNNING')"
    target: JobState
    allowed: frozenset[JobState]


def move(event: Event) -> Move:
    allowed = frozenset(state for (state, e) in TRANSITIONS if e is event)
    (target,) = {TRANSITIONS[state, event] for state in allowed}
    return Move(f"'{target.value}'", literal(*allowed), target, allowed)


RESERVE, ACK, RETRY, FAIL, BURY, EXPIRE, CANCEL, GIVE, RECLAIM, REPLAY = (
    move(e) for e in (Event.RESERVE, Event.ACK, Event.FAIL_RETRY, Event.FAIL_FINAL, Event.DEAD_LETTER,
                       Event.EXPIRE, Event.CANCEL, Event.DEFER, Event.RECLAIM, Event.REPLAY)
)
STOPPED = move(Event.CANCEL_RUNNING)
SUSPEND, WAKE = move(Event.SUSPEND), move(Event.WAKE)
assert STOPPED.allowed == {JobState.RUNNING}  # "state = RUNNING" in the broker (request_cancel, cancel_requested)
assert move(Event.YIELD) == GIVE  # defer and yield are the same move


class Head:
    """A claim candidate (a ready row's head fields)."""

    __slots__ = ("id", "queue", "priority", "deliveries", "max_deliveries", "expires_at", "func", "key",
                 "key_limit", "rate")

    def __init__(self, id, queue, priority, deliveries, max_deliveries, expires_at, func, key, key_limit, rate):
        self.id = id
        self.queue = queue
        self.priority = priority
        self.deliveries = deliveries
        self.max_deliveries = max_deliveries
        self.expires_at = expires_at
        self.func = func
        self.key = key  # concurrency key, limit and rate limit (flow control)
        self.key_limit = key_limit
        self.rate = rate
