"""Procrastinate through its Django integration: ``noop.defer`` and ``noop.batch_defer``.

``enqueue`` is ``defer`` (what an application calls); bulk is ``batch_defer`` (one INSERT of
many jobs). Counting reads ``procrastinate_jobs`` through the integration's read-only model:
pending = ``todo`` or ``doing``; finished jobs stay as ``succeeded`` (Procrastinate's default).
``queue`` and ``priority`` are ignored (one queue).
"""

from __future__ import annotations

from importlib.metadata import version

from procrastinate.contrib.django.models import ProcrastinateJob

from adapters import JobSpec
from procrastinate_project.tasks import noop

FAILED = ("failed", "cancelled", "aborted")


class Adapter:
    name = "procrastinate"
    supports_bulk = True
    bulk_api = "noop.batch_defer(...)"
    supports_priority = False

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        kwargs = {} if tag is None else {"tag": tag}
        return str(noop.defer(**kwargs))

    def enqueue_bulk(self, count: int) -> None:
        noop.batch_defer(*({} for _ in range(count)))

    def prefill(self, jobs: list[JobSpec], chunk: int = 5000) -> None:
        # batch_defer writes the rows defer() writes, in one statement per chunk.
        for start in range(0, len(jobs), chunk):
            noop.batch_defer(*({} if job.tag is None else {"tag": job.tag}
                               for job in jobs[start:start + chunk]))

    def pending(self) -> int:
        return ProcrastinateJob.objects.filter(status__in=("todo", "doing")).count()

    def failed(self) -> int:
        return ProcrastinateJob.objects.filter(status__in=FAILED).count()

    def is_done(self, job_id: str) -> bool:
        return ProcrastinateJob.objects.filter(id=int(job_id), status="succeeded").exists()

    def versions(self) -> dict:
        return {"procrastinate": version("procrastinate"), "psycopg": version("psycopg")}
