"""The ORM broker's claims commit without waiting for the disk flush; every other write still waits.

On SQLite in WAL mode a claim runs with ``PRAGMA synchronous = NORMAL`` and the connection's own
level is put back afterwards; on PostgreSQL a claim sets ``synchronous_commit`` off for its own
transaction only. See ``OrmBroker.write_transaction``.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_taskmq import async_task
from django_taskmq.models import Job, State

pytestmark = pytest.mark.django_db(transaction=True)  # a claim outside any transaction, as the pusher makes it


def setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}" if connection.vendor == "sqlite" else f"SHOW {name}")
        return str(cursor.fetchone()[0]).lower()


@pytest.mark.sqlite_only
@pytest.mark.parametrize("level", ["2", "3"])  # FULL, EXTRA
def test_sqlite_claim_defers_the_flush_and_restores_the_level(broker, level):
    assert setting("journal_mode") == "wal"
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA synchronous = {level}")
    with broker.write_transaction(durable=False):
        assert setting("synchronous") == "1"  # NORMAL: the commit does not flush
    assert setting("synchronous") == level
    with broker.write_transaction():
        assert setting("synchronous") == level  # any other write flushes as configured

    job_id = async_task("tests.tasks.add", 1, 2)
    (claimed,) = broker.reserve(["default"], 1, 30, "owner-a")
    assert claimed.job_id == job_id
    assert Job.objects.get(pk=job_id).state == State.RUNNING
    assert setting("synchronous") == level


@pytest.mark.sqlite_only
def test_sqlite_claim_leaves_a_connection_that_does_not_flush_alone(broker):
    """NORMAL (the test settings' init_command) is neither raised nor lowered by a claim."""
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous = 1")
    with broker.write_transaction(durable=False):
        assert setting("synchronous") == "1"
    assert setting("synchronous") == "1"


def test_postgresql_claim_commits_asynchronously_only_itself(broker):
    """Its first read turns ``synchronous_commit`` off for its own transaction (no statement of its
    own for that); what runs after the claim flushes again."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    job_id = async_task("tests.tasks.noop")
    at_claim = []

    def watch(execute, sql, params, many, context):
        if sql.startswith("WITH locked") or sql.startswith("UPDATE django_taskmq_job SET state = 'RUNNING'"):
            at_claim.append(setting("synchronous_commit"))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    assert reservation.job_id == job_id and at_claim == ["off"]
    with broker.write_transaction():
        assert setting("synchronous_commit") == "on"
