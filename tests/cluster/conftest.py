"""Harness of the cluster suite: real ``manage.py qcluster`` subprocesses on the test database.

``cluster`` (fixture) is a :class:`Harness`:

* ``cluster.configure(lease=4, ...)`` changes ``TASKMQ`` keys here (pytest-django ``settings``)
  and in every qcluster started afterwards (``TASKMQ_OVERRIDES``, read by ``tests.settings_sqlite``);
* ``cluster.start("-w", "2")`` starts ``python manage.py qcluster ...`` in its own session and
  returns a :class:`QCluster` (pid, live children, signals, exit status, stderr);
* ``cluster.burst(...)`` runs ``qcluster --burst`` to its end and checks it exited 0;
* ``cluster.log()`` reads the run log (``TASKMQ_RUN_LOG``) as ``(job id, tag)`` pairs;
* ``cluster.gate(name)`` is a path that gated tasks wait for; ``cluster.open(gate)`` creates it.

Every wait polls the database (or the run log, or /proc) against a generous deadline and fails
with a message saying what was expected, what was seen, and the tail of each qcluster's stderr.
Nothing asserts on durations. Clusters still running at the end of a test are SIGKILLed as a
whole process group before the database is flushed.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, db_env
from tests.tasks import read_run_log

# Seconds any wait may take before the test fails: generous, the machine may be busy with other work.
DEADLINE = float(os.environ.get("TASKMQ_TEST_DEADLINE", "180"))


def live_children(pid: int) -> list[int]:
    """Return the pids of the live (not zombie) children of ``pid``, from /proc."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return sorted(found)


def is_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class QCluster:
    """One ``manage.py qcluster`` subprocess (the sentinel), leader of its own process group."""

    def __init__(self, args: list[str], env: dict[str, str], stderr_path: Path, prefix: Iterable[str] = ()) -> None:
        self.args = args
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        # ``prefix`` runs it through another command that execs it (``ip netns exec NAME``): same pid.
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "manage.py", "qcluster", *args], cwd=str(ROOT), env=env,
            stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.pid = self.proc.pid

    def children(self) -> list[int]:
        """Live child processes of the sentinel: pusher, monitor and the workers."""
        return live_children(self.pid)

    def tree(self) -> list[int]:
        """The sentinel and every live descendant."""
        pids, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            if is_alive(pid):
                pids.append(pid)
                todo.extend(live_children(pid))
        return pids

    def send(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self, tail: int = 4000) -> str:
        self._stderr.flush()
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-tail:]

    def wait(self, timeout: float = DEADLINE) -> int:
        """Wait for the sentinel to exit; return its exit status (fail the test past ``timeout``)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"qcluster {' '.join(self.args)} did not exit within {timeout} s:\n{self.output()}")

    def kill_all(self) -> None:
        """SIGKILL every process of the cluster at once (its process group) and reap the sentinel."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        # Children die with the sentinel (PR_SET_PDEATHSIG) and with the group; wait until /proc agrees.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(is_alive(p) for p in self._group()):
            time.sleep(0.05)

    def _group(self) -> list[int]:
        members = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[2]) == self.pid:  # process group id
                    members.append(int(entry.name))
        return members

    def close(self) -> None:
        if self.running() or self._group():
            self.kill_all()
        self._stderr.close()


