"""``OrmBroker.analyze`` (PostgreSQL): the job table's statistics are refreshed when they are stale
(never analyzed, or more rows changed since than autovacuum's threshold), and only then, by one
cluster at a time; where the server's autovacuum is off, the table is vacuumed past autovacuum's
threshold of dead rows."""

from __future__ import annotations

import pytest
from django.db import connection

from django_taskmq import enqueue_many

pytestmark = pytest.mark.django_db(transaction=True)  # statistics are reported at commit


def counts() -> tuple[int, int]:
    """(VACUUMs, ANALYZEs) of the job table so far, this backend's counts flushed first."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT vacuum_count, analyze_count FROM pg_stat_user_tables WHERE relname = 'django_taskmq_job'")
        return cursor.fetchone()


def analyze_count() -> int:
    return counts()[1]


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



def test_the_table_is_vacuumed_past_the_threshold_where_autovacuum_is_off(broker):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        if cursor.fetchone()[0] != "off":
            pytest.skip("the server's autovacuum is on: vacuuming is its work")
    from django_taskmq.models import Job

    enqueue_many("tests.tasks.add", [(i, i) for i in range(500)])
    broker.analyze()
    vacuums, _ = counts()
    Job.objects.all().delete()  # 500 dead rows, none live: past 50 + 20 % of the live rows
    counts()  # flushes the deletes' counts
    broker.analyze()
    assert counts()[0] == vacuums + 1
    broker.analyze()  # nothing dead since
    assert counts()[0] == vacuums + 1
