"""Steady Queue through Django 6's tasks framework (``Task.enqueue``) and its ``Job`` model.

Django's tasks framework has no bulk enqueue and Steady Queue adds none: bulk is n/a.
Finished jobs are kept (``preserve_finished_jobs``, its default) with ``finished_at`` set;
a failure leaves a ``FailedExecution``. ``queue`` and ``priority`` are ignored (one queue).
"""

from __future__ import annotations

from importlib.metadata import version

from steady_queue.models import Job
from steady_queue.models.failed_execution import FailedExecution

from adapters import JobSpec
from steadyqueue_project.tasks import noop


class Adapter:
    name = "steadyqueue"
    supports_bulk = False
    supports_priority = False

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        args = () if tag is None else (tag,)
        return str(noop.enqueue(*args).id)

    def enqueue_bulk(self, count: int) -> None:
        raise NotImplementedError("Steady Queue has no bulk enqueue")

    def prefill(self, jobs: list[JobSpec]) -> None:
        # No bulk path writes exactly what enqueue writes (a job and its ready execution):
        # the same call, untimed.
        for job in jobs:
            args = () if job.tag is None else (job.tag,)
            noop.enqueue(*args)

    def pending(self) -> int:
        return Job.objects.filter(finished_at__isnull=True).count()

    def failed(self) -> int:
        return FailedExecution.objects.count()

    def is_done(self, job_id: str) -> bool:
        return Job.objects.filter(id=int(job_id), finished_at__isnull=False).exists()

    def versions(self) -> dict:
        return {"steady-queue": version("steady-queue")}
