"""oban-py through its public API: ``Noop.enqueue`` and ``Oban.enqueue_many``.

oban-py's API is asyncio only; the driver is a synchronous caller, so it keeps one event loop
and one client-mode ``Oban`` instance (no queues: it only inserts) on a pool from
``Oban.create_pool``, and runs each call to completion on that loop: one single enqueue is one
``await Noop.enqueue(...)``, bulk one ``await oban.enqueue_many(...)``. Counting reads
``oban_jobs`` through Django's connection: pending = ``available``, ``scheduled`` or
``executing``; finished jobs stay as ``completed`` (pruned after a day by default).
``queue`` and ``priority`` are ignored (one queue).
"""

from __future__ import annotations

import asyncio
import os
from importlib.metadata import version

from django.db import connection
from oban import Oban

from adapters import JobSpec
from benchdb import pg_params
from oban_project.jobs import Noop

PENDING = "('available', 'scheduled', 'executing')"
FAILED = "('retryable', 'discarded', 'cancelled')"


def dsn() -> str:
    """The libpq URL of the live database (what the worker's ``--dsn`` gets too)."""
    p = pg_params()
    auth = p["user"] + (f":{p['password']}" if p["password"] else "")
    return f"postgresql://{auth}@{p['host']}:{p['port']}/{os.environ.get('BENCH_PG_NAME', 'bench_oban')}"


class Adapter:
    name = "oban"
    supports_bulk = True
    bulk_api = "Oban.enqueue_many(...)"
    supports_priority = False

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = self.loop.run_until_complete(Oban.create_pool(dsn()))
        self.oban = Oban(pool=self.pool)

    def _run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def enqueue(self, tag=None, queue=None, priority=None) -> str:
        job = self._run(Noop.enqueue({} if tag is None else {"tag": tag}))
        return str(job.id)

    def enqueue_bulk(self, count: int) -> None:
        self._run(self.oban.enqueue_many([Noop.new({}) for _ in range(count)]))

    def prefill(self, jobs: list[JobSpec], chunk: int = 5000) -> None:
        # enqueue_many writes the rows enqueue() writes (enqueue is enqueue_many of one).
        for start in range(0, len(jobs), chunk):
            self._run(self.oban.enqueue_many([Noop.new({} if job.tag is None else {"tag": job.tag})
                                              for job in jobs[start:start + chunk]]))

    def _count(self, where: str, *params) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM oban_jobs WHERE {where}", params)
            return cursor.fetchone()[0]

    def pending(self) -> int:
        return self._count(f"state IN {PENDING}")

    def failed(self) -> int:
        return self._count(f"state IN {FAILED}")

    def is_done(self, job_id: str) -> bool:
        return self._count("id = %s AND state = 'completed'", int(job_id)) > 0

    def versions(self) -> dict:
        return {"oban": version("oban"), "psycopg": version("psycopg")}
