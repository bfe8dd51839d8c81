"""The cluster's own statements end within a bound (``policy.lease.statement_bound``: a sixth of the
lease), whatever holds them: a lock held by another connection, or a link that stops answering while
its far side still acknowledges (a proxy that stops forwarding, which TCP keepalives do not notice).

Script tests run one statement in a fresh process set up as a cluster process is (``outage.prepare``
and ``outage.bound_statements``); the cluster test puts a whole cluster behind a proxy
(``relay.Relay``) that stops forwarding every connection it carries, then a job fails: the monitor's
statement ends with an error within the bound, and the outcome is recorded once, by the same
monitor, on a new connection.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import select
import sqlite3
import time
from collections.abc import Iterator

import pytest
from django.db import connections

from django_taskmq import async_task
from django_taskmq.models import Job
from django_taskmq.policy.lease import statement_bound
from tests.conftest import db_env, start_script

from .conftest import engine_is_server
from .relay import Relay

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"
LEASE = 12.0  # a statement bound of 2 s, the monitor replaced after 4 s without a turn
BOUND = statement_bound(LEASE)

# Runs one statement on the job table, again until it succeeds; prints what each try did. argv[1]:
# "bounded" sets the process up as a cluster process; argv[2]: "write" makes it an UPDATE.
SCRIPT = """
import json, sys, time
from django.db import connections
from django_taskmq.cluster import outage
from django_taskmq.conf import get_settings
from django_taskmq.models import Job
from django_taskmq.policy.connections import disconnect

settings = get_settings()
outage.prepare("default", settings.dead_connection_timeout)
if sys.argv[1] == "bounded":
    outage.bound_statements(settings)
conn = connections["default"]
conn.ensure_connection()
print(json.dumps({"event": "connected"}), flush=True)
sys.stdin.readline()  # the test has set the trap
while True:
    started = time.monotonic()
    try:
        with conn.cursor() as cursor:
            if sys.argv[2] == "write":
                cursor.execute(f"UPDATE {Job._meta.db_table} SET priority = priority WHERE id = 'none'")
            else:
                cursor.execute(f"SELECT COUNT(*) FROM {Job._meta.db_table}")
                cursor.fetchone()
    except Exception as exc:
        print(json.dumps({"event": "failed", "took": time.monotonic() - started, "error": str(exc)[:200],
                          "lost_link": disconnect(exc) is not None}), flush=True)
        conn.close()
        time.sleep(0.2)
    else:
        print(json.dumps({"event": "ok", "took": time.monotonic() - started}), flush=True)
        break
"""


def server_address() -> tuple[str, int]:
    db = connections["default"].settings_dict
    return db.get("HOST") or "127.0.0.1", int(db.get("PORT") or (5432 if connections["default"].vendor ==
                                                                  "postgresql" else 3306))


def port_env(port: int) -> dict[str, str]:
    """Environment variables that point the test settings' connection at ``port``."""
    return {"PGPORT": str(port)} if connections["default"].vendor == "postgresql" else {"MYSQL_PORT": str(port)}


@contextlib.contextmanager
def job_table_locked() -> Iterator[None]:
    """Hold the job table locked from another connection: PostgreSQL ``ACCESS EXCLUSIVE`` (no
    statement on it runs), MariaDB ``LOCK TABLES ... WRITE`` (likewise), SQLite ``BEGIN EXCLUSIVE``
    (no write runs)."""
    db, table = connections["default"].settings_dict, Job._meta.db_table
    vendor = connections["default"].vendor
    if vendor == "sqlite":
        lite = sqlite3.connect(db["NAME"], isolation_level=None, timeout=60)
        lite.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            lite.execute("ROLLBACK")
            lite.close()
        return
    if vendor == "postgresql":
        import psycopg

        conn = psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"])
        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    else:
        import MySQLdb

        conn = MySQLdb.connect(host=db["HOST"], port=int(db["PORT"]), user=db["USER"], password=db["PASSWORD"],
                               database=db["NAME"])
        conn.cursor().execute(f"LOCK TABLES {table} WRITE")
    try:
        yield
    finally:
        conn.close()  # ends the transaction and its locks


