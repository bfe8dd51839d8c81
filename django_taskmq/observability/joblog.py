"""Log records about jobs, with the job's fields as ``extra``: ``job_id``, ``task``, ``queue``,
``priority``, ``attempt`` (the delivery, from 1) and ``cluster`` (the lease owner: cluster name,
host, pid and a random suffix; ``sync`` in sync mode).

A formatter that writes a record's extra attributes (``python-json-logger``) writes them as
fields; see the Observability page of the docs. :class:`JobFields`, a filter for handlers, adds
the same fields to the records that the task's own code logs while it runs.

Outcomes are logged on the ``django_taskmq.jobs`` logger as they are recorded: a success at DEBUG
(one record per job costs the recording process more than recording it), a retry or a deferral the
task asked for at INFO, a failure that will be retried at WARNING, a final failure (FAILED, DEAD)
at ERROR. The sentinel's records of a job killed at its timeout or lost with its worker are on the
same logger (an error reporter reports those jobs; Sentry's reporter has Sentry's logging
integration ignore this logger, so each failure is one event).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..brokers.base import Reservation
from ..runtime import context

#: The extra fields of every record about a job.
FIELDS = ("job_id", "task", "queue", "priority", "attempt", "cluster")

logger = logging.getLogger("django_taskmq.jobs")


def fields(reservation: Reservation, task: str | None) -> dict[str, Any]:
    """The ``extra`` of a record about the delivery ``reservation`` of ``task`` (None: not known)."""
    return {"job_id": reservation.job_id, "task": task, "queue": reservation.queue,
            "priority": reservation.priority, "attempt": reservation.deliveries, "cluster": reservation.owner}


class JobFields(logging.Filter):
    """A handler filter: a record logged while a task runs gets its job's fields (those the record
    does not carry already). It never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = context.get()  # the job the calling code runs in, if any
        if current.reservation is not None:
            task = current.envelope.func if current.envelope is not None else None
            for name, value in fields(current.reservation, task).items():
                if not hasattr(record, name):
                    setattr(record, name, value)
        return True


def outcomes(recorded: Iterable[tuple[Any, str | None]]) -> None:
    """Log each ``(outcome, state)`` as it was recorded; ``state`` is the job's state afterwards
    (None: the outcome changed nothing, its lease was lost)."""
    for o, state in recorded:
        if state is None:
            continue
        level = _level(o.status, state)
        if not logger.isEnabledFor(level):
            continue
        task = o.envelope.func if o.envelope is not None else None
        duration = _duration(o.started_at, o.finished_at)
        extra = {**fields(o.reservation, task), "status": o.status.value, "state": state, "duration": duration}
        if state == "SUCCEEDED":
            logger.log(level, "job %s (%s) succeeded in %.3f s", o.reservation.job_id, task, duration, extra=extra)
        elif o.error:
            logger.log(level, "job %s (%s): %s on attempt %d, now %s: %s", o.reservation.job_id, task,
                       o.status.value, o.reservation.deliveries, state, o.error, extra=extra)
        else:
            logger.log(level, "job %s (%s): %s on attempt %d, now %s", o.reservation.job_id, task,
                       o.status.value, o.reservation.deliveries, state, extra=extra)


def _duration(started: Any, finished: Any) -> float:
    """Seconds from ``started`` to ``finished`` (epoch floats; 0.0 when either is not a number)."""
    if isinstance(started, (int, float)) and isinstance(finished, (int, float)):
        return round(max(finished - started, 0.0), 6)
    return 0.0


def _level(status: str, state: str) -> int:
    """A final failure is an ERROR, a failure to retry a WARNING, a retry or deferral the task
    asked for INFO, a success DEBUG."""
    if state in ("FAILED", "DEAD"):
        return logging.ERROR
    if state == "RETRYING" and status not in ("retry", "defer"):
        return logging.WARNING
    return logging.DEBUG if state == "SUCCEEDED" else logging.INFO
