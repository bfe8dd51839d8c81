"""PostgreSQL: a running cluster's scheduler process analyses the job table once it has grown (its
statistics stale), not only at start, so the claims' plans follow the table."""

from __future__ import annotations

import pytest
from django.db import connection

from django_taskmq import enqueue_many

from .conftest import DEADLINE

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def analyses() -> int:
    """How many times the job table was analysed by an ``ANALYZE`` (autovacuum's are not counted)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT analyze_count FROM pg_stat_user_tables "
                       "WHERE relname = 'django_taskmq_job'")
        return cursor.fetchone()[0]


def test_a_running_cluster_analyses_the_table_when_it_has_grown(cluster):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: the other engines keep their own statistics or none")
    qc = cluster.start("-w", "1")
    cluster.wait_final(enqueue_many("tests.tasks.noop", [()]), alive=[qc])
    # The start-up analysis has run (the table was never analysed) and the table is small since.
    start = cluster.wait_until(analyses, "the analysis at start", alive=[qc])
    ids = enqueue_many("tests.tasks.noop", [()] * 500)  # more than 50 + 10 % of the rows changed
    cluster.wait_final(ids, alive=[qc])
    cluster.wait_until(lambda: analyses() > start, f"an ANALYZE after {start} (the table grew)",
                       timeout=min(DEADLINE, 120), alive=[qc])
