"""``retry_jobs``: finished jobs that did not succeed go back to the queue under their own id."""

from __future__ import annotations

import time

import pytest

from django_taskmq import ConfigError, async_task
from django_taskmq.models import DeadLetter, Job, State

pytestmark = pytest.mark.django_db

LONG = 300


def finished(broker, how: str, queue: str = "a") -> str:
    """Return the id of a job of ``queue`` that ended ``how``: dead, failed, expired or cancelled."""
    job_id = async_task("tests.tasks.noop", queue=queue)
    if how == "cancelled":
        assert broker.cancel([job_id]) == 1
        return job_id
    (r,) = broker.reserve([queue], 1, LONG, "t")
    if how == "dead":
        broker.dead_letter(r, "gave up", error="it broke")
    elif how == "failed":
        broker.fail(r, "it failed")
    elif how == "expired":
        broker.defer(r)
        Job.objects.filter(pk=job_id).update(expires_at=time.time() - 1)
        assert broker.reserve([queue], 1, LONG, "t") == []
    assert Job.objects.get(pk=job_id).state == how.upper()
    return job_id


@pytest.mark.parametrize("how", ["dead", "failed", "expired", "cancelled"])
def test_retry_requeues_the_same_job_with_counters_reset(broker, how):
    job_id = finished(broker, how)
    attempts = Job.objects.get(pk=job_id).attempt
    assert broker.retry_jobs([job_id]) == 1
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.deliveries, job.yields, job.finished_at, job.attempt) == (State.QUEUED, 0, 0, None, attempts)
    assert job.expires_at is None or job.expires_at > time.time()
    (r,) = broker.reserve(["a"], 1, LONG, "t")
    assert r.job_id == job_id and r.deliveries == 1


def test_retry_into_another_queue_at_another_priority(broker):
    job_id = finished(broker, "failed")
    assert broker.retry_jobs([job_id], queue="b", priority=7) == 1
    job = Job.objects.get(pk=job_id)
    assert (job.queue, job.priority, job.state) == ("b", 7, State.QUEUED)


def test_retry_leaves_other_states_alone(broker):
    queued = async_task("tests.tasks.noop", queue="a")
    running = async_task("tests.tasks.noop", queue="b")
    broker.reserve(["b"], 1, LONG, "t")
    done = async_task("tests.tasks.noop", queue="emails")
    (r,) = broker.reserve(["emails"], 1, LONG, "t")
    broker.ack(r)
    assert broker.retry_jobs([queued, running, done, "no-such-job"]) == 0
    assert [Job.objects.get(pk=i).state for i in (queued, running, done)] == [
        State.QUEUED, State.RUNNING, State.SUCCEEDED]


def test_retry_of_a_dead_job_marks_its_letter_replayed(broker):
    job_id = finished(broker, "dead")
    assert broker.retry_jobs([job_id]) == 1
    letter = DeadLetter.objects.get(job_id=job_id)
    assert letter.replayed_at is not None and letter.replay_count == 1
    assert list(broker.dead_letters()) == []
    assert broker.replay_all() == 0


def test_retry_checks_queue_and_priority(broker):
    job_id = finished(broker, "failed")
    with pytest.raises(ConfigError):
        broker.retry_jobs([job_id], queue="nowhere")
    with pytest.raises(ConfigError):
        broker.retry_jobs([job_id], priority=10)
    assert Job.objects.get(pk=job_id).state == State.FAILED
