"""django_taskmq through the API contract agreed with the lead engineer.

Contract used (nothing else): ``async_task``, ``enqueue_many``, ``Priority`` from
``django_taskmq``; ``django_taskmq.models.Job`` with ``state``.

The same adapter serves ``taskmq`` (the working tree) and ``taskmq-base`` (an earlier
commit exported under ``.work/``): each venv has its own tree installed editable, and
:func:`installed_from` checks that the imported package is that tree's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from importlib.metadata import distributions, version
from pathlib import Path
from urllib.parse import unquote, urlparse

import django_taskmq
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


def package_dir() -> Path:
    return Path(django_taskmq.__file__).resolve().parent


def installed_from() -> list[Path]:
    """Return the source trees django-taskmq was installed from (pip's direct_url.json).

    Every distribution on sys.path is looked at: an ``.egg-info`` left in a checkout that
    is on the path would otherwise hide the venv's own record.
    """
    trees = []
    for dist in distributions(name="django-taskmq"):
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
        if url.startswith("file:"):
            trees.append(Path(unquote(urlparse(url).path)).resolve())
    return trees


def check_import() -> None:
    """Fail if django_taskmq was imported from anywhere but the venv's own install.

    A PYTHONPATH or a current directory holding another checkout would otherwise
    benchmark the wrong code without a word (e.g. the working tree as the baseline).
    """
    trees = installed_from()
    if trees and not any(package_dir().is_relative_to(tree) for tree in trees):
        raise RuntimeError(f"django_taskmq imported from {package_dir()}, but this venv has it "
                           f"installed from {', '.join(map(str, trees))}: check PYTHONPATH and "
                           "the current directory")


class Adapter:
    name = "taskmq"
    supports_bulk = True
    bulk_api = "enqueue_many"
    supports_priority = True

    def __init__(self) -> None:
        check_import()

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

    def is_done(self, job_id: str) -> bool:
        return Job.objects.filter(pk=job_id, state="SUCCEEDED").exists()

    def fill_finished(self, count: int) -> None:
        """Add ``count`` finished (SUCCEEDED) jobs with one INSERT ... SELECT, then ANALYZE
        (SQLite, with a WAL checkpoint; MariaDB: ANALYZE TABLE) or VACUUM ANALYZE (PostgreSQL).

        The rows are copies of one job enqueued through the API and marked finished the way
        the recorder leaves a no-op's row, with new ids: every column the current schema
        has is copied (MariaDB's generated columns excepted: the server computes them), so
        a new column needs no change here.
        """
        from django.db import connection, transaction
        from django.utils import timezone

        template = async_task(TASK)
        now = timezone.now()
        Job.objects.filter(pk=template).update(
            state="SUCCEEDED", attempt=1, deliveries=1, started_at=now, first_started_at=now,
            finished_at=now)
        table = Job._meta.db_table
        with connection.cursor() as cursor:
            columns = [c.name for c in connection.introspection.get_table_description(cursor, table)]
            if connection.vendor == "mysql":
                cursor.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                               "DATABASE() AND TABLE_NAME = %s AND EXTRA LIKE %s", [table, "%GENERATED%"])
                generated = {row[0] for row in cursor.fetchall()}
                columns = [c for c in columns if c not in generated]
        quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
        if connection.vendor == "sqlite":
            new_id = "printf('fill%028d', n.i)"
            series = ("(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                      f"WHERE i < {int(count)}) SELECT i FROM n) AS n")
        elif connection.vendor == "mysql":
            # Ids of jobs made in 1970 (django_taskmq's ids are 14 hex digits of microseconds and
            # 10 of randomness): older than any real job, as in a table that accumulated them. The
            # "fill..." ids of the other engines would sort after every new job, and MariaDB's idle
            # pusher wakes when MAX(id) changes: it would never wake (its poll would time it).
            new_id = "CONCAT(LPAD(LOWER(HEX(n.i)), 14, '0'), '0000000000')"
            # MariaDB's sequence engine: seq_1_to_<count> is a virtual table of 1..count.
            series = f"(SELECT seq AS i FROM seq_1_to_{int(count)}) AS n"
        else:
            new_id = "'fill' || lpad(n.i::text, 28, '0')"
            series = f"generate_series(1, {int(count)}) AS n(i)"
        select = ", ".join(new_id if c == "id" else f"j.{connection.ops.quote_name(c)}" for c in columns)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {table} ({quoted}) SELECT {select} FROM {table} AS j "
                           f"CROSS JOIN {series} WHERE j.id = %s", [template])
        # Leave the table as one that accumulated the rows over time would be: planner
        # statistics current, and the bulk write no longer pending (SQLite: the WAL, half a
        # gigabyte after 1M rows, checkpointed into the database file; PostgreSQL: vacuumed,
        # so hint bits and the visibility map are set, as autovacuum would have done).
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute(f"ANALYZE {table}")
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            elif connection.vendor == "mysql":
                cursor.execute(f"ANALYZE TABLE {table}")
                cursor.fetchall()
            else:
                cursor.execute(f"VACUUM ANALYZE {table}")

    def versions(self) -> dict:
        return {"django-taskmq": version("django-taskmq"), "django_taskmq path": str(package_dir())}
