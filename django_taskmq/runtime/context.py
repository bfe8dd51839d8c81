"""The one "current job" context: the delivery the calling code runs, with what the layers around
its task put beside it.

One context variable holds a frozen :class:`Delivery`. Each layer that wraps a task (sync mode,
the worker's interrupts, the execution itself) sets a copy with its own fields filled
(:func:`enter`) and puts the previous one back after (:func:`leave`). Everything that asks which
job runs reads it: ``current_job()`` (progress, ``cancelled``, ``upstream``), the task's log
records (``joblog.JobFields``), a coroutine task's hand-over, the worker's thread-start guard. A
context variable is per thread and copied into asyncio tasks and ``async_to_sync``'s threads, so a
coroutine task sees its job, and a worker's other threads see theirs.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..brokers.base import Reservation
from ..envelope import Envelope


class CoroutineWatch(Protocol):
    """Told of a coroutine task's hand-over to its event loop (a worker interrupts a coroutine by
    cancelling its asyncio task, never in its thread: see cluster.interrupts)."""

    def handing_over(self) -> None:
        """In the task's thread: its coroutine is about to go to an event loop of its own."""

    def started(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task) -> None:
        """In the event loop's thread: the coroutine starts, as ``task`` of ``loop``."""


@dataclass(frozen=True)
class Delivery:
    """The delivery the calling code runs (its fields None where no layer set them)."""

    reservation: Reservation | None = None  # set while its task runs (execution)
    envelope: Envelope | None = None
    #: Answers whether the task's cancellation was requested (set by a worker).
    cancel_probe: Callable[[], bool] | None = None
    #: Told of a coroutine's hand-over to its loop (set by a worker).
    watch: CoroutineWatch | None = None
    #: The worker's ``(Interrupts, Running)`` of the task, for its thread-start guard.
    interruptible: Any = None
    #: Sync mode's list of the exceptions its task raised: the caller records the outcome while the
    #: exception is current, and re-raises a KeyboardInterrupt, as Django's ImmediateBackend does.
    raised: list[BaseException] | None = None


_NOTHING = Delivery()
_current: contextvars.ContextVar[Delivery] = contextvars.ContextVar("taskmq_current_job", default=_NOTHING)


def get() -> Delivery:
    """Return the delivery the calling code runs (all fields None outside a task)."""
    return _current.get()


def enter(**fields: Any) -> contextvars.Token[Delivery]:
    """Make the current delivery a copy of itself with ``fields`` set; return the token that
    :func:`leave` takes to put the previous one back."""
    return _current.set(replace(_current.get(), **fields))


def leave(token: contextvars.Token[Delivery]) -> None:
    """Put back the delivery that was current before :func:`enter` returned ``token``."""
    _current.reset(token)
