"""PgBouncer in transaction mode with the default settings: what the cluster avoids and how it wakes.

Runs under ``tests.settings_pgbouncer`` (``scripts/suites pgbouncer``): connection "default" goes
through Debian's PgBouncer, started by the test setup (``tests/pgbouncer.py``), "direct" reaches
PostgreSQL itself. The same suite runs the cluster scenarios of the other files of this directory
through it. Real server, real PgBouncer, real qcluster processes.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading

import psycopg
import pytest
from django.db import OperationalError, connections

from django_taskmq import async_task
from django_taskmq.brokers import get_broker, pooling
from django_taskmq.brokers.base import Ack
from django_taskmq.brokers.orm.notify_probe import probe

from .conftest import job_states


def through_pgbouncer() -> bool:
    from django.conf import settings

    return bool(getattr(settings, "PGBOUNCER", False))


pytestmark = [
    pytest.mark.pgbouncer,
    pytest.mark.django_db(transaction=True, databases=["default", "direct"]),
    pytest.mark.skipif("not through_pgbouncer()",
                       reason="needs tests.settings_pgbouncer: runs in scripts/suites pgbouncer"),
]

NO_NOTIFICATION = "received no notification"
POOLER_SEEN = "is reached through a connection pooler: no server-side prepared statements"


def psycopg_connection(port: int) -> psycopg.Connection:
    db = connections["default"].settings_dict
    return psycopg.connect(host=db["HOST"], port=port, user=db["USER"], dbname=db["NAME"], autocommit=True)


def test_this_suite_goes_through_pgbouncer(pgbouncer):
    """The suite's "default" is PgBouncer's port, and the session there is not the server's own."""
    conn = connections["default"]
    assert int(conn.settings_dict["PORT"]) == pgbouncer.port
    conn.ensure_connection()
    assert pooling.behind_pooler(conn.connection)


def test_a_pooler_is_told_from_a_direct_connection(pgbouncer):
    """The pid the session was given is PgBouncer's own making, a direct session's is the server's."""
    direct_port = int(connections["direct"].settings_dict["PORT"])
    with psycopg_connection(pgbouncer.port) as pooled, psycopg_connection(direct_port) as direct:
        assert pooling.behind_pooler(pooled)
        assert not pooling.behind_pooler(direct)


def test_the_notify_probe_fails_through_transaction_pooling_and_passes_on_a_direct_listener(pgbouncer):
    """A LISTEN through PgBouncer never hears the probe's NOTIFY; a direct one hears it, sent through PgBouncer."""
    assert probe(connections["direct"], "default")
    assert not probe(connections["default"], "default", wait=1.0)
    assert probe(connections["direct"], "direct")


