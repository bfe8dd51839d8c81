"""``OrmBroker.analyze`` (PostgreSQL): the job table's statistics are refreshed when they are stale
(never analyzed, or more rows changed since than autovacuum's threshold), and only then."""

from __future__ import annotations

import pytest
from django.db import connection

from django_taskmq import enqueue_many

pytestmark = pytest.mark.django_db(transaction=True)  # statistics are reported at commit


def analyze_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, now
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'django_taskmq_job'")
        return cursor.fetchone()[0]


def test_analyze_runs_only_when_the_statistics_are_stale(broker):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_taskmq_job")
    before = analyze_count()
    broker.analyze()  # fresh: nothing changed since
    assert analyze_count() == before
    enqueue_many("tests.tasks.add", [(i, i) for i in range(500)])  # 500 > 50 + 10 % of 0 rows
    analyze_count()  # flushes the inserts' counts too
    broker.analyze()
    assert analyze_count() == before + 1
    broker.analyze()  # fresh again
    assert analyze_count() == before + 1


def test_analyze_is_skipped_while_another_cluster_analyses(broker):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    import psycopg

    enqueue_many("tests.tasks.add", [(i, i) for i in range(500)])  # stale
    before = analyze_count()
    settings = connection.settings_dict
    other = psycopg.connect(host=settings["HOST"], port=settings["PORT"], user=settings["USER"],
                            dbname=settings["NAME"], autocommit=False)
    try:  # another cluster's scheduler process, in its ANALYZE
        other.execute("SELECT pg_advisory_xact_lock(hashtext('django_taskmq'), hashtext('analyze'))")
        broker.analyze()
        assert analyze_count() == before
    finally:
        other.rollback()
        other.close()
    broker.analyze()
    assert analyze_count() == before + 1
