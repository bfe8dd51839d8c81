"""Celery with Redis as broker and result backend, through its public API.

``enqueue`` is ``noop.delay`` (what an application calls); bulk is ``group(...).apply_async()``
(Celery's bulk API for N separate jobs), and ``chunks`` is measured beside it for
information (it packs many calls into one message, so it is not the same work).
Celery has neither per-job queues of the benchmark's kind nor priorities on Redis that
the mixed workload could use: ``queue`` and ``priority`` are ignored.

Counting: the broker's list ``celery`` holds what is queued; a finished job is a key
``celery-task-meta-<id>`` in the result database (its own Redis database, flushed before
every workload), so ``pending`` = jobs sent by this process - keys in the result database.
"""

from __future__ import annotations

import json
from importlib.metadata import version

import redis
from celery import group

from adapters import JobSpec
from celeryapp import BROKER_DB, HOST, PORT, RESULT_DB, app, noop

QUEUE = "celery"
META_PREFIX = "celery-task-meta-"


class Adapter:
    name = "celery"
    supports_bulk = True
    bulk_api = "group(...).apply_async()"
    supports_priority = False

    def __init__(self) -> None:
        self.broker = redis.Redis(host=HOST, port=int(PORT), db=BROKER_DB)
        self.results = redis.Redis(host=HOST, port=int(PORT), db=RESULT_DB)
        self.sent = 0

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        args = () if tag is None else (tag,)
        self.sent += 1
        return noop.delay(*args).id

    def enqueue_bulk(self, count: int) -> None:
        group(noop.s() for _ in range(count)).apply_async()
        self.sent += count

    def enqueue_chunks(self, count: int, size: int = 100) -> None:
        """``count`` calls in ``count / size`` messages (``noop.chunks``): information only."""
        noop.chunks(((),) * count, size).apply_async()
        self.sent += count // size  # one result per chunk

    def prefill(self, jobs: list[JobSpec]) -> None:
        # The same messages as delay() sends; without the result subscription a calling
        # process makes for each task (untimed here, and 20000 subscriptions would make
        # Redis push every result to a client that never reads them).
        from celery._state import _set_task_join_will_block, task_join_will_block

        before = task_join_will_block()
        _set_task_join_will_block(True)
        try:
            with app.producer_or_acquire() as producer:
                for job in jobs:
                    args = () if job.tag is None else (job.tag,)
                    noop.apply_async(args, producer=producer)
                    self.sent += 1
        finally:
            _set_task_join_will_block(before)

    def stored(self) -> int:
        return self.broker.llen(QUEUE)

    def pending(self) -> int:
        return self.sent - self.results.dbsize()

    def failed(self) -> int:
        # Checked once at the end (verify): a failure is recorded as a result too, so it
        # never keeps pending above 0, and scanning every key each second would load Redis.
        return 0

    def verify(self) -> None:
        """Raise if any recorded result is not SUCCESS."""
        bad = 0
        keys = list(self.results.scan_iter(match=META_PREFIX + "*", count=1000))
        for start in range(0, len(keys), 1000):
            for raw in self.results.mget(keys[start:start + 1000]):
                if raw is None or json.loads(raw).get("status") != "SUCCESS":
                    bad += 1
        if bad:
            raise RuntimeError(f"{bad} Celery results are not SUCCESS")

    def is_done(self, job_id: str) -> bool:
        return bool(self.results.exists(META_PREFIX + job_id))

    def versions(self) -> dict:
        info = self.broker.info("server")
        return {"celery": version("celery"), "kombu": version("kombu"), "redis-py": version("redis"),
                "redis server": info.get("redis_version")}
