"""django_taskmq through the API contract agreed with the lead engineer.

Contract used (nothing else): ``async_task``, ``enqueue_many``, ``Priority`` from
``django_taskmq``; ``django_taskmq.models.Job`` with ``state``.
"""

from __future__ import annotations

from collections import defaultdict
from importlib.metadata import version

from django_taskmq import Priority, async_task, enqueue_many
from django_taskmq.models import Job

from adapters import TASK, JobSpec

PENDING_STATES = ("QUEUED", "RUNNING", "RETRYING")
FAILED_STATES = ("FAILED", "DEAD", "EXPIRED", "CANCELLED")


def _options(queue: str | None, priority: str | None) -> dict:
    options = {}
    if queue is not None:
        options["queue"] = queue
    if priority is not None:
        options["priority"] = getattr(Priority, priority)
    return options


class Adapter:
    name = "taskmq"
    supports_bulk = True
    supports_priority = True

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        args = () if tag is None else (tag,)
        return async_task(TASK, *args, **_options(queue, priority))

    def enqueue_bulk(self, count: int) -> None:
        # One call: batching is the library's job, and what is being measured.
        enqueue_many(TASK, [()] * count)

    def prefill(self, jobs: list[JobSpec], chunk: int = 5000) -> None:
        # enqueue_many takes one queue and priority per call: group, keeping the order
        # inside each group (FIFO within a queue and priority is all the pick rule uses).
        groups: dict[tuple, list[tuple]] = defaultdict(list)
        for job in jobs:
            groups[(job.queue, job.priority)].append(() if job.tag is None else (job.tag,))
        for (queue, priority), arg_tuples in groups.items():
            for start in range(0, len(arg_tuples), chunk):
                enqueue_many(TASK, arg_tuples[start : start + chunk], **_options(queue, priority))

    def pending(self) -> int:
        return Job.objects.filter(state__in=PENDING_STATES).count()

    def failed(self) -> int:
        return Job.objects.filter(state__in=FAILED_STATES).count()

    def versions(self) -> dict:
        return {"django-taskmq": version("django-taskmq")}
