"""What the cluster's processes say to each other: named tuples (immutable, fast to pickle)."""

from __future__ import annotations

import pickle
from typing import NamedTuple

from ..brokers.base import Reservation
from ..execution import TaskMessage


class Want(NamedTuple):
    """Sentinel -> pusher: room for ``count`` more tasks; ``floor`` is the lowest waiting priority.

    With ``count == 0`` the pusher only looks for work above ``floor`` (to make the cluster yield).
    """

    count: int
    floor: int | None


class Ticket(NamedTuple):
    """A verified task as the sentinel holds it: what it needs to order, time and renew it, and
    the pickled :class:`~django_taskmq.execution.TaskMessage` it forwards to a worker unopened."""

    reservation: Reservation
    timeout: float | None
    blob: bytes

    @classmethod
    def of(cls, message: TaskMessage) -> Ticket:
        return cls(message.reservation, message.envelope.options.get("timeout"),
                   pickle.dumps(message, pickle.HIGHEST_PROTOCOL))

    def message(self) -> TaskMessage:
        return pickle.loads(self.blob)


class Batch(NamedTuple):
    """Pusher -> sentinel: verified tasks in pick order; ``drained`` when nothing was ready."""

    tasks: tuple[Ticket, ...] = ()
    drained: bool = False


class Stop(NamedTuple):
    """Sentinel -> pusher: reserve nothing more and exit."""
