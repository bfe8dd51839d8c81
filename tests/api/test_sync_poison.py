"""Sync mode's poison guard: ``run_sync`` never runs a job whose deliveries reached ``max_deliveries``.

Such a job comes from a crash loop (every delivery's lease ran out without an outcome, as when a
worker or a cluster is killed mid-task). Running it once more inline would run it past its cap;
it must not run, and it ends in the dead-letter queue (at the latest on the next claim, by the
broker's poison guard). A job with one delivery left still runs.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import async_task
from django_taskmq.api import run_sync
from django_taskmq.models import DeadLetter, Job, State
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db

SHORT = 0.01  # seconds of lease: each delivery of the crash loop runs out at once


def crash_loop(broker, job_id: str, deliveries: int) -> None:
    """Deliver ``job_id`` ``deliveries`` times with no outcome: each lease runs out and is reclaimed."""
    for _ in range(deliveries):
        (r,) = broker.reserve(["default"], 1, SHORT, "crashing-cluster")
        assert r.job_id == job_id
        time.sleep(SHORT * 3)
        assert broker.reclaim_expired() == 1


def test_sync_does_not_run_a_job_whose_deliveries_are_used_up(broker, run_log):
    """max_deliveries=2, delivered twice without an outcome: run_sync does not run it; it ends DEAD."""
    job_id = async_task("tests.tasks.record_run", "ran", max_deliveries=2)
    crash_loop(broker, job_id, 2)
    assert Job.objects.get(pk=job_id).deliveries == 2

    run_sync(job_id)

    assert read_run_log(run_log) == []
    j = Job.objects.get(pk=job_id)
    assert j.state not in (State.RUNNING, State.SUCCEEDED) and j.deliveries == 2
    # Not run by the next claim either: the poison guard buries it (if sync mode did not already).
    assert broker.reserve(["default"], 10, 300, "cluster") == []
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries) == (State.DEAD, 2)
    (letter,) = DeadLetter.objects.filter(job_id=job_id)
    assert "max deliveries" in letter.reason
    assert read_run_log(run_log) == []


def test_sync_runs_a_job_with_one_delivery_left(broker, run_log):
    """max_deliveries=2, delivered once without an outcome: its last delivery runs inline and succeeds."""
    job_id = async_task("tests.tasks.record_run", "ran", max_deliveries=2)
    crash_loop(broker, job_id, 1)

    run_sync(job_id)

    assert read_run_log(run_log) == [(job_id, "ran")]
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries) == (State.SUCCEEDED, 2)
    assert not DeadLetter.objects.exists()

