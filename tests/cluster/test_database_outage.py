"""A database that is away: ``qcluster`` fails fast at start, a burst gives up, a running cluster
logs sparingly and resumes.

The start-up tests run ``manage.py qcluster`` against a database that cannot be used (a closed
PostgreSQL port, a missing SQLite file, a database without the tables) and need no test database.
The outage tests take a PostgreSQL test database away under a running cluster: ``ALTER DATABASE ...
ALLOW_CONNECTIONS false`` and ``pg_terminate_backend`` on its sessions, which is what the cluster
sees when the server goes away, without touching the server other test runs use.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from django.db import connections

from django_taskmq import enqueue_many
from tests.conftest import ROOT

from .conftest import DEADLINE, engine_is_postgresql, job_states

pytestmark = [pytest.mark.cluster]

ISSUE_BOUND = 30.0  # seconds: the issue's bound for a burst to exit once the database is unreachable
COMPONENTS = ("sentinel", "scheduler", "pusher", "monitor")


def closed_port() -> int:
    """A TCP port on 127.0.0.1 where nothing listens (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_qcluster(settings_module: str, env: dict[str, str], *args: str) -> tuple[int, list[str], float]:
    """Run ``manage.py qcluster *args`` to its end; return its status, output lines and duration."""
    full = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module, "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p), **env}
    full.pop("TASKMQ_OVERRIDES", None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "manage.py", "qcluster", *args], cwd=str(ROOT), env=full,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=DEADLINE)
    return proc.returncode, proc.stdout.splitlines(), time.monotonic() - started


# -- start-up ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [("--burst",), ()], ids=["burst", "running"])
def test_a_closed_port_stops_qcluster_at_once_with_one_line(args):
    port = closed_port()
    code, lines, seconds = run_qcluster("tests.settings_postgresql",
                                        {"PGHOST": "127.0.0.1", "PGPORT": str(port), "TASKMQ_DB_NAME": "taskmq_away"},
                                        *args)
    assert code == 1, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"qcluster: cannot reach database 'default' (postgresql taskmq_away at 127.0.0.1:{port}): ")
    assert "refused" in lines[0].lower()
    assert seconds < ISSUE_BOUND  # the issue's bound; measured about 1 s (the interpreter and Django)


def test_a_missing_sqlite_file_stops_qcluster_with_one_line(tmp_path):
    path = tmp_path / "absent" / "db.sqlite3"
    code, lines, _ = run_qcluster("tests.settings_sqlite", {"TASKMQ_DB_NAME": str(path)}, "--burst")
    assert code == 1, lines
    assert lines == [f"qcluster: cannot reach database 'default' (sqlite {path}): the file does not exist "
                     "(run manage.py migrate)"]
    assert not path.parent.exists()


def test_a_database_without_the_tables_stops_qcluster_with_one_line(tmp_path):
    path = tmp_path / "db.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE unrelated (id integer)")
    code, lines, _ = run_qcluster("tests.settings_sqlite", {"TASKMQ_DB_NAME": str(path)})
    assert code == 1, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"qcluster: database 'default' (sqlite {path}) has no table django_taskmq_job ")
    assert lines[0].endswith(": run manage.py migrate")


# -- outages under a running cluster (PostgreSQL) --------------------------------------------------

needs_postgresql = pytest.mark.skipif(not engine_is_postgresql(),
                                      reason="takes a PostgreSQL database away; a local SQLite file cannot go away")


