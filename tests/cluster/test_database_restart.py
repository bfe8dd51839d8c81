"""A PostgreSQL restart under a running cluster loses no job (real server restart, PostgreSQL only).

The server this run uses is restarted with its own control command: Debian's ``pg_ctlcluster``
when it manages that server, else ``pg_ctl`` on the data directory the server reports (run as the
directory's owner when the tests run as root). When neither can restart it (a server on another
machine, no rights, no command) the test is skipped with the reason, or fails with it when CI is
"true".
"""

from __future__ import annotations

import collections
import glob
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest
from django.db import DatabaseError, connections

from django_taskmq import enqueue_many

from .conftest import engine_is_postgresql, job_states

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not engine_is_postgresql(), reason="restarts the PostgreSQL server"),
]

RESTART_TIMEOUT = 120  # seconds


def cannot_restart(reason: str) -> NoReturn:
    """Skip the test with ``reason``; fail it instead when CI is "true"."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"cannot restart PostgreSQL, and CI is set: {reason}")
    pytest.skip(f"cannot restart PostgreSQL: {reason}")


def server_setting(name: str) -> str:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute(f"SHOW {name}")
            return cursor.fetchone()[0]
    except DatabaseError as exc:
        cannot_restart(f"SHOW {name} failed: {exc}".strip())


def restart_command() -> list[str]:
    """Return the command that restarts the server of connection "default" (or skip/fail with why not)."""
    data_dir = os.path.realpath(server_setting("data_directory"))
    port = server_setting("port")
    try:
        pid_file = Path(data_dir, "postmaster.pid").read_text().splitlines()
        owner_uid = os.stat(data_dir).st_uid
    except OSError as exc:
        cannot_restart(f"its data directory {data_dir} is not readable on this machine ({exc})")
    if len(pid_file) < 4 or pid_file[3].strip() != port:
        cannot_restart(f"the server running from {data_dir} on this machine does not listen on port {port}")
    owner = pwd.getpwuid(owner_uid).pw_name
    if os.geteuid() not in (0, owner_uid):
        cannot_restart(f"this user (uid {os.geteuid()}) is neither root nor {owner}, the owner of {data_dir}")

    if shutil.which("pg_ctlcluster") and shutil.which("pg_lsclusters"):  # Debian, Ubuntu
        listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True, timeout=30)
        for line in listing.stdout.splitlines():
            fields = line.split()  # version, cluster, port, status, owner, data directory, log file
            if len(fields) >= 6 and os.path.realpath(fields[5]) == data_dir:
                return ["pg_ctlcluster", "--skip-systemctl-redirect", fields[0], fields[1], "restart"]

    major = int(server_setting("server_version_num")) // 10000
    found = [shutil.which("pg_ctl"), *sorted(glob.glob(f"/usr/lib/postgresql/{major}/bin/pg_ctl")),
             *sorted(glob.glob(f"/usr/pgsql-{major}/bin/pg_ctl"))]
    pg_ctl = next((path for path in found if path), None)
    if pg_ctl is None:
        cannot_restart("neither pg_ctlcluster nor pg_ctl is installed")
    # pg_ctl starts the server with the options it was started with (postmaster.opts). Its output
    # goes to a log file: a server started with an inherited pipe would keep that pipe open.
    fd, log = tempfile.mkstemp(prefix="taskmq-postgresql-restart-", suffix=".log")
    os.close(fd)
    if os.geteuid() == 0:
        os.chown(log, owner_uid, -1)
    command = [pg_ctl, "restart", "-D", data_dir, "-m", "fast", "-w", "-t", str(RESTART_TIMEOUT), "-l", log]
    if os.geteuid() == 0 and owner_uid != 0:  # pg_ctl refuses to run as root
        return ["su", owner, "-s", "/bin/sh", "-c", shlex.join(command)]
    return command


def restart_postgresql(command: list[str]) -> None:
    """Run ``command``; fail the test with its output when it does not restart the server."""
    with tempfile.TemporaryFile() as output:  # a file, not a pipe: the new server may inherit it
        try:
            code = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                  timeout=RESTART_TIMEOUT + 30).returncode
        except subprocess.TimeoutExpired:
            code = "a timeout"
        output.seek(0)
        if code != 0:
            pytest.fail(f"{shlex.join(command)} exited with {code}:\n{output.read().decode(errors='replace')}")


def test_every_job_succeeds_across_a_postgresql_restart(cluster):
    """Jobs queued before and during a server restart all end SUCCEEDED; the cluster survives it."""
    restart = restart_command()
    cluster.configure(lease=5)
    ids = enqueue_many("tests.cluster.tasks_cluster.sleeper", [(0.005,)] * 600)
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= 50, "some jobs to succeed", alive=[qc])

    restart_postgresql(restart)
    for conn in connections.all():
        conn.close()  # this test's own connection died with the server too

    later = enqueue_many("tests.cluster.tasks_cluster.sleeper", [(0.005,)] * 100)
    cluster.wait_final(ids + later, alive=[qc])
    assert job_states(ids + later) == {"SUCCEEDED": 700}
    assert qc.running(), "the cluster must survive the restart"


def test_a_restart_mid_burst_runs_every_job_once(cluster):
    """A server restart (every session ended with 57P01, then connections refused, then 57P03 while
    it starts) in the middle of a burst: the burst ends normally, every job ran once (its runs are
    counted in the run log) and ended SUCCEEDED once. The lease (30 s) outlasts the restart, so no
    job is taken over by its own cluster's sweep."""
    restart = restart_command()
    ids = enqueue_many("tests.cluster.tasks_cluster.slow", [("burst", 0.002)] * 900)
    qc = cluster.start("--burst", "-w", "2")
    cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= 100, "some jobs to succeed", alive=[qc])

    restart_postgresql(restart)
    for conn in connections.all():
        conn.close()

    assert qc.wait() == 0, qc.output(tail=10**7)
    output = qc.output(tail=10**7)
    assert job_states(ids) == {"SUCCEEDED": 900}, output
    runs = collections.Counter(job_id for job_id, event in cluster.log() if event.startswith("start:burst "))
    assert set(runs) == set(ids)
    assert set(runs.values()) == {1}, {job_id: n for job_id, n in runs.items() if n != 1}
    assert ": reconnecting" in output, output
    assert "Traceback" not in output
