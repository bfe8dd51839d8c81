"""Supervision never waits on the database: while another connection holds every table of the app
locked (what a PostgreSQL failover, a long migration's ``ALTER TABLE`` or a SQLite writer holding
its lock looks like), a running task is still stopped at its timeout and a cancellation the cluster
knows of is still carried out; what could not be recorded meanwhile is recorded once, when the lock
goes, and the cluster serves new work. A scheduler tick that imports a slow module does not hold a
timeout back either.

Every wait during the stall reads the run log and /proc, never the database (it is locked).
"""

from __future__ import annotations

import collections
import contextlib
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator

import pytest
from django.apps import apps
from django.db import connections

from django_taskmq import async_task, cancel
from django_taskmq.models import DeadLetter, Job, Schedule

from .conftest import DEADLINE, is_alive

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"
STALL = 15.0  # seconds the tables stay locked (the figure)


@contextlib.contextmanager
def every_table_locked() -> Iterator[None]:
    """Hold every table of django_taskmq locked from another connection until the block ends:
    PostgreSQL ``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`` (no statement on them runs), SQLite
    ``BEGIN EXCLUSIVE`` (no write runs)."""
    db = connections["default"].settings_dict
    tables = sorted({m._meta.db_table for m in apps.get_app_config("django_taskmq").get_models()})
    if connections["default"].vendor == "postgresql":
        import psycopg

        conn = psycopg.connect(host=db.get("HOST") or None, port=db.get("PORT") or None, user=db.get("USER") or None,
                               password=db.get("PASSWORD") or None, dbname=db["NAME"])
        with conn:
            conn.execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
            try:
                yield
            finally:
                conn.rollback()
        return
    lite = sqlite3.connect(db["NAME"], isolation_level=None, timeout=60)
    try:
        lite.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            lite.execute("ROLLBACK")
    finally:
        lite.close()


def wait_without_database(cluster, predicate: Callable[[], object], what: str, timeout: float) -> bool:
    """Poll ``predicate`` (no database access) for up to ``timeout`` seconds; return whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def started_in(cluster, tag: str) -> dict[str, int]:
    """Job id -> the pid of the worker that logged ``start:<tag> <pid>``."""
    return {j: int(t.split()[1]) for j, t in cluster.log() if t.startswith(f"start:{tag} ")}


def test_a_timeout_and_a_known_cancel_are_enforced_while_every_table_is_locked(cluster):
    cluster.configure(cancel_grace=1)
    sleeper = async_task(f"{TASKS}.sleeper", 60, timeout=4, max_deliveries=1)
    stubborn = async_task(f"{TASKS}.stubborn", 60, max_deliveries=1)
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: len(started_in(cluster, "sleep")) == 1 and len(started_in(cluster, "stubborn")) == 1,
                       "both tasks started", alive=[qc])
    sleeper_worker = started_in(cluster, "sleep")[sleeper]

    assert cancel(stubborn)
    # The cluster knows of the cancellation (it asked the task to stop) before the stall begins;
    # the interruption after cancel_grace falls inside it.
    cluster.wait_until(lambda: f"job {stubborn} cancelled while running" in qc.output(),
                       "the sentinel to read the cancellation", alive=[qc])
    with every_table_locked():
        locked_at = time.monotonic()
        timed_out = wait_without_database(cluster, lambda: not is_alive(sleeper_worker), "the timed-out worker gone",
                                          timeout=STALL - 1)
        interrupted = wait_without_database(
            cluster, lambda: any(j == stubborn and t.startswith("interrupted:stubborn") for j, t in cluster.log()),
            "the cancelled task interrupted", timeout=max(0.0, STALL - 1 - (time.monotonic() - locked_at)))
        still_locked = time.monotonic() - locked_at < STALL
        time.sleep(max(0.0, STALL - (time.monotonic() - locked_at)))  # the stall lasts its whole length
    assert still_locked
    assert timed_out, f"the worker running the task past its timeout still ran during the stall\n{qc.output()}"
    assert interrupted, f"the cancelled task was not interrupted during the stall\n{cluster.log()}\n{qc.output()}"

    cluster.wait_final([sleeper, stubborn], alive=[qc])
    after = async_task(f"{TASKS}.stamped", "after")
    cluster.wait_final([after], alive=[qc])

    found = Job.objects.in_bulk([sleeper, stubborn, after])
    assert (found[sleeper].state, found[sleeper].deliveries) == ("DEAD", 1), found[sleeper].error
    assert "TaskTimeout" in found[sleeper].error
    assert found[stubborn].state == "CANCELLED", found[stubborn].error
    assert found[after].state == "SUCCEEDED"
    assert DeadLetter.objects.filter(job_id=sleeper).count() == 1  # recorded once
    starts = collections.Counter(j for j, t in cluster.log() if t.startswith("start:"))
    assert (starts[sleeper], starts[stubborn]) == (1, 1), starts  # nothing ran twice
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()


def test_a_scheduler_tick_importing_a_slow_module_does_not_delay_a_timeout(cluster):
    cluster.configure(scheduler_interval=1)
    sleeper = async_task(f"{TASKS}.sleeper", 60, timeout=2, max_deliveries=1)
    Schedule.objects.create(name="slow import", func="tests.cluster.slow_import.noop", repeats=1)
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: ("slow-import", "import:begin") in cluster.log() and started_in(cluster, "sleep"),
                       "the tick importing the slow module and the task started", alive=[qc])
    worker = started_in(cluster, "sleep")[sleeper]
    cluster.wait_until(lambda: not is_alive(worker), "the timed-out worker gone", alive=[qc])
    # The import takes 10 s (slow_import.IMPORT_SECONDS); the timeout was 2 s after the task started, around the
    # same time as the import began: the worker was killed while the tick still imported.
    assert ("slow-import", "import:end") not in cluster.log(), cluster.log()

    cluster.wait_final([sleeper], alive=[qc])
    assert Job.objects.get(pk=sleeper).state == "DEAD"
    cluster.wait_until(lambda: Job.objects.filter(func="tests.cluster.slow_import.noop", state="SUCCEEDED").exists(),
                       lambda: f"the scheduled job run; jobs {list(Job.objects.values_list('func', 'state', 'error'))}, "
                               f"schedules {list(Schedule.objects.values())}", timeout=60, alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