def events(proc, count: int, timeout: float) -> list[dict]:
    """Read ``count`` JSON lines from the script (fail past ``timeout`` seconds)."""
    found, deadline = [], time.monotonic() + timeout
    while len(found) < count:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            proc.kill()
            pytest.fail(f"the script said {found}, waiting for {count} line(s):\n{proc.stderr.read()}")
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the script exited after {found}:\n{proc.stderr.read()}")
        found.append(json.loads(line))
    return found


def script(bounded: bool, write: bool, env_extra: dict[str, str] | None = None):
    env = db_env({"TASKMQ_OVERRIDES": json.dumps({"lease": LEASE}), **(env_extra or {})})
    proc = start_script(SCRIPT, "bounded" if bounded else "unbounded", "write" if write else "read", env=env,
                        stdin=__import__("subprocess").PIPE)
    assert events(proc, 1, 60) == [{"event": "connected"}]
    return proc


def go(proc) -> None:
    proc.stdin.write("go\n")
    proc.stdin.flush()


def test_a_statement_waiting_for_a_lock_ends_within_the_bound_and_succeeds_after_it():
    sqlite = connections["default"].vendor == "sqlite"
    proc = script(bounded=True, write=sqlite)  # on SQLite only a write waits for the lock
    with job_table_locked():
        go(proc)
        failed = events(proc, 1, 10 * BOUND)[0]  # while the lock is held
    ok = events(proc, 1, 60)[0]
    proc.wait(30)
    assert failed["event"] == "failed", failed
    assert failed["took"] < 4 * BOUND, failed  # generous: a loaded machine
    assert ok["event"] == "ok"


@pytest.mark.skipif(not engine_is_server(), reason="SQLite has no link")
def test_a_statement_on_a_link_that_stops_answering_ends_within_the_bound():
    relay = Relay(server_address())
    try:
        proc = script(bounded=True, write=False, env_extra=port_env(relay.port))
        assert relay.stall() == 1
        go(proc)
        failed, ok = events(proc, 2, 10 * BOUND)  # the new connection goes through the proxy
        proc.wait(30)
    finally:
        relay.close()
    assert failed["event"] == "failed" and failed["lost_link"], failed
    assert failed["took"] < 4 * BOUND, failed
    assert ok["event"] == "ok"


@pytest.mark.skipif(not engine_is_server(), reason="SQLite has no link")
def test_a_process_not_bounded_is_not_cut():
    """A worker's connection (the tasks' own) is never bounded: the unbounded script waits for the lock."""
    proc = script(bounded=False, write=False)
    with job_table_locked():
        go(proc)
        time.sleep(3 * BOUND)
        assert select.select([proc.stdout], [], [], 0)[0] == []  # nothing said: still waiting
    assert events(proc, 1, 60)[0]["event"] == "ok"
    proc.wait(30)


@pytest.mark.skipif(not engine_is_server(), reason="SQLite has no link")
def test_a_monitor_whose_link_stops_answering_records_the_outcome_once(cluster):
    """Every connection of a cluster behind a proxy stops forwarding; then a job fails (a failure is
    the monitor's to record: a worker records only plain successes itself). The monitor's statement
    ends within the bound and the same monitor records the failure on a new connection: nothing is
    treated as wedged, the job runs once."""
    relay = Relay(server_address())
    try:
        cluster.configure(lease=LEASE)
        first = async_task(f"{TASKS}.boom", "first", max_deliveries=1)
        qc = cluster.start("-w", "1", env=port_env(relay.port))
        cluster.wait_final([first], alive=[qc])  # every process of the cluster has connected
        assert relay.stall() >= 4  # sentinel (bookkeeping), pusher, monitor, scheduler, the worker's
        job = async_task(f"{TASKS}.boom", "stalled", max_deliveries=1)
        cluster.wait_final([job], alive=[qc], timeout=60)
        output = qc.output(tail=20000)
    finally:
        relay.close()
    found = Job.objects.get(pk=job)
    assert (found.state, found.deliveries) == ("DEAD", 1), (found.state, found.error)
    starts = collections.Counter(j for j, t in cluster.log() if t == "start:stalled")
    assert starts[job] == 1, cluster.log()
    assert "its connection was cut" in output, output
    # The monitor's statement (a pruning step, or the recording) failed, and it went on on a new connection.
    assert re.search(r"^monitor: .*: reconnecting", output, re.MULTILINE), output
    assert "is wedged" not in output, output
