"""The broker contract every engine implements (the ORM broker is the first).

Times are seconds. Every write that ends or changes a delivery is fenced by the reservation's
lease token: a holder whose lease ran out (and was reclaimed) gets :class:`LeaseLost` and
changes nothing.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple


class Reservation(NamedTuple):
    """One delivery of a message, owned until its lease runs out.

    A named tuple: it crosses process boundaries many times per task, and tuples pickle fastest.
    """

    job_id: str
    queue: str
    priority: int
    deliveries: int
    yields: int
    token: str
    owner: str = ""
    max_deliveries: int = 0
    payload: str = ""


class Ack(NamedTuple):
    """A successful run to record with :meth:`Broker.ack_many`."""

    reservation: Reservation
    result: Any = None
    started_at: Any = None
    finished_at: Any = None


class Broker(abc.ABC):
    """Stores messages and hands them out under leases, in pick order."""

    @abc.abstractmethod
    def enqueue(self, job: Any, key: str | None = None) -> str:
        """Store one job (an unsaved Job or its column values); return its id.

        With ``key``: within the idempotency TTL, return the id of the job that key already made
        and store nothing, also when callers race.
        """

    @abc.abstractmethod
    def enqueue_many(self, jobs: Sequence[Any]) -> list[str]:
        """Store many jobs in few statements; return their ids in order."""

    @abc.abstractmethod
    def reserve(self, queues: Sequence[str], limit: int, lease: float, owner: str) -> list[Reservation]:
        """Reserve up to ``limit`` ready messages of ``queues`` in pick order for ``lease`` seconds.

        Each reserved message counts one delivery. Expired leases are reclaimed first; an expired
        message is marked EXPIRED and a message past ``max_deliveries`` goes to the DLQ instead of
        being returned.
        """

    @abc.abstractmethod
    def ack(self, reservation: Reservation, result: Any = None) -> bool:
        """Record success. Return False when this holder already acknowledged it (a no-op).

        Raises LeaseLost when the lease ran out and the message was reclaimed.
        """

    @abc.abstractmethod
    def ack_many(self, acks: Iterable[Ack]) -> list[Reservation]:
        """Record many successes in one transaction; return the reservations whose lease was lost."""

    @abc.abstractmethod
    def nack(self, reservation: Reservation, requeue: bool = True, delay: float = 0, error: str = "",
             traceback: str = "") -> bool:
        """Record a failed delivery: redeliver after ``delay`` or, when ``requeue`` is False or the
        deliveries are used up, dead-letter it. Raises LeaseLost like :meth:`ack`."""

    @abc.abstractmethod
    def defer(self, reservation: Reservation, delay: float = 0) -> bool:
        """Put an unstarted or deferring message back, visible after ``delay``; not a delivery."""

    @abc.abstractmethod
    def yield_reservation(self, reservation: Reservation, delay: float = 0) -> bool:
        """Give an unstarted message back so higher priority work runs first; not a delivery.

        Returns False (and keeps the reservation) once the message has yielded ``max_yields`` times.
        """

    @abc.abstractmethod
    def extend_lease(self, reservation: Reservation, seconds: float) -> None:
        """Renew the lease for ``seconds`` from now. Raises LeaseLost."""

    @abc.abstractmethod
    def dead_letter(self, reservation: Reservation, reason: str, error: str = "", traceback: str = "") -> bool:
        """Move the message to its queue's DLQ with ``reason``; its job becomes DEAD."""

    @abc.abstractmethod
    def dead_letters(self, queue: str | None = None) -> Any:
        """Return the DLQ entries not yet replayed (of one queue or all), newest first."""

    @abc.abstractmethod
    def replay_dead(self, dead_letter_id: int, queue: str | None = None, priority: int | None = None) -> str:
        """Requeue a dead-lettered job (same id, deliveries and yields reset); return its id."""

    @abc.abstractmethod
    def replay_all(self, queue: str | None = None) -> int:
        """Replay every pending DLQ entry (of one queue or all); return how many."""

    @abc.abstractmethod
    def purge_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        """Delete the pending DLQ entries (of one queue, or these ids) and their dead jobs; return how many."""

    @abc.abstractmethod
    def reclaim_expired(self) -> int:
        """Put messages whose lease ran out back for redelivery; return how many."""

    @abc.abstractmethod
    def stats(self) -> list[dict[str, Any]]:
        """Return per queue and priority counts: ready, delayed, reserved, dead."""
