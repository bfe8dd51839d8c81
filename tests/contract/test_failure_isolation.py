"""One outcome that cannot be stored never undoes the others; dead letters keep the last error;
``attempt`` counts executions started and ``started_at`` is the last start."""

from __future__ import annotations

import time

import pytest

from django_taskmq import async_task, enqueue_many
from django_taskmq import execution as ex
from django_taskmq import recorder
from django_taskmq.api import run_sync
from django_taskmq.conf import get_settings
from django_taskmq.models import DeadLetter, Job, State

pytestmark = pytest.mark.django_db

UNSTORABLE = "cannot open report-\udcff.csv\x00 (NUL above)"


def reserve_all(broker, n):
    got = broker.reserve(["default"], limit=n, lease=300, owner="t")
    assert len(got) == n
    return got


def success(r, value):
    now = time.time()
    return ex.seal(ex.Outcome(r, None, ex.SUCCESS, value, started_at=now, finished_at=now), get_settings())


def failure(r, error, started_at=None):
    now = time.time()
    return ex.Outcome(r, None, ex.FAILURE, error=error, traceback=error, started_at=started_at or now, finished_at=now)


def test_unstorable_error_text_is_cleaned_and_its_neighbours_succeed(broker):
    """30 successes and one failure whose text holds NUL and a lone surrogate, in one batch."""
    ids = enqueue_many("tests.tasks.noop", [(i,) for i in range(31)])
    reservations = reserve_all(broker, 31)
    bad = reservations[15]
    outcomes = [success(r, i) if r is not bad else failure(r, UNSTORABLE) for i, r in enumerate(reservations)]

    recorder.record(outcomes, broker, get_settings())

    jobs = Job.objects.in_bulk(ids)
    assert sum(j.state == State.SUCCEEDED for j in jobs.values()) == 30
    failed = jobs[bad.job_id]
    assert failed.state == State.RETRYING
    assert failed.error == "cannot open report-\\udcff.csv (NUL above)"
    assert "\\udcff" in failed.traceback


@pytest.mark.parametrize("status", [ex.FAILURE, ex.SUCCESS])
def test_an_outcome_that_still_cannot_be_stored_fails_only_its_own_job(broker, status):
    """When storing one outcome raises anyway (here: its start time is garbage), that job fails
    with a reason saying so and the other jobs of the batch are recorded."""
    ids = enqueue_many("tests.tasks.noop", [(i,) for i in range(10)])
    reservations = reserve_all(broker, 10)
    bad = reservations[4]
    outcomes = [success(r, i) for i, r in enumerate(reservations)]
    outcomes[4] = outcomes[4]._replace(status=status, started_at="not a time", error="x" if status == ex.FAILURE else "")

    recorder.record(outcomes, broker, get_settings())

    jobs = Job.objects.in_bulk(ids)
    assert sum(j.state == State.SUCCEEDED for j in jobs.values()) == 9
    assert jobs[bad.job_id].state == State.DEAD
    assert jobs[bad.job_id].error.startswith("outcome could not be stored: TypeError")
    assert DeadLetter.objects.get(job_id=bad.job_id).error.startswith("outcome could not be stored")


def test_the_savepoint_holds_when_the_database_refuses_the_text(broker, monkeypatch):
    """With the cleaning switched off, the database itself refuses the text (NUL on PostgreSQL, a
    lone surrogate on SQLite): only that job fails, with a readable reason."""
    monkeypatch.setattr(recorder, "_storable", lambda o: o)
    ids = enqueue_many("tests.tasks.noop", [(i,) for i in range(5)])
    reservations = reserve_all(broker, 5)
    bad = reservations[2]
    outcomes = [success(r, i) if r is not bad else failure(r, UNSTORABLE) for i, r in enumerate(reservations)]

    recorder.record(outcomes, broker, get_settings())

    jobs = Job.objects.in_bulk(ids)
    assert sum(j.state == State.SUCCEEDED for j in jobs.values()) == 4
    assert jobs[bad.job_id].state == State.DEAD
    assert jobs[bad.job_id].error.startswith("outcome could not be stored:")


def test_long_error_and_traceback_are_truncated(broker):
    from django_taskmq.policy.storable import ERROR_LIMIT, TRACEBACK_LIMIT

    (job_id,) = enqueue_many("tests.tasks.noop", [()])
    (r,) = reserve_all(broker, 1)
    outcome = failure(r, "E" * 100_000)._replace(traceback="head " + "t" * 200_000 + " the raise")
    recorder.record([outcome], broker, get_settings())
    job = Job.objects.get(pk=job_id)
    assert len(job.error) == ERROR_LIMIT and job.error.startswith("EEE")
    assert len(job.traceback) == TRACEBACK_LIMIT and job.traceback.endswith(" the raise")


def test_a_job_that_failed_five_times_counts_five_executions(broker):
    """attempt counts executions started, also on the delivery that dead-letters it; started_at is
    the last start; the dead letter carries the last error."""
    job_id = async_task("tests.tasks.fail", "kaput", retry={"base": 0, "jitter": False})
    starts = []
    for _ in range(5):
        before = time.time()
        run_sync(job_id)
        starts.append(before)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.deliveries, job.attempt) == (State.DEAD, 5, 5)
    assert job.started_at.timestamp() >= starts[-1] - 0.01
    assert "kaput" in DeadLetter.objects.get(job_id=job_id).error


def test_a_crash_loop_dead_letter_carries_the_last_error(broker):
    """Leases that keep running out: the claim-time guard buries the job with its last error."""
    job_id = async_task("tests.tasks.noop", max_deliveries=2)
    for _ in range(2):
        (r,) = broker.reserve(["default"], limit=1, lease=0.01, owner="t")
        time.sleep(0.02)
        broker.reclaim_expired()
    assert broker.reserve(["default"], limit=1, lease=300, owner="t") == []
    letter = DeadLetter.objects.get(job_id=job_id)
    assert "without an ack" in letter.reason
    assert letter.error == "lease expired" == Job.objects.get(pk=job_id).error
