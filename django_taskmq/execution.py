"""Running one task: unpack a reservation, execute it, describe the outcome.

The cluster and sync mode share these functions, so a task runs the same way in both.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import pickle
import time
import traceback as tb
from typing import Any, NamedTuple

from .brokers.base import Reservation
from .envelope import Envelope
from .exceptions import Defer, Reject, RetryLater
from .signing import verify

SUCCESS = "success"
FAILURE = "failure"  # the task raised
RETRY = "retry"  # the task raised RetryLater
DEFER = "defer"
REJECT = "reject"
TIMEOUT = "timeout"
CRASH = "crash"  # the worker process died

current_job_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("taskmq_current_job", default=None)


def current_job() -> str | None:
    """Return the id of the job the calling code runs in, or None outside a task."""
    return current_job_id.get()


class TaskMessage(NamedTuple):
    """A verified task ready for a worker."""

    reservation: Reservation
    envelope: Envelope


class Outcome(NamedTuple):
    """What happened to one delivery; the monitor records it."""

    reservation: Reservation
    envelope: Envelope | None
    status: str
    result: Any = None
    error: str = ""
    traceback: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0
    delay: float | None = None


def unpack(reservation: Reservation, salt: str) -> TaskMessage:
    """Verify and unpickle a reserved package; raise BadPackage with the reason."""
    envelope = verify(reservation.payload, salt)
    # The payload is not needed any more: keep what travels between processes small.
    return TaskMessage(reservation._replace(payload=""), envelope)


@functools.lru_cache(maxsize=1024)
def resolve(path: str) -> Any:
    """Import ``package.module.attr`` (the longest importable module prefix wins)."""
    module_path, _, attr = path.rpartition(".")
    if not module_path:
        raise ImportError(f"{path!r} is not a dotted path")
    try:
        module = importlib.import_module(module_path)
    except ImportError:
        owner = resolve(module_path)
        return getattr(owner, attr)
    return getattr(module, attr)


def callable_for(path: str) -> Any:
    """Return what to call for a task path: a function, a @task's function or a Task's run()."""
    from .tasks import Task

    target = resolve(path)
    if isinstance(target, type) and issubclass(target, Task):
        return target().run
    if isinstance(target, Task):
        return target.run
    if hasattr(target, "call") and hasattr(target, "get_backend"):  # a django.tasks Task
        return target.call
    return target


def execute(message: TaskMessage) -> Outcome:
    """Run the task of ``message`` and return its outcome; never raises for the task's errors."""
    from .signals import pre_execute

    envelope = message.envelope
    started = time.time()
    token = current_job_id.set(message.reservation.job_id)
    try:
        func = callable_for(envelope.func)
        if pre_execute.has_listeners():
            pre_execute.send(sender=Outcome, job_id=message.reservation.job_id, func=envelope.func, envelope=envelope)
        value = func(*envelope.args, **envelope.kwargs)
    except RetryLater as exc:
        return _outcome(message, RETRY, started, exc, delay=exc.delay)
    except Defer as exc:
        return Outcome(message.reservation, envelope, DEFER, started_at=started, finished_at=time.time(), delay=exc.delay)
    except Reject as exc:
        return _outcome(message, REJECT, started, exc)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # sys.exit() in a task is its failure
        return _outcome(message, FAILURE, started, exc)
    finally:
        current_job_id.reset(token)
    return Outcome(message.reservation, envelope, SUCCESS, value, started_at=started, finished_at=time.time())


def _outcome(message: TaskMessage, status: str, started: float, exc: BaseException, delay: float | None = None) -> Outcome:
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return Outcome(
        message.reservation, message.envelope, status,
        error=f"{name}: {exc}", traceback=tb.format_exc(),
        started_at=started, finished_at=time.time(), delay=delay,
    )


def unpicklable(outcome: Outcome, exc: BaseException) -> Outcome:
    """Return ``outcome`` turned into a failure because its result cannot be pickled."""
    return outcome._replace(status=FAILURE, result=None, error=f"result cannot be pickled: {exc}", traceback="")


def checked(outcome: Outcome) -> Outcome:
    """Return ``outcome``, or a failure when its result cannot be stored (pickled)."""
    if outcome.status == SUCCESS and outcome.result is not None:
        try:
            pickle.dumps(outcome.result)
        except Exception as exc:
            return unpicklable(outcome, exc)
    return outcome
