"""What holds for jobs holds for durable tasks, on real clusters: a concurrency key is held only
while a run runs (not while it sleeps), a paused queue starts no woken durable job, a woken job
takes its priority's turn, and a stop past ``stop_timeout`` gives the run back with its stored
steps kept (the next run goes on after them)."""

from __future__ import annotations

import signal

import pytest

from django_taskmq import async_task, pause_queue, resume_queue
from django_taskmq.models import Job, JobStep

from .conftest import job_states

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_durable"


def tags(cluster, job_id: str) -> list[str]:
    return [tag for j, tag in cluster.log() if j == job_id]


def asleep(job_id: str) -> bool:
    job = Job.objects.get(pk=job_id)
    return (job.state in ("SUSPENDED", "QUEUED") and job.lease_owner is None
            and JobStep.objects.filter(job_id=job_id, kind="sleep", done=False).exists())


def test_a_concurrency_key_is_held_while_a_run_runs_not_while_it_sleeps(cluster):
    limit = {"concurrency_key": "one-at-a-time", "concurrency_limit": 1}
    sleeper = async_task(f"{TASKS}.step_sleep_step", "sleeper", 8, **limit)
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: asleep(sleeper), "the first to sleep", alive=[qc])
    other = async_task(f"{TASKS}.step_sleep_step", "other", 0, **limit)  # same key, limit 1
    cluster.wait_final([other], alive=[qc])
    # The key was free while the sleeper slept: the other job ran and ended meanwhile.
    assert JobStep.objects.get(job_id=sleeper, kind="sleep").done is False
    assert tags(cluster, sleeper) == ["step:before sleeper"]
    cluster.wait_final([sleeper], alive=[qc])
    assert job_states([sleeper, other]) == {"SUCCEEDED": 2}
    assert tags(cluster, sleeper) == ["step:before sleeper", "step:after sleeper"]


def test_a_paused_queue_starts_no_woken_durable_job_until_it_resumes(cluster):
    job_id = async_task(f"{TASKS}.step_sleep_step", "paused", 1, queue="a")
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: asleep(job_id), "the task to sleep", alive=[qc])
    pause_queue("a")
    wake_at = JobStep.objects.get(job_id=job_id, kind="sleep").wake_at
    cluster.wait_until(lambda: _now() > wake_at + 3, "the wake time to be 3 s past", alive=[qc])
    other = async_task("tests.tasks.record_run", "other")  # the cluster works: the default queue runs
    cluster.wait_final([other], alive=[qc])
    assert tags(cluster, job_id) == ["step:before paused"]  # woken, not started: its queue is paused
    assert Job.objects.get(pk=job_id).state == "QUEUED"
    resume_queue("a")
    cluster.wait_final([job_id], alive=[qc])
    assert tags(cluster, job_id) == ["step:before paused", "step:after paused"]
    assert Job.objects.get(pk=job_id).state == "SUCCEEDED"


def _now() -> float:
    from django_taskmq.brokers import get_broker

    return get_broker().now()


def test_durable_jobs_that_wake_together_resume_in_priority_order(cluster):
    cluster.configure(prefetch=0)
    when = _now() + 5
    low = async_task(f"{TASKS}.sleeps_until", "low", when, priority=-5)
    high = async_task(f"{TASKS}.sleeps_until", "high", when, priority=5)
    qc = cluster.start("-w", "1")
    cluster.wait_final([low, high], alive=[qc])
    resumed = [tag for _, tag in cluster.log() if tag.startswith("step:after")]
    assert resumed == ["step:after high", "step:after low"]
    assert job_states([low, high]) == {"SUCCEEDED": 2}


def test_a_stop_past_stop_timeout_gives_the_run_back_and_the_next_run_keeps_its_stored_steps(cluster):
    cluster.configure(stop_timeout=2, lease=600)
    gate = cluster.gate("second")
    job_id = async_task(f"{TASKS}.gated_second_step", gate)
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: "start:second" in tags(cluster, job_id), "the second step to start", alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait(timeout=40) == 0, qc.output()
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.deliveries, job.lease_owner) == ("QUEUED", 0, None)  # given back uncounted
    assert "interrupted by shutdown" in job.error
    cluster.open(gate)
    second = cluster.start("-w", "1")
    cluster.wait_final([job_id], alive=[second])
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result) == ("SUCCEEDED", ["first", "second"]), job.error
    # The first step was stored before the stop: it did not run again; the second ran again.
    assert tags(cluster, job_id) == ["step:first", "start:second", "start:second", "step:second"]
