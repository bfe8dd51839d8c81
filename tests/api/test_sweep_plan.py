"""The lease sweep reads the partial index of leased rows, however large the table of finished jobs.

SQLite uses a partial index only for a term that matches its condition exactly; with the
statistics of a large table (``ANALYZE``) a sweep written ``state IN ('RUNNING')`` scanned every
row, holding the write lock (250 ms at a million rows, once a second).
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_taskmq import async_task
from django_taskmq.api import enqueue_many
from django_taskmq.models import Job, State


@pytest.mark.sqlite_only
def test_the_lease_sweep_uses_the_leased_index_on_a_large_table_with_statistics(broker):
    enqueue_many("tests.tasks.noop", [()] * 3000)
    Job.objects.update(state=State.SUCCEEDED, finished_at=None)
    leased = async_task("tests.tasks.noop")
    (reservation,) = broker.reserve(["default"], 1, 0.01, "dead-cluster")
    assert reservation.job_id == leased
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # the statistics a large table has: one state for nearly every row
    time.sleep(0.05)  # the lease runs out
    with CaptureQueriesContext(connection) as context:
        assert broker.reclaim_expired() == 1
    (sweep,) = [q["sql"] for q in context.captured_queries if "lease expired" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sweep}")
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "USING INDEX taskmq_job_leased" in plan, plan
    assert Job.objects.get(pk=leased).state == State.RETRYING
