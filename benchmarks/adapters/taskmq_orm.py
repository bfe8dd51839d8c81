"""The yardstick of a single enqueue: Django's ORM writing the row ``async_task()`` writes.

``enqueue`` is ``Job.objects.create(**values)`` in autocommit: one INSERT of the same table
(same indexes) with the column values django_taskmq's enqueue builds for the same call
(``JobTemplate.values``), minus what only a task queue does per call: the package is signed
(and pickled) once and reused, no option checks, no idempotency or coalescing logic, no
broker. A fresh id (``new_id``) and a fresh ``visible_at`` (this host's clock) per row; the
other columns take the model's defaults as they would. Everything else (counting, prefill)
is django_taskmq's adapter: the rows are django_taskmq jobs.
"""

from __future__ import annotations

import time

from django_taskmq.conf import get_settings
from django_taskmq.policy.ids import new_id
from django_taskmq.models import Job
from django_taskmq.options import JobTemplate

from adapters import TASK
from adapters.taskmq import Adapter as TaskmqAdapter


def row_values(args: tuple = ()) -> dict:
    """Return the column values async_task(TASK, *args) would store, as plain values."""
    values = JobTemplate(TASK, {}, get_settings()).values(tuple(args), {})
    values["visible_at"] = float(values["visible_at"])  # FromNow: the broker's "now"; a host time here
    return values


class Adapter(TaskmqAdapter):
    name = "taskmq-orm"
    supports_bulk = False
    supports_priority = False

    def __init__(self) -> None:
        super().__init__()
        self._rows: dict[tuple, dict] = {}

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        args = () if tag is None else (tag,)
        base = self._rows.get(args)
        if base is None:  # built (signed) once per distinct call, outside the timed loop's steady state
            base = self._rows[args] = row_values(args)
        job = Job.objects.create(**{**base, "id": new_id(), "visible_at": time.time()})
        return job.id
