"""``TASKMQ['durable_outcomes'] = False``: the cluster's own commits (recording outcomes, leases,
give-backs, pruning, heartbeats) need not wait for the disk flush; a caller's enqueue always does.

PostgreSQL: each such transaction runs with ``synchronous_commit`` off, set for itself only (as
a pooler in transaction mode needs); SQLite in WAL mode: ``synchronous NORMAL`` while the cluster
records, the connection's own level afterwards; MySQL: nothing (its setting is the server's).
See ``OrmBroker.bookkeeping``; the crash itself is tests/cluster/test_durable_outcomes.py.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_taskmq import async_task
from django_taskmq.runtime import recorder
from django_taskmq.runtime import execution as ex
from django_taskmq.brokers import Ack, get_broker
from django_taskmq.models import Job, State

pytestmark = pytest.mark.django_db(transaction=True)  # the cluster records outside any transaction

def setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}" if connection.vendor == "sqlite" else f"SHOW {name}")
        return str(cursor.fetchone()[0]).lower()


@pytest.fixture
def relaxed(taskmq_settings):
    """The broker of ``durable_outcomes = False``."""
    from django_taskmq import brokers

    taskmq_settings(durable_outcomes=False)
    brokers._brokers.clear()
    yield get_broker()
    brokers._brokers.clear()


def reserved(broker, n: int, func: str = "tests.tasks.noop"):
    Job.objects.filter(state=State.QUEUED).delete()  # what a test enqueued for itself
    ids = [async_task(func, i) for i in range(n)]
    reservations = broker.reserve(["default"], n, 30, "host:1:w0")
    assert sorted(r.job_id for r in reservations) == sorted(ids)
    return reservations


def success(reservation) -> ex.Outcome:
    return ex.Outcome(reservation, None, ex.SUCCESS, result=3, started_at=1.0, finished_at=2.0)


def watching(statement_starts: tuple[str, ...], seen: list[str]):
    """An execute wrapper that reads ``synchronous_commit`` right after each statement that starts
    with one of ``statement_starts``, in the same transaction."""
    def watch(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith(statement_starts) and connection.in_atomic_block:
            with connection.cursor() as cursor:
                cursor.cursor.execute("SHOW synchronous_commit")  # the raw cursor: not watched again
                seen.append(cursor.cursor.fetchone()[0])
        return result

    return watch


def ended(ids) -> set[str]:
    return set(Job.objects.filter(pk__in=ids).values_list("state", flat=True))


def test_postgresql_recording_commits_without_the_flush_and_enqueue_with_it(relaxed):
    """A batch of acks and a failed delivery, recorded as the monitor records them, run with
    ``synchronous_commit`` off inside their own transactions; async_task's transaction, and
    anything after the recording, with it on."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    acks = [success(r) for r in reserved(relaxed, 2)]
    seen: list[str] = []
    with connection.execute_wrapper(watching(("UPDATE django_taskmq_job AS j SET state = 'SUCCEEDED'",), seen)):
        finals = recorder.record(acks, relaxed, relaxed.settings, outside_transaction=True, bookkeeping=True)
    assert [state for _, state in finals] == ["SUCCEEDED", "SUCCEEDED"]
    assert seen == ["off"]  # one transaction, folded into the ack (no statement of its own)
    assert ended(o.reservation.job_id for o in acks) == {State.SUCCEEDED}

    (failed,) = reserved(relaxed, 1)
    (other,) = reserved(relaxed, 1)
    outcomes = [ex.Outcome(failed, None, ex.FAILURE, error="boom", started_at=1.0, finished_at=2.0), success(other)]
    seen.clear()
    with connection.execute_wrapper(watching(("UPDATE django_taskmq_job SET state = 'RETRYING'",), seen)):
        recorder.record(outcomes, relaxed, relaxed.settings, outside_transaction=True, bookkeeping=True)
    assert seen == ["off"]
    assert Job.objects.get(pk=failed.job_id).state == State.RETRYING
    assert Job.objects.get(pk=other.job_id).state == State.SUCCEEDED

    with transaction.atomic():
        async_task("tests.tasks.noop")
        assert setting("synchronous_commit") == "on"
    with transaction.atomic():
        assert setting("synchronous_commit") == "on"