def test_the_notify_probe_gives_way_when_the_sentinel_speaks(pgbouncer):
    """Through PgBouncer the probe would wait its whole bound; a message on the pipe ends it
    undecided (None), neither passed nor failed."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    threading.Timer(0.2, lambda: writer.send("stop")).start()
    assert probe(connections["default"], "default", wait=120.0, pipe=reader) is None


def test_the_hot_statements_are_not_prepared_behind_the_pooler_nor_by_psycopg_itself(pgbouncer, broker):
    """Behind PgBouncer the broker's hot cursor is Django's own, and psycopg's automatic preparing
    (a project's OPTIONS['prepare_threshold']) is turned off on the connection."""
    pooling._by_alias.clear()
    conn = connections["default"]
    conn.ensure_connection()
    conn.connection.prepare_threshold = 0  # as OPTIONS {"prepare_threshold": 0} would: prepare everything
    with broker.hot_cursor() as cursor:
        cursor.execute("SELECT 1")
        assert type(cursor.cursor).__name__ != "PreparedCursor"  # Django's own, binding on the client
    assert conn.connection.prepare_threshold is None


def test_always_prepares_behind_the_pooler_without_looking(pgbouncer, broker, taskmq_settings):
    """prepared_statements "always" (for a pooler that carries them, PgBouncer 1.21+) skips the detection."""
    pooling._by_alias.clear()
    taskmq_settings(prepared_statements="always")
    with get_broker().hot_cursor() as cursor:
        cursor.execute("SELECT 1")
        assert type(cursor.cursor).__name__ == "PreparedCursor"  # True would not, behind PgBouncer (above)
        # Not on PgBouncer 1.18: leave no "_pg3_0" on the server connection it most likely landed on
        # (the last one freed), for the next test's sake.
        cursor.execute("DEALLOCATE ALL")
    connections["default"].close()


def test_a_prepared_statement_lost_by_the_pooler_turns_preparing_off_for_good(pgbouncer, broker, caplog):
    """Were a pooler missed, the first prepared statement it loses or mixes up raises a retryable
    OperationalError with one warning; from then on nothing is prepared and claims and acks work."""
    pooling._by_alias.clear()
    conn = connections["default"]
    conn.ensure_connection()
    preparing = pooling.preparing("default", True)
    preparing._verdicts[conn.connection] = True  # the detection missed it (a pooler that passes the pid on)
    statement = "SELECT count(*) FROM django_taskmq_job WHERE queue = %s"

    def run() -> tuple[tuple, str]:
        with broker.hot_cursor() as cursor:
            cursor.execute(statement, ["default"])
            return cursor.fetchone(), type(cursor.cursor).__name__

    lost = []
    with caplog.at_level(logging.WARNING, logger="django_taskmq.brokers.pooling"):
        try:
            # Prepared on the server connection PgBouncer chose (unless an earlier client left a
            # "_pg3_0" there: then this is the lost one).
            assert run() == ((0,), "PreparedCursor")
        except OperationalError as exc:
            lost.append(exc)
        # Another client holds that server connection (PgBouncer hands out the last one freed) in a
        # transaction: the next run of the statement lands on another, where it was never prepared.
        with psycopg_connection(pgbouncer.port) as other, other.transaction():
            other.execute("SELECT 1")
            if not lost:
                with pytest.raises(OperationalError, match="prepared statement lost") as raised:
                    run()
                lost.append(raised.value)
            assert run()[0] == (0,)  # runs wherever it lands
            assert run()[1] != "PreparedCursor"
    assert len(lost) == 1 and pooling.sqlstate(lost[0].__cause__) in pooling.PREPARE_ERRORS
    warnings = [r for r in caplog.records if r.name == "django_taskmq.brokers.pooling"]
    assert len(warnings) == 1 and "Not preparing statements any more" in warnings[0].getMessage()
    assert preparing.broken
    job_id = async_task("tests.tasks.noop")
    (reservation,) = broker.reserve(["default"], 10, 30, "tests")
    assert broker.ack_many([Ack(reservation, None, None, None)]) == []
    assert job_states([job_id]) == {"SUCCEEDED": 1}


def test_with_the_defaults_a_cluster_behind_the_pooler_polls_after_one_warning_and_runs_everything_once(cluster):
    """No listen_database: the start-up probe finds that PgBouncer drops notifications, one warning
    says so, and the idle cluster finds new work by polling; nothing is prepared, nothing fails."""
    cluster.configure(poll=0.2)
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: NO_NOTIFICATION in qc.output(100_000), "the probe's warning", alive=[qc])
    ids = [async_task("tests.tasks.record_run", i) for i in range(30)]
    cluster.wait_final(ids, alive=[qc])
    assert job_states(ids) == {"SUCCEEDED": 30}
    assert sorted(tag for _, tag in cluster.log()) == sorted(str(i) for i in range(30))
    output = qc.output(100_000)
    assert output.count(NO_NOTIFICATION) == 1  # one pusher, one warning
    assert POOLER_SEEN in output
    assert "idle wake-ups by LISTEN" not in output
    for symptom in ("DuplicatePreparedStatement", "InvalidSqlStatementName", "prepared statement lost"):
        assert symptom not in output


def test_a_burst_polls_without_probing(cluster):
    """qcluster --burst naps briefly while its last tasks run: it polls rather than spend up to the
    probe's bound on it. (With listen_database the probe would pass and the pusher announce LISTEN.)"""
    cluster.configure(listen_database="direct")
    ids = [async_task("tests.tasks.sleep", 1.0)] + [async_task("tests.tasks.noop") for _ in range(5)]
    qc = cluster.burst("-w", "2")
    assert job_states(ids) == {"SUCCEEDED": 6}
    output = qc.output(100_000)
    assert "idle wake-ups by LISTEN" not in output and NO_NOTIFICATION not in output


def test_with_listen_database_an_idle_cluster_behind_the_pooler_is_woken_by_notify(cluster):
    """listen_database "direct": the probe passes, and an idle cluster whose poll is an hour runs new
    work, which only a notification can have told it about."""
    cluster.configure(listen_database="direct", poll=3600)
    qc = cluster.start("-w", "1")
    listening = "idle wake-ups by LISTEN on database TASKMQ['listen_database'] 'direct'"
    cluster.wait_until(lambda: listening in qc.output(100_000), "the pusher listening on 'direct'", alive=[qc])
    for round_ in range(3):  # each time idle again, each time woken
        ids = [async_task("tests.tasks.record_run", f"{round_}-{i}") for i in range(3)]
        cluster.wait_final(ids, alive=[qc])
        assert job_states(ids) == {"SUCCEEDED": 3}
    assert NO_NOTIFICATION not in qc.output(100_000)


def test_qcluster_refuses_to_start_with_an_unknown_listen_database(cluster):
    """A listen_database that is not an alias stops qcluster at start-up, naming the setting."""
    cluster.configure(listen_database="nowhere")
    qc = cluster.start("-w", "1")
    assert qc.wait() != 0
    output = qc.output(100_000)
    assert "taskmq.E010" in output and "TASKMQ['listen_database'] 'nowhere' is not in DATABASES" in output
    assert "started" not in output  # no cluster ran
