"""``retry_jobs``: finished jobs that did not succeed go back to the queue under their own id.

Every test runs on each broker (``broker`` is parametrised, see conftest.py).
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import ConfigError
from django_taskmq.policy.states import JobState
from tests.contract.helpers import ack, job, letters, put

LONG = 300
SHORT = 0.2


def finished(broker, how: str, queue: str = "a") -> str:
    """Return the id of a job of ``queue`` that ended ``how``: dead, failed, expired or cancelled."""
    if how == "cancelled":
        job_id = put(broker, queue=queue)
        assert broker.cancel([job_id]) == 1
    elif how == "expired":  # it expires while it waits after a give-back
        job_id = put(broker, queue=queue, expires_at=time.time() + SHORT)
        (r,) = broker.reserve([queue], 1, LONG, "t")
        broker.defer(r)
        time.sleep(SHORT + 0.1)
        assert broker.reserve([queue], 1, LONG, "t") == []
    else:
        job_id = put(broker, queue=queue)
        (r,) = broker.reserve([queue], 1, LONG, "t")
        if how == "dead":
            broker.dead_letter(r, "gave up", error="it broke")
        else:
            broker.fail(r, "it failed")
    assert job(broker, job_id).state == how.upper()
    return job_id


@pytest.mark.parametrize("how", ["dead", "failed", "expired", "cancelled"])
def test_retry_requeues_the_same_job_with_counters_reset(broker, how):
    job_id = finished(broker, how)
    attempts = job(broker, job_id).attempt
    assert broker.retry_jobs([job_id]) == 1
    j = job(broker, job_id)
    assert (j.state, j.deliveries, j.yields, j.finished_at, j.attempt) == (JobState.QUEUED, 0, 0, None, attempts)
    assert j.expires_at is None or j.expires_at > time.time()  # an expiry already past is cleared
    (r,) = broker.reserve(["a"], 1, LONG, "t")
    assert r.job_id == job_id and r.deliveries == 1


def test_retry_keeps_the_last_error(broker):
    job_id = finished(broker, "failed")
    broker.retry_jobs([job_id])
    assert job(broker, job_id).error == "it failed"


def test_retry_into_another_queue_at_another_priority(broker):
    job_id = finished(broker, "failed")
    assert broker.retry_jobs([job_id], queue="b", priority=7) == 1
    j = job(broker, job_id)
    assert (j.queue, j.priority, j.state) == ("b", 7, JobState.QUEUED)


def test_retry_leaves_other_states_alone(broker):
    queued = put(broker, queue="a")
    running = put(broker, queue="b")
    broker.reserve(["b"], 1, LONG, "t")
    done = put(broker, queue="emails")
    (r,) = broker.reserve(["emails"], 1, LONG, "t")
    ack(broker, r)
    assert broker.retry_jobs([queued, running, done, "no-such-job"]) == 0
    assert [job(broker, i).state for i in (queued, running, done)] == [
        JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED]


def test_retry_of_a_dead_job_marks_its_letter_replayed(broker):
    job_id = finished(broker, "dead")
    (letter,) = letters(broker)
    assert broker.retry_jobs([job_id]) == 1
    assert letters(broker) == []
    assert broker.replay_all() == 0
    with pytest.raises(ConfigError, match="already replayed"):
        broker.replay_dead(letter.pk)


def test_retry_checks_queue_and_priority(broker):
    job_id = finished(broker, "failed")
    with pytest.raises(ConfigError):
        broker.retry_jobs([job_id], queue="nowhere")
    with pytest.raises(ConfigError):
        broker.retry_jobs([job_id], priority=10)
    assert job(broker, job_id).state == JobState.FAILED
