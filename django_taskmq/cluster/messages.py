"""What the cluster's processes say to each other (frozen values, never bare tuples)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..execution import TaskMessage


@dataclass(frozen=True, slots=True)
class Want:
    """Sentinel -> pusher: room for ``count`` more tasks; ``floor`` is the lowest waiting priority.

    With ``count == 0`` the pusher only looks for work above ``floor`` (to make the cluster yield).
    """

    count: int
    floor: int | None


@dataclass(frozen=True, slots=True)
class Batch:
    """Pusher -> sentinel: verified tasks in pick order; ``drained`` when nothing was ready."""

    tasks: tuple[TaskMessage, ...] = field(default_factory=tuple)
    drained: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    """Sentinel -> pusher: reserve nothing more and exit."""
