"""django-q2 through its public API (``async_task``) and its ORM broker models.

django-q2 has neither priorities nor per-job queues nor a bulk enqueue: ``queue`` and
``priority`` are ignored, so the mixed workload runs on its single FIFO queue.
"""

from __future__ import annotations

from importlib.metadata import version

from django.utils import timezone
from django_q.conf import Conf
from django_q.models import Failure, OrmQ, Task
from django_q.tasks import async_task

from adapters import TASK, JobSpec


class _CollectingBroker:
    """Stand-in broker that keeps the signed packages ``async_task`` builds.

    Passing it as ``broker=`` lets ``prefill`` store byte-for-byte what ``async_task``
    would store, while writing the rows with one ``bulk_create`` instead of N inserts.
    """

    def __init__(self, list_key: str) -> None:
        self.list_key = list_key
        self.packages: list[str] = []

    def enqueue(self, package: str) -> int:
        self.packages.append(package)
        return len(self.packages)


class Adapter:
    name = "djangoq2"
    supports_bulk = False
    supports_priority = False

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        args = () if tag is None else (tag,)
        return async_task(TASK, *args)

    def enqueue_bulk(self, count: int) -> None:
        raise NotImplementedError("django-q2 has no bulk enqueue")

    def prefill(self, jobs: list[JobSpec], chunk: int = 5000) -> None:
        for start in range(0, len(jobs), chunk):
            collector = _CollectingBroker(Conf.CLUSTER_NAME)
            for job in jobs[start : start + chunk]:
                args = () if job.tag is None else (job.tag,)
                async_task(TASK, *args, broker=collector)
            # Same columns as django_q.brokers.orm.ORM.enqueue writes for each task.
            now = timezone.now()
            OrmQ.objects.bulk_create(
                [OrmQ(key=collector.list_key, payload=p, lock=now) for p in collector.packages],
                batch_size=1000,
            )

    def pending(self) -> int:
        # The monitor deletes the OrmQ row (acknowledge) right after saving the result,
        # so an empty OrmQ means every job's outcome is recorded.
        return OrmQ.objects.count()

    def failed(self) -> int:
        return Failure.objects.count()

    def is_done(self, job_id: str) -> bool:
        # The result is saved as a Task row (successes beyond save_limit are pruned later,
        # but the newest ones stay).
        return Task.objects.filter(id=job_id, success=True).exists()

    def versions(self) -> dict:
        return {"django-q2": version("django-q2")}
