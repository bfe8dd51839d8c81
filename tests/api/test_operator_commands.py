"""``qinfo --json`` and ``qmonitor``: one frame for scripts (with the workflows by state), and the
live view driven in a pseudo-terminal (it draws, updates, and exits on ``q`` or Ctrl-C)."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_taskmq import Workflow, async_task
from django_taskmq.api import run_sync
from django_taskmq.models import Cluster
from django_taskmq.models import Workflow as WorkflowRecord
from tests.conftest import ROOT, db_env

ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>78])")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def heartbeat(name: str = "web", **fields) -> Cluster:
    defaults = dict(host="h1", pid=4242, state="running", workers=2, queues=["default", "emails"],
                    beat_at=timezone.now(), counts={"succeeded": 3, "failed": 1, "uptime": 12.0,
                                                    "tasks": [[1, "j" * 24, "emails", 2.5]],
                                                    "queues": {"emails": {"succeeded": 3, "failed": 1}}})
    return Cluster.objects.create(id=f"{name}:h1:4242:x", name=name, **{**defaults, **fields})


@pytest.mark.django_db
def test_qinfo_json_for_scripts(broker):
    async_task("tests.tasks.noop", queue="emails", priority=5)
    run_sync(async_task("tests.tasks.noop"))
    heartbeat()
    data = json.loads(run("qinfo", "--json"))
    (cluster,) = data["clusters"]
    assert (cluster["name"], cluster["host"], cluster["pid"], cluster["workers"]) == ("web", "h1", 4242, 2)
    assert cluster["tasks"] == [{"worker": 1, "job": "j" * 24, "queue": "emails", "task": "", "seconds": 2.5,
                                 "progress": None}]
    emails = next(q for q in data["queues"] if q["queue"] == "emails")
    assert (emails["ready"], emails["ready_by_priority"], emails["dead_letters"]) == (1, {"5": 1}, 0)
    assert data["throughput"]["succeeded_last_hour"] == 1
    assert {"queue": "emails", "priority": 5, "ready": 1, "delayed": 0, "reserved": 0, "dead": 0} in data["stats"]


@pytest.mark.django_db
def test_qinfo_counts_the_workflows_by_state_in_one_query(broker):
    for name in ("w0", "w1", "w2"):
        wf = Workflow(name=name)
        wf.add("tests.tasks.noop", name="b", after=[wf.add("tests.tasks.noop", name="a")])
        wf.enqueue()
    WorkflowRecord.objects.filter(name="w0").update(state="SUCCEEDED")
    WorkflowRecord.objects.filter(name="w1").update(state="FAILED")
    with CaptureQueriesContext(connection) as queries:
        data = json.loads(run("qinfo", "--json"))
    assert data["workflows"] == {"RUNNING": 1, "SUCCEEDED": 1, "FAILED": 1, "CANCELLED": 0}
    reads = [q["sql"] for q in queries if "django_taskmq_workflow" in q["sql"]]
    assert len(reads) == 1 and "GROUP BY" in reads[0].upper(), reads
    assert "workflows: running 1, succeeded 1, failed 1, cancelled 0" in run("qinfo")


@pytest.mark.django_db
def test_qinfo_text_skips_nested_counts(broker):
    heartbeat()
    out = run("qinfo")
    assert "clusters alive: 1" in out and "succeeded 3" in out and "tasks" not in out and "queues {" not in out


@pytest.mark.django_db
def test_qmonitor_once_prints_one_frame(broker):
    async_task("tests.tasks.noop", queue="emails", priority=5)
    heartbeat()
    out = run("qmonitor", "--once")
    for text in ("Clusters alive: 1", "h1:4242", "Running: 1", "j" * 24, "Queues", "emails", "5:1", "Throughput"):
        assert text in out, text
    assert "q or Ctrl-C" not in out  # no key hint in a one-shot frame


class Terminal:
    """``python -m django <args>`` in a pseudo-terminal of 160 x 60, on this test run's database."""

    def __init__(self, *args: str) -> None:
        env = {**db_env(), "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "60"}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its controlling terminal is the pty
            os.chdir(ROOT)
            os.execve(sys.executable, [sys.executable, "-m", "django", *args], env)
        fcntl_winsize(self.fd, 60, 160)
        self.screen = ""

    def read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                self.screen += ANSI.sub("", os.read(self.fd, 65536).decode(errors="replace"))
            except OSError:  # the child closed the pty
                pass

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.screen:
            if time.monotonic() > deadline:
                pytest.fail(f"{text!r} never appeared; the screen ends with:\n{self.screen[-3000:]}")
            self.read(0.2)

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def exit_status(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        self.kill()
        pytest.fail(f"the process did not exit within {timeout} s; the screen ends with:\n{self.screen[-2000:]}")

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def fcntl_winsize(fd: int, rows: int, cols: int) -> None:
    import fcntl

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


@pytest.fixture
def terminal():
    started: list[Terminal] = []

    def start(*args: str) -> Terminal:
        started.append(Terminal(*args))
        return started[-1]

    yield start
    for term in started:
        term.kill()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_qmonitor_draws_updates_and_exits_on_q(broker, terminal):
    async_task("tests.tasks.noop", queue="reports", priority=7)
    term = terminal("qmonitor")
    term.wait_for("Queues")
    term.wait_for("7:1")
    term.wait_for("q or Ctrl-C quits")
    # The database changes; the next frames show it.
    async_task("tests.tasks.noop", queue="reports", priority=7)
    heartbeat(name="pty-cluster")
    term.wait_for("7:2")
    term.wait_for("pty-cluster")
    term.send("q")
    assert term.exit_status() == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_qmonitor_exits_cleanly_on_ctrl_c(broker, terminal):
    term = terminal("qmonitor", "--interval", "0.5")
    term.wait_for("Queues")
    term.send("\x03")  # the terminal turns it into SIGINT
    assert term.exit_status() == 0
    assert "Traceback" not in term.screen
