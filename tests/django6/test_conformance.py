"""Conformance: ordinary Django tasks (sync and async, with and without context, the edge
priorities, ``run_after``, several queues), enqueued through Django's API, run by a real
``qcluster --burst``; every ``TaskResult`` field and signal is checked. Runs on Django 6.x
(``django.tasks``) and on Django 5.2 with the ``django-tasks`` backport.

Behavioural cases ported (here and in ``test_tasks_backend.py``) from Django's ``tests/tasks/`` and
django-tasks-db's suite: enqueue returns a READY result with the args; get_result/refresh/arefresh,
aenqueue/aget_result; unknown ids raise TaskResultDoesNotExist; return_value raises until
SUCCESSFUL and after FAILED; errors hold one entry per failed execution, oldest first, with its
exception class path and traceback; started_at is the first execution's start and last_attempted_at
the latest's (django-tasks-db's per-attempt history); priority range
and whole numbers, queue_name validation, takes_context needs a ``context`` first argument;
context.attempt and context.task_result; async tasks with and without context; run_after in the
past runs and in the future waits; a higher priority runs first; enqueued/started/finished signals
with the result's status at each point; worker_ids and timestamps after a run.

Cases that do not apply to a worker-based backend, and why:

* ImmediateBackend's "runs during enqueue" and DummyBackend's in-memory ``results`` list, ``clear()``
  and "nothing runs" cases: test backends of Django's, not behaviour of a task queue.
* Results normalised to JSON (return values and args that JSON cannot hold refused or converted):
  our results are pickled and signed, so any picklable value round-trips.
* django-tasks-db's ``db_worker`` options (``--batch``, ``--interval``, ``--max-tasks``,
  ``--startup-delay``, ``--worker-id``), ``prune_db_task_results`` and its admin: ``qcluster``,
  ``save_limit`` and our admin replace them and have their own suites (tests/cluster, tests/api).
* django-tasks-db's "a failed task is never retried" and single-error cases: our retry policy
  applies (set ``max_deliveries: 1`` to match; tested in test_tasks_backend.py).
* Backends other than the task's own (``using(backend=...)`` onto Dummy/Immediate) and
  ``InvalidTaskBackend`` settings errors: Django's handler, not the backend, owns them.
* Database-specific locking tests (``select_for_update(skip_locked)``): the broker contract suite
  (tests/contract) covers our claim.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pytest
from django.utils import timezone

from tests.conftest import ROOT, db_env
from tests.django6.djtasks import TaskResultStatus

from django_taskmq.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster]

SUCCESSFUL, FAILED, READY = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED, TaskResultStatus.READY


def burst(tmp_path, **overrides) -> list[dict]:
    """Run ``qcluster --burst`` to its end; return the signals it sent (JSON lines)."""
    log = tmp_path / "signals.log"
    env = db_env({"TASKMQ_SIGNAL_LOG": str(log), "TASKMQ_OVERRIDES": json.dumps(overrides)})
    proc = subprocess.run([sys.executable, "-m", "django", "qcluster", "--burst"], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_every_kind_of_task_runs_on_the_cluster_with_every_field_and_signal(tmp_path):
    from tests.django6 import tasks_django as t

    before = timezone.now()
    results = {
        "sync": t.multiply.enqueue(6, 7),
        "async": t.async_add.enqueue(2, 3),
        "context": t.with_context.enqueue("x"),
        "async_context": t.async_with_context.enqueue(),
        "emails": t.on_emails.enqueue("mail"),
        "queue_a": t.echo.using(queue_name="a").enqueue("a"),
        "past": t.echo.using(run_after=timezone.now() - datetime.timedelta(seconds=5)).enqueue("past"),
        "future": t.echo.using(run_after=timezone.now() + datetime.timedelta(hours=1)).enqueue("future"),
        "fails": t.explode.enqueue(),
        "async_fails": t.async_explode.enqueue(),
        "retried": t.fails_first.enqueue(),
        "twice": t.fails_twice.enqueue(),
    }
    signals = burst(tmp_path)
    for r in results.values():
        r.refresh()
    values = {name: r.return_value for name, r in results.items() if r.status == SUCCESSFUL}
    assert values == {"sync": 42, "async": 5, "async_context": 1, "emails": "mail", "queue_a": "a", "past": "past",
                      "retried": 2, "twice": 3,
                      "context": {"attempt": 1, "id": results["context"].id, "status": "RUNNING", "attempts": 1,
                                  "value": "x", "started": True}}
    for name in ("fails", "async_fails"):  # max_deliveries (5) executions, then dead: FAILED
        r = results[name]
        assert r.status == FAILED, name
        assert r.attempts == 5 and len(r.worker_ids) == 5
        assert len(r.errors) == 5  # one TaskError per failed execution
        assert {e.exception_class for e in r.errors} == {ValueError if name == "fails" else RuntimeError}
        assert r.finished_at is not None
        with pytest.raises(ValueError):
            r.return_value
    assert results["fails"].errors[-1].exception_class_path == "builtins.ValueError"
    assert "django task failed" in results["fails"].errors[-1].traceback
    future = results["future"]
    assert (future.status, future.started_at, future.attempts, future.errors) == (READY, None, 0, [])
    for name, r in results.items():
        assert r.enqueued_at >= before
        if r.status == SUCCESSFUL:
            assert r.enqueued_at <= r.started_at <= r.last_attempted_at <= r.finished_at, name
            assert r.worker_ids and all(r.worker_ids) and r.is_finished, name
            assert len(r.errors) == r.attempts - 1, name  # every execution but the last failed
        if r.status == FAILED:
            assert len(r.errors) == r.attempts, name
        if r.attempts == 1:
            assert r.last_attempted_at == r.started_at, name
        elif r.attempts > 1:  # started_at is the first execution's start, last_attempted_at the latest's
            assert r.started_at < r.last_attempted_at, name
    assert results["retried"].attempts == 2
    assert [e.exception_class_path for e in results["retried"].errors] == ["builtins.KeyError"]
    twice = results["twice"]
    assert twice.attempts == 3
    assert [e.exception_class_path for e in twice.errors] == ["builtins.KeyError",
                                                             "tests.django6.tasks_django.Flaky"]
    assert "first attempt" in twice.errors[0].traceback and "second attempt" in twice.errors[1].traceback
    assert "second attempt" not in twice.errors[0].traceback
    # The history says when each failed execution started: the first is the result's started_at.
    log = Job.objects.get(pk=twice.id).attempt_log
    assert [e["attempt"] for e in log["attempts"]] == [1, 2] and log["dropped"] == 0
    starts = [datetime.datetime.fromisoformat(e["started_at"]) for e in log["attempts"]]
    assert starts[0] == twice.started_at < starts[1] < twice.last_attempted_at
    assert results["emails"].task.queue_name == "emails" and results["queue_a"].task.queue_name == "a"

    # task_started in a worker for every execution; task_finished once per finished task, where the
    # outcome is recorded: the monitor, or for a plain success an idle worker that recorded it
    # itself; never in this process. Failures are always the monitor's.
    started = [s for s in signals if s["event"] == "started"]
    finished = {s["id"]: s for s in signals if s["event"] == "finished"}
    assert {s["id"] for s in started} == {r.id for n, r in results.items() if n != "future"}
    assert all(s["status"] == "RUNNING" for s in started)
    assert len([s for s in started if s["id"] == results["fails"].id]) == 5
    assert set(finished) == {r.id for r in results.values() if r.is_finished}
    assert all(s["status"] == str(results_by_id(results)[i].status) for i, s in finished.items())
    pids = {s["pid"] for s in signals}
    assert os.getpid() not in pids
    worker_pids = {s["pid"] for s in started}
    assert all(finished[results[name].id]["pid"] not in worker_pids for name in ("fails", "async_fails"))


def results_by_id(results):
    return {r.id: r for r in results.values()}


def test_a_higher_django_priority_never_runs_after_a_lower_one(tmp_path):
    from tests.django6 import tasks_django as t

    order = [-100, -1, 0, 1, 100]
    ids = {p: t.echo.using(priority=p).enqueue(p).id for p in order}
    burst(tmp_path, workers=1)
    started = {p: Job.objects.get(pk=i).started_at for p, i in ids.items()}
    assert sorted(order, key=lambda p: started[p]) == sorted(order, reverse=True)
    for p, i in ids.items():
        assert t.echo.get_result(i).task.priority == p