def test_postgresql_only_the_cluster_relaxes(relaxed, taskmq_settings):
    """Recording that is not the cluster's (sync mode's), a block entered inside the caller's
    transaction, and the default ``durable_outcomes = True`` all commit with the flush."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    seen: list[str] = []
    starts = ("UPDATE django_taskmq_job AS j SET state = 'SUCCEEDED'",)
    acks = [success(r) for r in reserved(relaxed, 2)]
    with connection.execute_wrapper(watching(starts, seen)):
        recorder.record(acks, relaxed, relaxed.settings)  # not bookkeeping: sync mode's
    acks = [success(r) for r in reserved(relaxed, 2)]
    with connection.execute_wrapper(watching(starts, seen)), transaction.atomic():
        async_task("tests.tasks.noop")  # the caller's transaction: the block changes nothing
        with relaxed.bookkeeping():
            relaxed.ack_many([Ack(o.reservation, o.result) for o in acks])
    assert seen == ["on", "on"]

    from django_taskmq import brokers

    taskmq_settings(durable_outcomes=True)
    brokers._brokers.clear()
    durable = get_broker()
    acks = [success(r) for r in reserved(durable, 2)]
    seen.clear()
    with connection.execute_wrapper(watching(starts, seen)):
        recorder.record(acks, durable, durable.settings, outside_transaction=True, bookkeeping=True)
    assert seen == ["on"]


def test_relaxed_statements_that_commit_by_themselves_still_work(relaxed):
    """The cluster's lone commits carry the no-flush clause on PostgreSQL (nothing elsewhere): a
    lone ack, lease renewals, the lease sweep, the pruning chore, give-backs, a heartbeat."""
    (lone,) = reserved(relaxed, 1)
    statements: list[str] = []

    def watch(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        finals = recorder.record([success(lone)], relaxed, relaxed.settings, outside_transaction=True,
                                 bookkeeping=True)
        assert [state for _, state in finals] == ["SUCCEEDED"]
        renew, sweep, back = reserved(relaxed, 3)
        with relaxed.bookkeeping():
            assert relaxed.extend_leases("host:1:w0", [renew.job_id, sweep.job_id], 60) == 2
            Job.objects.filter(pk=sweep.job_id).update(lease_until=0)  # ran out
            assert relaxed.reclaim_expired() == 1
            relaxed.hold_chore("prune", "host:1", 5)  # creates the chore's row (the ORM, durable)
            assert relaxed.hold_chore("prune", "host:1", 5)  # the row exists now: the UPDATE
            assert relaxed.return_interrupted([back], "stopped") == 1
            relaxed.publish_heartbeat("host:1", name="default", host="host", pid=1, state="running",
                                      workers=1, queues=["default"], counts={})
    assert Job.objects.get(pk=lone.job_id).state == State.SUCCEEDED
    assert Job.objects.get(pk=renew.job_id).state == State.RUNNING
    assert Job.objects.get(pk=sweep.job_id).state == State.RETRYING  # the sweep's state (RECLAIM)
    assert Job.objects.get(pk=back.job_id).state == State.QUEUED
    if connection.vendor == "postgresql":
        folded = [s for s in statements if "set_config('synchronous_commit', 'off', true)" in s]
        assert any(s.startswith("UPDATE django_taskmq_job AS j SET state = 'SUCCEEDED'") for s in folded)
        assert any("SET lease_until" in s for s in folded)
        assert any("'lease expired'" in s for s in folded)
        assert any(s.startswith("UPDATE django_taskmq_chore") for s in folded)
    else:
        assert not any("set_config" in s for s in statements)


@pytest.mark.sqlite_only
def test_sqlite_recording_defers_the_flush_and_restores_the_level(relaxed):
    """In WAL mode the cluster's recording runs with ``synchronous NORMAL``; the connection's own
    level (FULL here) comes back afterwards, for the caller's enqueue and everything else."""
    assert setting("journal_mode") == "wal"
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous = 2")  # FULL
    acks = [success(r) for r in reserved(relaxed, 2)]
    seen: list[str] = []

    def watch(execute, sql, params, many, context):
        if sql.startswith("UPDATE django_taskmq_job SET state = 'SUCCEEDED'"):
            seen.append(str(connection.connection.execute("PRAGMA synchronous").fetchone()[0]))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        recorder.record(acks, relaxed, relaxed.settings, outside_transaction=True, bookkeeping=True)
    assert seen == ["1"]  # NORMAL (executemany: the wrapper sees it once)
    assert setting("synchronous") == "2"
    async_task("tests.tasks.noop")
    assert setting("synchronous") == "2"
    with relaxed.bookkeeping():
        assert setting("synchronous") == "1"
        with transaction.atomic():
            pass
    assert setting("synchronous") == "2"