def _admin(sql: str, *params) -> None:
    """Run ``sql`` on the server's maintenance database (not the test database)."""
    import psycopg

    db = connections["default"].settings_dict
    with psycopg.connect(host=db.get("HOST") or None, port=db.get("PORT") or None, user=db.get("USER") or None,
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(sql, params or None)


@contextlib.contextmanager
def database_away() -> Iterator[None]:
    """Refuse new connections to the test database and end its sessions; allow them again after."""
    name = connections["default"].settings_dict["NAME"]
    quoted = '"' + name.replace('"', '""') + '"'
    _admin(f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS false")
    try:
        _admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
               name)
        yield
    finally:
        _admin(f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS true")
        for conn in connections.all():
            conn.close()  # this test's own session was ended too


def component_lines(lines: list[str], component: str) -> list[str]:
    return [line for line in lines if line.startswith(f"{component}: ")]


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_burst_gives_up_within_the_bound_once_the_database_is_away(cluster):
    """The issue: ``qcluster --burst`` exits non-zero in under 30 s with fewer than 50 lines."""
    ids = enqueue_many("tests.cluster.tasks_cluster.sleeper", [(0.05,)] * 2000)
    qc = cluster.start("--burst", "-w", "2")
    cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= 20, "some jobs to succeed", alive=[qc])
    with database_away():
        away = time.monotonic()
        code = qc.wait()
        seconds = time.monotonic() - away
    output = qc.output(tail=10**7)
    lines = output.splitlines()
    print(f"burst exited {code} {seconds:.1f} s after the database went away, {len(lines)} lines")
    assert code == 1, output
    assert seconds < ISSUE_BOUND, output
    assert len(lines) < 50, output
    assert "Traceback" not in output
    assert lines[-1].startswith("qcluster --burst: giving up, database 'default' (postgresql "), output
    assert "unreachable for" in lines[-1]
    assert "stopping the cluster: processes killed; " in lines[-1]  # then what becomes of its tasks
    # Each component said it once, then counted: a line per 5 s at most (plus the monitor's give-up).
    for component in COMPONENTS:
        assert len(component_lines(lines, component)) <= 2 + seconds / 5, output
    assert not qc.tree(), "the cluster's processes must be gone"


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_running_cluster_logs_an_outage_sparingly_and_resumes(cluster):
    ids = enqueue_many("tests.cluster.tasks_cluster.sleeper", [(0.02,)] * 300)
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= 20, "some jobs to succeed", alive=[qc])
    before = len(qc.output(tail=10**7).splitlines())
    with database_away():
        away = time.monotonic()
        # Away long enough for the sentinel and the pusher to log a count line each.
        cluster.wait_until(
            lambda: all(f"{c}: still failing" in qc.output(tail=10**7) for c in ("sentinel", "pusher")),
            lambda: f"count lines from the sentinel and the pusher:\n{qc.output()}", alive=[qc])
        seconds = time.monotonic() - away
        during = qc.output(tail=10**7).splitlines()[before:]
        print(f"away {seconds:.1f} s: {len(during)} lines")
    later = enqueue_many("tests.cluster.tasks_cluster.sleeper", [(0.02,)] * 100)
    cluster.wait_final(ids + later, alive=[qc])
    assert job_states(ids + later) == {"SUCCEEDED": 400}
    # The sentinel says so at its next heartbeat (every 2 s), which can come after the last job.
    cluster.wait_until(lambda: all(f"{c}: database is back after" in qc.output(tail=10**7) for c in ("sentinel", "pusher")),
                       lambda: f"the sentinel and the pusher to say the database is back:\n{qc.output()}", alive=[qc])

    output = qc.output(tail=10**7)
    assert "Traceback" not in output
    for component in COMPONENTS:
        assert len(component_lines(during, component)) <= 2 + seconds / 5, "\n".join(during)
    for component in ("sentinel", "pusher"):
        back = [line for line in output.splitlines() if line.startswith(f"{component}: database is back after")]
        assert len(back) == 1, output
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()


# -- failover: sessions ended under a burst (PostgreSQL) ---------------------------------------------