class Harness:
    """Start clusters, change their settings, read the run log, wait on the database."""

    def __init__(self, settings, tmp_path: Path, run_log: Path) -> None:
        self.settings = settings
        self.tmp_path = tmp_path
        self.run_log = run_log
        self.overrides: dict[str, Any] = {}
        self.clusters: list[QCluster] = []

    # -- settings and processes --------------------------------------------------------------
    def configure(self, **overrides: Any) -> dict:
        """Change ``TASKMQ`` keys in this process and in every cluster started afterwards."""
        json.dumps(overrides)  # they travel as JSON
        self.overrides.update(overrides)
        self.settings.TASKMQ = {**self.settings.TASKMQ, **overrides}
        return self.settings.TASKMQ

    def start(self, *args: str, prefix: Iterable[str] = (), env: dict[str, str] | None = None) -> QCluster:
        """Start ``manage.py qcluster *args``; return it (it is killed at the end of the test).

        ``prefix``: a command that execs qcluster (``ip netns exec NAME``); ``env``: more variables.
        """
        env = db_env({"TASKMQ_OVERRIDES": json.dumps(self.overrides), "PYTHONUNBUFFERED": "1", **(env or {})})
        qc = QCluster(list(args), env, self.tmp_path / f"qcluster-{len(self.clusters)}.log", prefix)
        self.clusters.append(qc)
        return qc

    def burst(self, *args: str, timeout: float = DEADLINE) -> QCluster:
        """Run ``qcluster --burst *args`` until it exits; check it exited 0."""
        qc = self.start("--burst", *args)
        try:
            code = qc.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            qc.kill_all()
            pytest.fail(f"qcluster --burst {' '.join(args)} did not exit within {timeout} s; "
                        f"jobs by state: {dict(job_states())}\n{qc.output()}")
        assert code == 0, f"qcluster --burst {' '.join(args)} exited {code}:\n{qc.output()}"
        return qc

    def close(self) -> None:
        for qc in self.clusters:
            qc.close()

    def outputs(self) -> str:
        return "\n".join(f"--- qcluster {' '.join(qc.args)} (pid {qc.pid}) ---\n{qc.output()}" for qc in self.clusters)

    # -- files -------------------------------------------------------------------------------
    def log(self) -> list[tuple[str, str]]:
        """The run log as ``(job id, tag)`` pairs, in the order they were written."""
        return read_run_log(self.run_log)

    def gate(self, name: str) -> str:
        return str(self.tmp_path / f"gate-{name}")

    @staticmethod
    def open(gate: str) -> None:
        Path(gate).touch()

    # -- waiting -----------------------------------------------------------------------------
    def wait_until(self, predicate: Callable[[], Any], what: str | Callable[[], str],
                   timeout: float = DEADLINE, alive: Iterable[QCluster] = ()) -> Any:
        """Poll ``predicate`` until it returns something true; return that.

        Fails after ``timeout`` seconds, or as soon as a cluster in ``alive`` exits, saying ``what``
        was awaited (a string or a function describing the current state) and showing the
        clusters' output.
        """
        alive = list(alive)
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            dead = [qc for qc in alive if not qc.running()]
            if dead or time.monotonic() >= deadline:
                text = what() if callable(what) else what
                reason = (f"qcluster {dead[0].pid} exited with {dead[0].proc.returncode}" if dead
                          else f"not reached within {timeout} s")
                pytest.fail(f"waiting for {text}: {reason}\n{self.outputs()}")
            time.sleep(0.1)

    def wait_final(self, ids: list[str], timeout: float = DEADLINE, alive: Iterable[QCluster] = (),
                   states: tuple[str, ...] = ("SUCCEEDED", "FAILED", "DEAD", "EXPIRED", "CANCELLED")) -> None:
        """Wait until every job of ``ids`` is in one of ``states``."""
        def done() -> bool:
            now = job_states(ids)
            return now.keys() <= set(states) and sum(now.values()) == len(ids)

        self.wait_until(done, lambda: f"{len(ids)} jobs in {states}; now {dict(job_states(ids))}",
                        timeout=timeout, alive=alive)

    def wait_pool(self, qc: QCluster, workers: int, timeout: float = 60.0) -> list[int]:
        """Wait until the sentinel has ``workers`` + 3 live children (workers, pusher, monitor, scheduler
        process; a burst has no scheduler process: + 2)."""
        helpers = 2 if "--burst" in qc.args else 3
        return self.wait_until(lambda: len(qc.children()) == workers + helpers and qc.children(),
                               lambda: f"{workers} workers + pusher + monitor (+ scheduler); children now {qc.children()}",
                               timeout=timeout, alive=[qc])


def job_states(ids: list[str] | None = None) -> collections.Counter:
    """Count the jobs of ``ids`` (all jobs when None) by state."""
    from django_taskmq.models import Job

    if ids is None:
        return collections.Counter(Job.objects.values_list("state", flat=True))
    wanted = set(ids)
    return collections.Counter(s for pk, s in Job.objects.values_list("pk", "state") if pk in wanted)


def jobs(ids: list[str]) -> dict[str, Any]:
    """Return ``{id: Job}`` for ``ids`` (Django batches the query under the engine's limits)."""
    from django_taskmq.models import Job

    return Job.objects.in_bulk(list(ids))


@pytest.fixture
def cluster(transactional_db, settings, tmp_path, run_log) -> Harness:
    """A :class:`Harness` on a database that subprocesses see (transactional test database)."""
    from django_taskmq import brokers

    brokers._brokers.clear()
    harness = Harness(settings, tmp_path, run_log)
    yield harness
    harness.close()
    brokers._brokers.clear()


def engine_is_postgresql() -> bool:
    """True when this run's settings use PostgreSQL (no database access; usable in skipif)."""
    from django.conf import settings

    return settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


def engine_is_server() -> bool:
    """True when this run's database is a server that many hosts share (PostgreSQL, MySQL/MariaDB)."""
    from django.conf import settings

    return settings.DATABASES["default"]["ENGINE"].endswith(("postgresql", "mysql"))
