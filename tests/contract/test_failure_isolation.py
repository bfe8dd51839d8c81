"""One outcome that cannot be stored never undoes the others; dead letters keep the last error;
``attempt`` counts executions started and ``started_at`` is the last start.

The tests taking ``broker`` run on each broker (see conftest.py); the one where the database
itself refuses the text is the ORM broker's own."""

from __future__ import annotations

import time

import pytest

from django_taskmq.runtime import execution as ex
from django_taskmq.runtime import recorder
from django_taskmq.conf import get_settings
from django_taskmq.policy.states import JobState
from tests.contract.helpers import job, jobs, letters, put, put_many, run

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
    ids = put_many(broker, [(i,) for i in range(31)])
    reservations = reserve_all(broker, 31)
    bad = reservations[15]
    outcomes = [success(r, i) if r is not bad else failure(r, UNSTORABLE) for i, r in enumerate(reservations)]

    recorder.record(outcomes, broker, broker.settings)

    found = jobs(broker, ids)
    assert sum(j.state == JobState.SUCCEEDED for j in found.values()) == 30
    failed = found[bad.job_id]
    assert failed.state == JobState.RETRYING
    assert failed.error == "cannot open report-\\udcff.csv (NUL above)"
    assert "\\udcff" in failed.traceback


@pytest.mark.parametrize("status", [ex.FAILURE, ex.SUCCESS])
def test_an_outcome_that_still_cannot_be_stored_fails_only_its_own_job(broker, status):
    """When storing one outcome raises anyway (here: its start time is garbage), that job fails
    with a reason saying so and the other jobs of the batch are recorded."""
    ids = put_many(broker, [(i,) for i in range(10)])
    reservations = reserve_all(broker, 10)
    bad = reservations[4]
    outcomes = [success(r, i) for i, r in enumerate(reservations)]
    outcomes[4] = outcomes[4]._replace(status=status, started_at="not a time", error="x" if status == ex.FAILURE else "")

    recorder.record(outcomes, broker, broker.settings)

    found = jobs(broker, ids)
    assert sum(j.state == JobState.SUCCEEDED for j in found.values()) == 9
    assert found[bad.job_id].state == JobState.DEAD
    assert found[bad.job_id].error.startswith("outcome could not be stored: TypeError")
    assert [x.job_id for x in letters(broker)] == [bad.job_id]
    assert letters(broker)[0].error.startswith("outcome could not be stored")


def test_the_savepoint_holds_when_the_database_refuses_the_text(orm_broker, monkeypatch):
    """ORM only: with the cleaning switched off, the database itself refuses the text (NUL on
    PostgreSQL, a lone surrogate on SQLite): only that job fails, with a readable reason."""
    broker = orm_broker
    monkeypatch.setattr(recorder, "_storable", lambda o: o)
    ids = put_many(broker, [(i,) for i in range(5)])
    reservations = reserve_all(broker, 5)
    bad = reservations[2]
    outcomes = [success(r, i) if r is not bad else failure(r, UNSTORABLE) for i, r in enumerate(reservations)]

    recorder.record(outcomes, broker, broker.settings)

    found = jobs(broker, ids)
    assert sum(j.state == JobState.SUCCEEDED for j in found.values()) == 4
    assert found[bad.job_id].state == JobState.DEAD
    assert found[bad.job_id].error.startswith("outcome could not be stored:")


def test_long_error_and_traceback_are_truncated(broker):
    from django_taskmq.policy.storable import ERROR_LIMIT, TRACEBACK_LIMIT

    job_id = put(broker)
    (r,) = reserve_all(broker, 1)
    outcome = failure(r, "E" * 100_000)._replace(traceback="head " + "t" * 200_000 + " the raise")
    recorder.record([outcome], broker, broker.settings)
    job = jobs(broker, [job_id])[job_id]
    assert len(job.error) == ERROR_LIMIT and job.error.startswith("EEE")
    assert len(job.traceback) == TRACEBACK_LIMIT and job.traceback.endswith(" the raise")


def test_a_job_that_failed_five_times_counts_five_executions(broker):
    """attempt counts executions started, also on the delivery that dead-letters it; started_at is
    the last start; the dead letter carries the last error."""
    job_id = put(broker, "kaput", func="tests.tasks.fail", retry={"base": 0, "jitter": False})
    starts = []
    for _ in range(5):
        before = time.time()
        run(broker, job_id)
        starts.append(before)
    j = job(broker, job_id)
    assert (j.state, j.deliveries, j.attempt) == (JobState.DEAD, 5, 5)
    assert j.started_at.timestamp() >= starts[-1] - 0.01
    (letter,) = letters(broker)
    assert letter.job_id == job_id and "kaput" in letter.error


def test_a_crash_loop_dead_letter_carries_the_last_error(broker):
    """Leases that keep running out: the claim-time guard buries the job with its last error."""
    job_id = put(broker, max_deliveries=2)
    for _ in range(2):
        assert [r.job_id for r in broker.reserve(["default"], limit=1, lease=0.01, owner="t")] == [job_id]
        time.sleep(0.02)
        broker.reclaim_expired()
    assert broker.reserve(["default"], limit=1, lease=300, owner="t") == []
    (letter,) = letters(broker)
    assert "without an ack" in letter.reason
    assert letter.error == "lease expired" == job(broker, job_id).error
