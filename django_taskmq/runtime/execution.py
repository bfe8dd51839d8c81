"""Running one task: unpack a reservation, execute it, describe the outcome.

The cluster and sync mode share these functions, so a task runs the same way in both.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import time
import traceback as tb
from typing import Any, NamedTuple

from asgiref.sync import async_to_sync

from ..observability import reporting
from . import context
from .binding import bind, path_signature
from ..brokers.base import Reservation
from ..conf import get_settings
from .durable_context import DurableContext, Suspended
from ..envelope import Envelope, seal_result, verify_pickled
from ..exceptions import Defer, JobCancelled, Reject, RetryLater
from .loading import callable_for, is_django_task, is_durable, resolve
from .progress import CurrentJob, cancel_requested
from ..signals import pre_execute
from ..policy.storable import clip_head, clip_tail

class Status(str, enum.Enum):
    """How one delivery ended, as the worker (or the sentinel, for a lost one) reports it."""

    SUCCESS = "success"
    FAILURE = "failure"  # the task raised
    RETRY = "retry"  # the task raised RetryLater
    DEFER = "defer"  # the task raised Defer
    REJECT = "reject"  # the task raised Reject, or its function cannot be imported
    TIMEOUT = "timeout"  # the sentinel killed it at its timeout
    CRASH = "crash"  # the worker process died
    UNSTORABLE = "unstorable"  # the result cannot be stored; not retried: a re-run would return it again
    CANCELLED = "cancelled"  # stopped on a cancellation request (django_taskmq.cancel); never retried
    SUSPEND = "suspend"  # a durable task sleeps or waits: result is (wake_at, signal); not a delivery


SUCCESS, FAILURE, RETRY, DEFER, REJECT, TIMEOUT, CRASH, UNSTORABLE, CANCELLED, SUSPEND = Status


def current_job() -> CurrentJob | None:
    """Return the job the calling code runs in, or None outside a task: its id (a ``str``) with
    :meth:`~django_taskmq.runtime.progress.CurrentJob.set_progress`."""
    reservation = context.get().reservation
    return None if reservation is None else CurrentJob(reservation)


class TaskMessage(NamedTuple):
    """A verified task ready for a worker."""

    reservation: Reservation
    envelope: Envelope


class Outcome(NamedTuple):
    """What happened to one delivery; the monitor records it."""

    reservation: Reservation
    envelope: Envelope | None
    status: Status
    result: Any = None
    error: str = ""
    traceback: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0
    delay: float | None = None


def unpack(reservation: Reservation, salt: str) -> TaskMessage:
    """Verify and unpickle a reserved package; raise BadPackage with the reason."""
    stripped, envelope, _ = unpack_verified(reservation, salt)
    return TaskMessage(stripped, envelope)


def unpack_verified(reservation: Reservation, salt: str) -> tuple[Reservation, Envelope, bytes]:
    """:func:`unpack`'s parts: the reservation without its package, the envelope, and the envelope's
    pickle exactly as its signature was verified (the pusher forwards those bytes)."""
    envelope, pickled = verify_pickled(reservation.payload, salt)
    # The payload is not needed any more: keep what travels between processes small.
    return reservation._replace(payload=""), envelope, pickled


def execute(message: TaskMessage) -> Outcome:
    """Run the task of ``message`` and return its outcome; never raises for the task's errors."""
    if get_settings().opentelemetry:  # only then is opentelemetry imported
        from ..observability import tracing

        return tracing.run(message, _execute)
    return _execute(message)


def _execute(message: TaskMessage) -> Outcome:
    envelope = message.envelope
    started = time.time()
    try:
        func = callable_for(envelope.func)
    except Exception as exc:
        # Not the task's failure: no delivery could run it, so it is not retried.
        outcome = _outcome(message, REJECT, started, exc)
        reporting.failed(exc, message.reservation, envelope, retried=False)
        return outcome._replace(error=clip_head(f"cannot import {envelope.func}: {outcome.error}"))
    try:
        bind(path_signature(envelope.func), envelope.args, envelope.kwargs, envelope.func)
    except TypeError as exc:
        # The call does not fit the function (changed since the enqueue, or a row written by
        # hand): no delivery could run it, so it is not retried.
        outcome = _outcome(message, REJECT, started, exc)
        reporting.failed(exc, message.reservation, envelope, retried=False)
        return outcome
    # current_job() reads it, and so do the task's own log records (joblog.JobFields).
    running = context.enter(reservation=message.reservation, envelope=envelope)
    try:
        if pre_execute.has_listeners():
            pre_execute.send(sender=Outcome, job_id=message.reservation.job_id, func=envelope.func, envelope=envelope)
        value = func(*_context(message), *envelope.args, **envelope.kwargs)
        if inspect.isawaitable(value):  # a coroutine function
            value = run_coroutine(value)
    except RetryLater as exc:
        return _outcome(message, RETRY, started, exc, delay=exc.delay)
    except Defer as exc:
        return Outcome(message.reservation, envelope, DEFER, started_at=started, finished_at=time.time(), delay=exc.delay)
    except Reject as exc:
        return _outcome(message, REJECT, started, exc)
    except JobCancelled as exc:
        return _outcome(message, CANCELLED, started, exc)
    except Suspended as exc:
        return Outcome(message.reservation, envelope, SUSPEND, (exc.wake_at, exc.signal),
                       started_at=started, finished_at=time.time())
    # sys.exit() in a task is its failure; so is a CancelledError (a coroutine task cancelled), unless
    # the job's cancellation was requested: that is how a coroutine task learns of it.
    except (Exception, SystemExit, KeyboardInterrupt, asyncio.CancelledError) as exc:
        cancelled = isinstance(exc, asyncio.CancelledError) and cancel_requested()
        if not cancelled:  # held: reported once the outcome has left (reporting.deliver)
            reporting.failed(exc, message.reservation, envelope)
            kept = context.get().raised
            if kept is not None:
                kept.append(exc)
        return _outcome(message, CANCELLED if cancelled else FAILURE, started, exc)
    finally:
        context.leave(running)
    return Outcome(message.reservation, envelope, SUCCESS, value, started_at=started, finished_at=time.time())


