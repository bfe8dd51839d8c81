"""The cluster on Django's default SQLite settings: no ``transaction_mode``, the 5 s busy timeout, a
rollback journal (not WAL). Its own connections take the write lock at ``BEGIN`` and wait for it,
so a busy project prints no ``database is locked`` and no traceback (``tests.settings_sqlite_defaults``).

Each test migrates a database file of its own with those settings: the run's test database was
switched to WAL by ``tests.settings_sqlite``, and WAL stays with the file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, finish, start_script

from .conftest import DEADLINE, QCluster, engine_is_postgresql

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(engine_is_postgresql(), reason="SQLite's defaults"),
]

WRITER = """
import sys, time
from django_taskmq import async_task

# A web process on the same defaults, enqueuing one job per request.
for i in range(int(sys.argv[1])):
    async_task("tests.tasks.add", i, 1)
    time.sleep(0.005)
"""


def defaults_env(path: Path) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_sqlite_defaults", "TASKMQ_DB_NAME": str(path),
           "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    env.pop("TASKMQ_OVERRIDES", None)
    return env


@pytest.fixture
def defaults_db(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A migrated database file on Django's default SQLite settings, and the environment to use it."""
    path = tmp_path / "db.sqlite3"
    env = defaults_env(path)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=str(ROOT), env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=DEADLINE)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    return path, env


def states(path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM django_taskmq_job GROUP BY state").fetchall())


def wait_for(predicate, what: str, qc: QCluster) -> None:
    import time

    deadline = time.monotonic() + DEADLINE
    while not predicate():
        if not qc.running() or time.monotonic() > deadline:
            pytest.fail(f"waiting for {what}:\n{qc.output()}")
        time.sleep(0.1)


def test_a_busy_cluster_on_the_defaults_prints_no_lock_error(defaults_db, tmp_path):
    """A cluster and a process enqueuing 1000 jobs, one every few ms, on Django's SQLite defaults."""
    path, env = defaults_db
    qc = QCluster(["-w", "2"], env, tmp_path / "qcluster.log")
    try:
        wait_for(lambda: " started (" in qc.output(), "the cluster to start", qc)
        finish(start_script(WRITER, "1000", env=env), timeout=DEADLINE)
        wait_for(lambda: states(path).get("SUCCEEDED") == 1000, "1000 jobs to succeed", qc)
        qc.send(signal.SIGTERM)
        code = qc.wait()
        output = qc.output(tail=10**7)
    finally:
        qc.close()
    assert code == 0, output
    assert states(path) == {"SUCCEEDED": 1000}
    assert "Traceback" not in output
    assert "OperationalError" not in output
    assert "taskmq." not in output  # no warning of ours on the defaults
    assert "locked" not in output


ENQUEUER = """
import datetime, sys, time
from django.db import transaction
from django.utils import timezone
from django_taskmq import async_task, enqueue_many, schedule

# One web process of several on the same defaults: every way of ours to enqueue, each one committing
# while the others and the cluster write.
me, rounds = sys.argv[1], int(sys.argv[2])
for i in range(rounds):
    async_task("tests.tasks.add", i, 1)
    async_task("tests.tasks.add", i, 2, key=f"{me}:{i}")
    async_task("tests.tasks.add", i, 3, key=f"{me}:{i}")  # the same key: the first job's id, no new job
    enqueue_many("tests.tasks.add", [(i, 4), (i, 5)])
    with transaction.atomic():  # the caller's transaction, written to first
        async_task("tests.tasks.add", i, 6)
        async_task("tests.tasks.add", i, 7)
    if i % 10 == 0:  # a schedule (reads whether the name exists, then writes), due in an hour
        schedule("tests.tasks.add", i, 8, name=f"{me}:{i}", minutes=60, schedule_type="I",
                 next_run=timezone.now() + datetime.timedelta(hours=1))
    time.sleep(0.002)
print("done", me, flush=True)
"""

ENQUEUERS, ROUNDS, JOBS_PER_ROUND = 4, 60, 6


def test_concurrent_enqueuers_and_a_cluster_on_the_defaults_lose_nothing(defaults_db, tmp_path):
    """Four processes enqueue at once through each path of ours (plain, idempotency key, bulk, in the
    caller's transaction, and a schedule now and then) while a cluster claims and records, all on Django's SQLite defaults: every
    job is there and succeeds, and no process sees 'database is locked'."""
    path, env = defaults_db
    qc = QCluster(["-w", "2"], env, tmp_path / "qcluster.log")
    try:
        wait_for(lambda: " started (" in qc.output(), "the cluster to start", qc)
        writers = [start_script(ENQUEUER, f"w{n}", str(ROUNDS), env=env) for n in range(ENQUEUERS)]
        outputs = []
        for writer in writers:
            out, err = writer.communicate(timeout=DEADLINE)
            outputs.append((writer.returncode, out, err))
        total = ENQUEUERS * ROUNDS * JOBS_PER_ROUND
        assert [(code, err) for code, _, err in outputs if code != 0 or err.strip()] == []
        wait_for(lambda: states(path).get("SUCCEEDED") == total, f"{total} jobs to succeed", qc)
        qc.send(signal.SIGTERM)
        code = qc.wait()
        output = qc.output(tail=10**7)
    finally:
        qc.close()
    assert code == 0, output
    assert states(path) == {"SUCCEEDED": total}
    assert "Traceback" not in output and "locked" not in output, output
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM django_taskmq_idempotencykey").fetchone()[0] == ENQUEUERS * ROUNDS
        assert conn.execute("SELECT count(*) FROM django_taskmq_schedule").fetchone()[0] == ENQUEUERS * ROUNDS // 10


FORKED = """
import multiprocessing
from django.db import connections
from django_taskmq.cluster import outage

def show(label):
    conn = connections["default"]
    conn.ensure_connection()
    timeout = conn.connection.execute("PRAGMA busy_timeout").fetchone()[0]
    print(label, conn.transaction_mode, timeout, flush=True)
    conn.close()

show("before")
outage.prepare("default")
show("sentinel")
process = multiprocessing.get_context("fork").Process(target=show, args=("child",))
process.start()
process.join()
"""


def test_the_cluster_connections_take_the_write_lock_up_front_in_forked_children(defaults_db):
    """What the project's DATABASES says (nothing) is replaced in the cluster's processes only."""
    _, env = defaults_db
    out = finish(start_script(FORKED, env=env), timeout=DEADLINE)
    assert out.splitlines() == ["before None 5000", "sentinel IMMEDIATE 20000", "child IMMEDIATE 20000"]


def test_a_longer_busy_timeout_of_the_project_is_kept(tmp_path):
    code = """
from django.db import connections
from django_taskmq.cluster import outage
connections.settings["default"]["OPTIONS"] = {"timeout": 45}
outage.prepare("default")
print(connections["default"].settings_dict["OPTIONS"])
"""
    out = finish(start_script(code, env=defaults_env(tmp_path / "db.sqlite3")), timeout=DEADLINE)
    assert out.strip() == "{'timeout': 45.0, 'transaction_mode': 'IMMEDIATE'}"
