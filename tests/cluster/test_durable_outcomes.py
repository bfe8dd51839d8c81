"""``TASKMQ['durable_outcomes'] = False`` across a real crash of PostgreSQL (PostgreSQL only).

The cluster's commits do not wait for the WAL flush, so a database crash (``-m immediate``: no
shutdown checkpoint, what was not written out is gone) can lose the last outcomes it recorded.
What it must not lose: a job (the enqueue waits for the flush), or its exactly-once record. A job
whose outcome was lost is RUNNING again after the crash (or QUEUED, its claim lost too): its lease
runs out and it runs again. The server is restarted as in test_database_restart.py (skipped, or
failed when CI is "true", where it cannot be).
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import subprocess
import tempfile
import time

import pytest
from django.db import DatabaseError, connections

from django_taskmq import enqueue_many
from django_taskmq.models import Job

from .conftest import engine_is_postgresql, job_states
from .test_database_restart import RESTART_TIMEOUT, cannot_restart, restart_command

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not engine_is_postgresql(), reason="crashes the PostgreSQL server"),
]

JOBS = 2000
# Seconds the WAL writer is held before the crash: commits that need not wait for the flush pile up
# unwritten in the server's memory meanwhile (what makes losing some nearly certain, not certain).
HOLD_WAL_WRITER = 0.5


def crash_command() -> list[str]:
    """The restart command of the server, in immediate mode: its processes quit at once, without
    writing out what they hold (a crash, as far as the database's files can tell)."""
    command = restart_command()
    if command[0] == "pg_ctlcluster":
        return [command[0], "--mode", "immediate", *command[1:]]
    crash = [part.replace("-m fast", "-m immediate") for part in command]  # "su ... -c 'pg_ctl ...'"
    if "fast" in crash:
        crash[crash.index("fast")] = "immediate"
    if crash == command:
        cannot_restart(f"no fast mode to make immediate in {command}")
    return crash


def wal_writer() -> int | None:
    """The pid of the server's WAL writer (None: not found)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'")
        row = cursor.fetchone()
    return row[0] if row is not None else None


def crash_watching(command: list[str], ids: list[str]) -> set[str]:
    """Hold the server's WAL writer (SIGSTOP) for :data:`HOLD_WAL_WRITER` s, then run ``command``
    (the crash and the start); meanwhile read which of ``ids`` have SUCCEEDED again and again, until
    the server is gone. Return the last such set: committed (and visible) just before the crash,
    not necessarily flushed.

    Without the hold, a commit that does not wait is written out within ``wal_writer_delay`` and only
    the last few are lost. Once this test's session is ended by the crash, the WAL writer has been
    told to quit too: let go, it quits before writing anything (it would be killed 5 s later anyway).
    """
    writer = wal_writer()
    try:
        if writer is not None:
            os.kill(writer, signal.SIGSTOP)
            time.sleep(HOLD_WAL_WRITER)
        seen = succeeded(ids)
        with tempfile.TemporaryFile() as output:  # a file, not a pipe: the new server may inherit it
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
            try:
                while proc.poll() is None:
                    try:
                        seen = succeeded(ids)
                    except DatabaseError:
                        break
                if writer is not None:
                    os.kill(writer, signal.SIGCONT)
                code = proc.wait(timeout=RESTART_TIMEOUT + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = "a timeout"
            output.seek(0)
            if code != 0:
                pytest.fail(f"{shlex.join(command)} exited with {code}:\n{output.read().decode(errors='replace')}")
    finally:
        if writer is not None:
            try:
                os.kill(writer, signal.SIGCONT)  # never leave a server's WAL writer stopped
            except ProcessLookupError:
                pass
    for conn in connections.all():
        conn.close()  # this test's own connection died with the server too
    return seen


def succeeded(ids: list[str]) -> set[str]:
    wanted = set(ids)
    return {pk for pk, state in Job.objects.values_list("pk", "state") if pk in wanted and state == "SUCCEEDED"}


@pytest.mark.parametrize("durable", [False, True], ids=["durable_outcomes=False", "durable_outcomes=True"])
def test_a_database_crash_loses_outcomes_not_jobs(cluster, durable):
    """A burst, the server crashed in its middle: every job still ends SUCCEEDED, recorded once
    (one execution on its row), and ran at least once; those whose recorded success the crash
    lost ran again. With the default (True) the crash loses no success that was visible before it."""
    crash = crash_command()
    cluster.configure(durable_outcomes=durable, lease=5)
    qc = cluster.start("-w", "2")
    cluster.wait_pool(qc, 2)
    ids = enqueue_many("tests.cluster.tasks_cluster.slow", [("crash", 0.001)] * JOBS)
    cluster.wait_until(lambda: len(succeeded(ids)) >= JOBS // 4, "a quarter of the jobs to succeed", alive=[qc])

    seen = crash_watching(crash, ids)
    # Those whose success was visible before the crash and is not after it: the crash lost them.
    # (A lower bound: the cluster may record some again before this read.)
    lost = seen - succeeded(ids)
    if durable:  # a durable commit is visible only once flushed
        assert lost == set()

    cluster.wait_final(ids, alive=[qc])
    assert job_states(ids) == {"SUCCEEDED": JOBS}, cluster.outputs()
    # Recorded once: a run whose outcome was lost left nothing on the row, the one recorded counts.
    attempts = collections.Counter(Job.objects.filter(pk__in=ids).values_list("attempt", flat=True))
    assert attempts == {1: JOBS}, attempts
    runs = collections.Counter(job_id for job_id, event in cluster.log() if event.startswith("start:crash "))
    assert set(runs) == set(ids)  # every job ran, none that was not enqueued
    assert all(runs[job_id] >= 2 for job_id in lost), {job_id: runs[job_id] for job_id in lost}
    assert qc.running(), "the cluster must survive the crash"
    print(f"durable_outcomes {durable}: successes lost by the crash (seen before, gone after) {len(lost)}; "
          f"jobs that ran more than once {sum(1 for n in runs.values() if n > 1)}")
