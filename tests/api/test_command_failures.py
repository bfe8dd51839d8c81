"""The operator's commands speak, never trace back: before ``migrate``, with the database stopped
and piped into ``head -1``, each of ``qinfo``, ``qdead list``, ``qmonitor --once`` and ``qhealth``
prints one line naming the cause and the fix, and exits 1 (0 for a closed pipe: the reader has what
it wanted). Each runs as an operator runs it: ``python -m django ...`` in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_taskmq import enqueue_many
from django_taskmq.models import DeadLetter, Job, State
from tests.conftest import ROOT, db_env, unreachable_database_env

pytestmark = pytest.mark.django_db(transaction=True)

COMMANDS = [["qinfo"], ["qdead", "list"], ["qmonitor", "--once"], ["qhealth"], ["qinfo", "--json"]]


def manage(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "django", *args], cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=120)


def one_line(done: subprocess.CompletedProcess) -> str:
    """The one line a failed command printed (on stderr), with no traceback anywhere."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


@pytest.fixture
def unmigrated_env(tmp_path):
    """An environment whose "default" database answers and holds no table: a new SQLite file, or a
    new empty database on the server of this run."""
    if connection.vendor == "sqlite":
        import sqlite3

        path = tmp_path / "empty.sqlite3"
        sqlite3.connect(path).close()
        yield db_env({"TASKMQ_DB_NAME": str(path)})
        return
    name = f"taskmq_empty_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        yield db_env({"TASKMQ_DB_NAME": name})
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE {name}")


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_before_migrate_each_command_says_run_migrate(unmigrated_env, args):
    done = manage(args, unmigrated_env)
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_line(done)
    assert "answers but has no table django_taskmq_" in line and line.endswith("run manage.py migrate"), line


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_with_the_database_stopped_each_command_says_it_does_not_answer(args):
    done = manage(args, unreachable_database_env())
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_line(done)
    assert "the database 'default'" in line and "does not answer" in line, line
    assert "start it, or fix DATABASES['default']" in line, line


def piped(command: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``python -m django COMMAND | head -1`` in bash: the command's exit status, the line head
    printed, and what the command wrote on stderr."""
    with tempfile.TemporaryDirectory() as tmp:  # of its own: parallel test processes run this at once
        errors = Path(tmp, "stderr.txt")
        script = f"{sys.executable} -m django {command} 2>{errors} | head -1; echo \"status=${{PIPESTATUS[0]}}\""
        done = subprocess.run(["bash", "-c", script], cwd=str(ROOT), env=env, capture_output=True, text=True,
                              timeout=120)
        first, status = done.stdout.splitlines()[0], done.stdout.splitlines()[-1]
        stderr = errors.read_text()
    return int(status.removeprefix("status=")), first, stderr


@pytest.fixture
def many_dead_letters():
    """3,000 dead letters: ``qdead list`` writes far more than a pipe holds, so a reader that stops
    after one line closes the pipe under it."""
    ids = enqueue_many("tests.tasks.noop", [() for _ in range(3000)], queue="a")
    Job.objects.filter(pk__in=ids).update(state=State.DEAD, finished_at=timezone.now())
    DeadLetter.objects.bulk_create(DeadLetter(job_id=pk, queue="a", task_name="tests.tasks.noop",
                                              reason="max deliveries exceeded: failed " + "x" * 80) for pk in ids)
    return ids


@pytest.mark.parametrize("command", ["qdead list", "qinfo", "qmonitor --once"])
def test_piped_into_head_a_closed_pipe_ends_quietly(many_dead_letters, command):
    status, first, stderr = piped(command, db_env())
    assert status == 0 and "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert first.strip(), first