def _context(message: TaskMessage) -> tuple:
    """Return the leading arguments of a call: a Django task with ``takes_context=True`` gets its
    backend's ``TaskContext`` (``task_context``, duck-typed: see django_taskmq.backends.tasks); a
    durable task (``@durable``) its :class:`~.durable_context.DurableContext`."""
    target = resolve(message.envelope.func)
    if is_durable(target):  # its steps' values are encrypted as its result would be
        return (DurableContext(message.reservation, encrypt=bool(message.envelope.options.get("encrypt"))),)
    if is_django_task(target) and getattr(target, "takes_context", False):
        return (target.get_backend().task_context(message.reservation.job_id),)
    return ()


def run_coroutine(awaitable: Any) -> Any:
    """Run the awaitable of a coroutine task to its end on an event loop of its own, in a thread of
    its own (``async_to_sync``); the calling thread waits. The task's watch, if any, is told."""
    watch = context.get().watch
    if watch is not None:
        watch.handing_over()
    return async_to_sync(_awaited)(awaitable)


async def _awaited(awaitable: Any) -> Any:
    watch = context.get().watch
    if watch is not None:
        task = asyncio.current_task()
        if task is not None:
            watch.started(asyncio.get_running_loop(), task)
    return await awaitable


def _outcome(message: TaskMessage, status: Status, started: float, exc: BaseException, delay: float | None = None) -> Outcome:
    return Outcome(
        message.reservation, message.envelope, status,
        error=clip_head(describe(exc)), traceback=clip_tail(tb.format_exc()),
        started_at=started, finished_at=time.time(), delay=delay,
    )


def lost(reservation: Reservation, envelope: Envelope | None, status: Status, error: BaseException,
         started_at: float | None = None, traceback: str = "") -> Outcome:
    """The outcome of a task stopped from outside: interrupted or killed at its timeout, or lost
    with its worker. Its error reads ``TaskTimeout: ran past its timeout of 5s``."""
    now = time.time()
    return Outcome(reservation, envelope, status, error=clip_head(f"{type(error).__name__}: {_message(error)}"),
                   traceback=clip_tail(traceback), started_at=started_at or now, finished_at=now)


def describe(exc: BaseException) -> str:
    """Return "module.Error: message" for ``exc``, even when its ``__str__`` raises."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    text = _message(exc)
    return f"{name}: {text}" if text else name


def _message(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder when its ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:
        return "<the exception's message could not be read>"


def seal(outcome: Outcome, settings: Any) -> Outcome:
    """Return ``outcome`` with its result pickled and signed for storage.

    A result that cannot be pickled, or whose pickle is above ``TASKMQ['max_result_size']``,
    turns the outcome into :data:`UNSTORABLE` with the reason, and the value is dropped. The result
    of a job whose arguments were encrypted (its ``encrypt`` option) is encrypted too.
    """
    if outcome.status != SUCCESS or outcome.result is None:
        return outcome
    encrypt = outcome.envelope is not None and bool(outcome.envelope.options.get("encrypt"))
    try:
        value = outcome.result
        if outcome.envelope is not None and is_django_task(resolve(outcome.envelope.func)):
            value = _django_json(value)  # Django's contract: a task returns JSON, normalised as Django does
        package = seal_result(value, settings.name, settings.compress, settings.max_result_size, encrypt)
    except (TypeError, ValueError) as exc:
        # The error names the class of the cause (the pickler's own error, or Django's TypeError:
        # Unsupported type) and the traceback is the cause's, as a task's own failure would be.
        cause = exc.__cause__ or exc
        name = describe(cause).split(":", 1)[0]
        return outcome._replace(status=UNSTORABLE, result=None, error=clip_head(f"{name}: {_message(exc)}"),
                                traceback=clip_tail("".join(tb.format_exception(cause))))
    return outcome._replace(result=package)


def _django_json(value: Any) -> Any:
    try:  # Django 6.0+
        from django.utils.json import normalize_json
    except ImportError:  # the django-tasks backport
        from django_tasks.utils import normalize_json
    return normalize_json(value)
