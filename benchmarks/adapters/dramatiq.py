"""Dramatiq with Redis as broker and result backend, through its public API.

``enqueue`` is ``noop.send`` (what an application calls). Dramatiq has no bulk enqueue
(``group(...).run()`` sends one message per call): bulk is n/a. ``queue`` and ``priority``
are ignored (one queue).

Counting as for Celery: every finished job leaves one result key in the result database
(its own Redis database, flushed before every workload), so ``pending`` = jobs sent by
this process - keys in the result database.
"""

from __future__ import annotations

import json
from importlib.metadata import version

import redis

from adapters import JobSpec
from dramatiqapp import BROKER_DB, HOST, PORT, RESULT_DB, noop, result_backend


class Adapter:
    name = "dramatiq"
    supports_bulk = False
    supports_priority = False

    def __init__(self) -> None:
        self.broker = redis.Redis(host=HOST, port=PORT, db=BROKER_DB)
        self.results = redis.Redis(host=HOST, port=PORT, db=RESULT_DB)
        self.sent = 0
        self.messages: dict = {}

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        args = () if tag is None else (tag,)
        message = noop.send(*args)
        self.sent += 1
        if tag is not None:  # the latency workload asks about its tagged jobs only
            self.messages[message.message_id] = message
        return message.message_id

    def enqueue_bulk(self, count: int) -> None:
        raise NotImplementedError("Dramatiq has no bulk enqueue")

    def prefill(self, jobs: list[JobSpec]) -> None:
        # The messages send() enqueues, sent the same way (untimed).
        for job in jobs:
            args = () if job.tag is None else (job.tag,)
            noop.send(*args)
            self.sent += 1

    def pending(self) -> int:
        return self.sent - self.results.dbsize()

    def failed(self) -> int:
        # A failure stores its exception as the result: checked once at the end (verify).
        return 0

    def verify(self) -> None:
        """Raise if any stored result is an exception (Dramatiq's failure record)."""
        bad = 0
        for key in self.results.scan_iter(count=1000):
            for raw in self.results.lrange(key, 0, -1):
                result = json.loads(raw)
                if isinstance(result, dict) and "exn" in result:  # wrap_exception's record
                    bad += 1
        if bad:
            raise RuntimeError(f"{bad} Dramatiq results are exceptions")

    def is_done(self, job_id: str) -> bool:
        message = self.messages[job_id]
        return bool(self.results.exists(result_backend.build_message_key(message)))

    def versions(self) -> dict:
        info = self.broker.info("server")
        return {"dramatiq": version("dramatiq"), "redis-py": version("redis"),
                "redis server": info.get("redis_version")}
