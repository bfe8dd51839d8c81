"""What the cluster's processes say to each other: named tuples (immutable, fast to pickle)."""

from __future__ import annotations

from typing import NamedTuple

from ..execution import TaskMessage


class Want(NamedTuple):
    """Sentinel -> pusher: room for ``count`` more tasks; ``floor`` is the lowest waiting priority.

    With ``count == 0`` the pusher only looks for work above ``floor`` (to make the cluster yield).
    """

    count: int
    floor: int | None


class Batch(NamedTuple):
    """Pusher -> sentinel: verified tasks in pick order; ``drained`` when nothing was ready."""

    tasks: tuple[TaskMessage, ...] = ()
    drained: bool = False


class Stop(NamedTuple):
    """Sentinel -> pusher: reserve nothing more and exit."""
