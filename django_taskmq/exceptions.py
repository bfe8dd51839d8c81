"""Errors raised by django_taskmq, and the exceptions a task raises to ask for an outcome."""

from __future__ import annotations


class TaskMQError(Exception):
    """Base of every error django_taskmq raises."""


class ConfigError(TaskMQError, ValueError):
    """A setting or an argument is wrong; the message names it and says why."""


class LeaseLost(TaskMQError):
    """The reservation's lease ran out and the message now belongs to someone else.

    Raised by ``settle``/``defer``/``dead_letter``/... of a holder whose lease token no longer
    matches; nothing was changed.
    """


class BadPackage(TaskMQError):
    """A stored package failed to verify or to unpickle; it is never executed."""


class TaskTimeout(TaskMQError):
    """Recorded as the error of a task that ran past its timeout."""


class JobCancelled(TaskMQError):
    """The running job's cancellation was requested (:func:`django_taskmq.cancel`).

    Raised by ``current_job().raise_if_cancelled()`` at a point the task chooses, and into the task
    itself once ``TASKMQ['cancel_grace']`` has passed. A task that raises it (or lets it through)
    ends ``CANCELLED`` and is never retried.
    """


class WorkerDied(TaskMQError):
    """Recorded as the error of a task whose worker process died while running it."""


class TaskOutcome(Exception):
    """Base of the control-flow exceptions a task may raise to choose its outcome."""


class RetryLater(TaskOutcome):
    """Fail this delivery and redeliver after ``delay`` seconds (counts as a delivery).

    Without ``delay`` the job's :class:`~django_taskmq.Retry` policy decides.
    """

    def __init__(self, reason: str = "", delay: float | None = None) -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay


class Defer(TaskOutcome):
    """Put the message back, visible again after ``delay`` seconds; does not count a delivery."""

    def __init__(self, delay: float = 0, reason: str = "") -> None:
        super().__init__(reason or "deferred")
        self.delay = delay


class Reject(TaskOutcome):
    """Send the message straight to the dead-letter queue with ``reason``."""

    def __init__(self, reason: str = "rejected") -> None:
        super().__init__(reason)
        self.reason = reason


class UnreadableResult(BadPackage):
    """A stored result failed to verify or to unpickle; it is never loaded."""