def executions(log: list[tuple[str, str]], tag: str) -> collections.Counter:
    """Count the runs of each job (its ``start:<tag>`` lines in the run log)."""
    return collections.Counter(job_id for job_id, event in log if event.startswith(f"start:{tag} "))


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_sessions_ended_mid_burst_lose_nothing_and_run_nothing_twice(cluster):
    """``pg_terminate_backend`` on every session of the cluster (57P01, what a failover or a
    restart does to them), three times during a burst: each process reconnects, every job runs
    once and ends SUCCEEDED once, and the burst ends normally."""
    name = connections["default"].settings_dict["NAME"]
    ids = enqueue_many("tests.cluster.tasks_cluster.slow", [("burst", 0.002)] * 900)
    qc = cluster.start("--burst", "-w", "2")
    ended = 0
    for wave in (50, 300, 600):
        cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= wave, f"{wave} jobs to succeed", alive=[qc])
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = %s AND pid <> pg_backend_pid()", [name])
            ended += cursor.fetchone()[0]
    assert qc.wait() == 0, qc.output(tail=10**7)
    output = qc.output(tail=10**7)
    assert job_states(ids) == {"SUCCEEDED": 900}, output
    runs = executions(cluster.log(), "burst")
    assert set(runs) == set(ids)
    assert set(runs.values()) == {1}, {job_id: n for job_id, n in runs.items() if n != 1}
    assert ended >= 3  # each time, at least the pusher's session
    assert "the server ended the session (shutdown, or pg_terminate_backend): reconnecting" in output, output
    assert "Traceback" not in output


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_server_that_turned_read_only_is_left_until_writes_work_again(cluster):
    """What a cluster sees when its server was demoted (or its address now leads to a standby):
    connections that work, and writes refused with SQLSTATE 25006. Here every new session of the
    test database is read-only for a while (``default_transaction_read_only``) and the cluster's
    sessions are ended. No outcome may be recorded as a failure for it, nor dropped: the cluster
    reconnects until writes work again, and every job runs once and ends SUCCEEDED."""
    name = connections["default"].settings_dict["NAME"]
    quoted = '"' + name.replace('"', '""') + '"'
    ids = enqueue_many("tests.cluster.tasks_cluster.slow", [("burst", 0.002)] * 600)
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= 50, "some jobs to succeed", alive=[qc])
    _admin(f"ALTER DATABASE {quoted} SET default_transaction_read_only = on")
    try:
        with connections["default"].cursor() as cursor:  # this test's own session stays (it reads)
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = %s AND pid <> pg_backend_pid()", [name])
        cluster.wait_until(lambda: "no longer the primary: reconnecting" in qc.output(tail=10**7),
                           lambda: f"the cluster to meet the read-only server:\n{qc.output()}", alive=[qc])
        time.sleep(2)  # (a while longer: more writes refused, more reconnects)
    finally:
        _admin(f"ALTER DATABASE {quoted} RESET default_transaction_read_only")
    cluster.wait_final(ids, alive=[qc])
    output = qc.output(tail=10**7)
    assert job_states(ids) == {"SUCCEEDED": 600}, output
    runs = executions(cluster.log(), "burst")
    assert set(runs) == set(ids)
    assert set(runs.values()) == {1}, {job_id: n for job_id, n in runs.items() if n != 1}
    assert "could not be stored" not in output
    assert "Traceback" not in output
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()


@needs_postgresql
@pytest.mark.django_db(transaction=True)
def test_tasks_get_a_new_connection_after_theirs_was_ended(cluster):
    """A task's own queries use its worker's connection, kept from task to task. Ended by the
    server (a failover, a restart), it fails the task that meets it, then is replaced: the task's
    retry and every later task succeed (it used to fail every later task of that worker until the
    worker was recycled, and send them to the dead-letter queue)."""
    name = connections["default"].settings_dict["NAME"]
    ids = enqueue_many("tests.cluster.tasks_cluster.queried", [("query",)] * 400)
    qc = cluster.start("-w", "2")
    for wave in (50, 200):
        cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= wave, f"{wave} jobs to succeed", alive=[qc])
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = %s AND pid <> pg_backend_pid()", [name])
    cluster.wait_final(ids, alive=[qc])
    assert job_states(ids) == {"SUCCEEDED": 400}, qc.output()
    # Only the tasks that met an ended connection ran again: each worker's ended connection fails one
    # task per wave (a retry may meet the other worker's, not yet replaced, so a job can run 3 times).
    runs = executions(cluster.log(), "query")
    again = {job_id: n for job_id, n in runs.items() if n > 1}
    assert sum(n - 1 for n in again.values()) <= 2 * 2, again
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
