"""Job states and the events that move a job between them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

from django_taskmq.exceptions import TaskMQError


class InvalidTransition(TaskMQError):
    """An event is not allowed in the job's current state; nothing was changed."""

    def __init__(self, state: object, event: object, reason: str = "") -> None:
        self.state = state
        self.event = event
        super().__init__(reason or f"event {_name(event)} is not allowed in state {_name(state)}")


def _name(value: object) -> str:
    return value.value if isinstance(value, enum.Enum) else repr(value)


class JobState(str, enum.Enum):
    """The state of a job as stored in the database."""

    WAITING = "WAITING"  # A workflow step waiting for its dependencies: not claimable.
    QUEUED = "QUEUED"  # Waiting, possibly not visible yet (delay/eta).
    RUNNING = "RUNNING"  # Held by a cluster under a lease: reserved or executing.
    RETRYING = "RETRYING"  # A delivery failed; waiting for redelivery.
    SUSPENDED = "SUSPENDED"  # A durable task sleeps or waits for a signal: not claimable until it wakes.
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # Failure acknowledged (ack_failures); not redelivered.
    DEAD = "DEAD"  # In the dead-letter queue.
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"

    # Filled in below: members can't be referenced inside the class body.
    READY: ClassVar[frozenset[JobState]]
    FINAL: ClassVar[frozenset[JobState]]

    def __str__(self) -> str:
        return self.value


JobState.READY = frozenset({JobState.QUEUED, JobState.RETRYING})
JobState.FINAL = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.EXPIRED, JobState.CANCELLED}
)


class Event(str, enum.Enum):
    """Something that happens to a job."""

    RESERVE = "RESERVE"
    ACK = "ACK"
    FAIL_RETRY = "FAIL_RETRY"  # Failed delivery, redelivered later (nack with requeue).
    FAIL_FINAL = "FAIL_FINAL"  # Failed delivery acknowledged (ack_failures).
    DEAD_LETTER = "DEAD_LETTER"
    EXPIRE = "EXPIRE"
    CANCEL = "CANCEL"  # A waiting job cancelled: it never runs.
    CANCEL_RUNNING = "CANCEL_RUNNING"  # A running job stopped on request (cancel): it ends, never retried.
    DEFER = "DEFER"
    YIELD = "YIELD"
    RECLAIM = "RECLAIM"  # The lease ran out.
    RELEASE = "RELEASE"  # A workflow step's last dependency was satisfied: it can run.
    REOPEN = "REOPEN"  # A workflow step cancelled by a dependency's end waits again (that step was replayed).
    REPLAY = "REPLAY"  # Out of the dead-letter queue (or a failed, expired or cancelled job) back to the queue.
    SUSPEND = "SUSPEND"  # A durable task sleeps or waits for a signal: its worker given back, not a delivery.
    WAKE = "WAKE"  # A suspended job's wake time is near, or its signal came: it can run again.

    def __str__(self) -> str:
        return self.value


def _table() -> Mapping[tuple[JobState, Event], JobState]:
    s, e = JobState, Event
    table: dict[tuple[JobState, Event], JobState] = {}
    for ready in JobState.READY:
        table[ready, e.RESERVE] = s.RUNNING
        table[ready, e.EXPIRE] = s.EXPIRED
        table[ready, e.CANCEL] = s.CANCELLED
        # The poison guard fires at reserve time, before the job runs.
        table[ready, e.DEAD_LETTER] = s.DEAD
    table.update(
        {
            (s.WAITING, e.RELEASE): s.QUEUED,
            (s.WAITING, e.CANCEL): s.CANCELLED,  # a dependency failed, or it was cancelled
            (s.CANCELLED, e.REOPEN): s.WAITING,
            (s.QUEUED, e.REOPEN): s.WAITING,  # replayed itself while a dependency has not succeeded
            (s.RUNNING, e.ACK): s.SUCCEEDED,
            (s.RUNNING, e.FAIL_RETRY): s.RETRYING,
            (s.RUNNING, e.FAIL_FINAL): s.FAILED,
            (s.RUNNING, e.DEAD_LETTER): s.DEAD,
            (s.RUNNING, e.DEFER): s.QUEUED,
            (s.RUNNING, e.YIELD): s.QUEUED,
            (s.RUNNING, e.SUSPEND): s.SUSPENDED,
            (s.SUSPENDED, e.WAKE): s.QUEUED,  # visible from its wake time (at once for a signal)
            (s.SUSPENDED, e.CANCEL): s.CANCELLED,  # cancelled while it sleeps or waits: at once
            (s.RUNNING, e.RECLAIM): s.RETRYING,
            (s.RUNNING, e.EXPIRE): s.EXPIRED,
            (s.RUNNING, e.CANCEL_RUNNING): s.CANCELLED,
            (s.DEAD, e.REPLAY): s.QUEUED,
            (s.FAILED, e.REPLAY): s.QUEUED,
            (s.EXPIRED, e.REPLAY): s.QUEUED,
            (s.CANCELLED, e.REPLAY): s.QUEUED,
        }
    )
    return MappingProxyType(table)


#: Every legal move: ``(state, event) -> new state``.
TRANSITIONS: Mapping[tuple[JobState, Event], JobState] = _table()


def transition(state: JobState | str, event: Event | str) -> JobState:
    """Return the state a job in ``state`` moves to on ``event``; raise InvalidTransition if illegal.

    Plain strings (as stored in the database) are accepted for both.
    """
    try:
        state = JobState(state)
    except ValueError:
        raise InvalidTransition(state, event, f"unknown job state {state!r}") from None
    try:
        event = Event(event)
    except ValueError:
        raise InvalidTransition(state, event, f"unknown event {event!r}") from None
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise InvalidTransition(state, event) from None


def used_up(deliveries: int, max_deliveries: int) -> bool:
    """The poison guard: True once a job has had all the deliveries it may have.

    A job that is ready with its deliveries used up is dead-lettered when it is next claimed (it
    crashed or lost its lease on every delivery); a failed execution on its last delivery
    dead-letters it at once. Sync mode does not run it (the next claim buries it).
    """
    return deliveries >= max_deliveries


#: The same rule as SQL, for a query over jobs that still have a delivery left.
HAS_DELIVERIES_LEFT_SQL = "deliveries < max_deliveries"
