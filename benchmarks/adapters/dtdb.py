"""django-tasks-db through Django's tasks framework (``Task.enqueue``) and its model.

django-tasks-db has no bulk enqueue (``enqueue`` writes one row per call): bulk is n/a.
Queues and priorities exist in Django's tasks framework, but the benchmark's project
serves one queue: ``queue`` and ``priority`` are ignored.
"""

from __future__ import annotations

from importlib.metadata import version

from django_tasks.base import TaskResultStatus
from django_tasks.utils import normalize_json
from django_tasks_db.models import DBTaskResult, get_date_max

from adapters import JobSpec
from dtdb_project.tasks import noop

PENDING = (TaskResultStatus.READY, TaskResultStatus.RUNNING)


class Adapter:
    name = "dtdb"
    supports_bulk = False
    supports_priority = False

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        args = () if tag is None else (tag,)
        return str(noop.enqueue(*args).id)

    def enqueue_bulk(self, count: int) -> None:
        raise NotImplementedError("django-tasks-db has no bulk enqueue")

    def prefill(self, jobs: list[JobSpec], chunk: int = 5000) -> None:
        # The row DatabaseBackend.enqueue creates, written with bulk_create (which skips
        # the pre_save signal that turns "no run_after" into the far-future date).
        backend = noop.get_backend()
        rows = []
        for job in jobs:
            args = [] if job.tag is None else [job.tag]
            rows.append(DBTaskResult(
                id=backend._get_id(), args_kwargs=normalize_json({"args": args, "kwargs": {}}),
                priority=noop.priority, task_path=noop.module_path, queue_name=noop.queue_name,
                run_after=noop.run_after or get_date_max(), backend_name=backend.alias))
        DBTaskResult.objects.bulk_create(rows, batch_size=chunk)

    def pending(self) -> int:
        return DBTaskResult.objects.filter(status__in=PENDING).count()

    def failed(self) -> int:
        return DBTaskResult.objects.filter(status=TaskResultStatus.FAILED).count()

    def is_done(self, job_id: str) -> bool:
        return DBTaskResult.objects.filter(id=job_id, status=TaskResultStatus.SUCCESSFUL).exists()

    def versions(self) -> dict:
        return {"django-tasks-db": version("django-tasks-db"), "django-tasks": version("django-tasks")}
