"""Durable tasks on real clusters: steps run once across a SIGKILL, sleeps and waits hold no worker,
signals come from a view, a cancel ends a waiting job at once."""

from __future__ import annotations

import datetime

import pytest

from django_taskmq import Batch, async_task, batch, cancel, enqueue_many, send_signal
from django_taskmq.models import Job, JobStep

from .conftest import job_states, jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_durable"


def tags(cluster, job_id: str) -> list[str]:
    return [tag.split()[0] for j, tag in cluster.log() if j == job_id]


def suspended(job_id: str, kind: str) -> bool:
    """True once the job sleeps or waits: given back (no lease; SUSPENDED, or QUEUED for later when
    it wakes within seconds) with its sleep or wait stored."""
    job = Job.objects.get(pk=job_id)
    return (job.state in ("SUSPENDED", "QUEUED") and job.lease_owner is None
            and JobStep.objects.filter(job_id=job_id, kind=kind, done=False).exists())


def test_three_steps_run_once_each_across_a_sigkill_of_the_worker_in_the_second(cluster, tmp_path):
    job_id = async_task(f"{TASKS}.three_steps", 1, str(tmp_path / "killed-once"))
    qc = cluster.start("-w", "2")
    cluster.wait_final([job_id], alive=[qc])

    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result) == ("SUCCEEDED", [2, 20, 25]), (job.state, job.error)
    # The second step started twice (killed the first time) and finished once; the others ran once.
    assert tags(cluster, job_id) == ["step:one", "start:two", "start:two", "step:two", "step:three"]
    assert job.deliveries == 2
    assert list(JobStep.objects.filter(job_id=job_id).values_list("name", flat=True)) == ["one", "two", "three"]


def test_a_sleep_gives_the_only_worker_to_other_work_and_resumes_after_it(cluster):
    sleeper = async_task(f"{TASKS}.sleeper", 5)
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: suspended(sleeper, "sleep"), "the sleeper to sleep", alive=[qc])
    other = async_task("tests.tasks.record_run", "other")
    cluster.wait_final([other], alive=[qc])
    assert Job.objects.get(pk=sleeper).state in ("SUSPENDED", "QUEUED")  # the other job ran while it slept
    cluster.wait_final([sleeper], alive=[qc])

    job = Job.objects.get(pk=sleeper)
    assert job.state == "SUCCEEDED", job.error
    before, after = job.result
    sleep = JobStep.objects.get(job_id=sleeper, kind="sleep")
    slept_at = sleep.wake_at - 5
    assert Job.objects.get(pk=other).finished_at < datetime.datetime.fromtimestamp(after, tz=datetime.UTC)
    assert 5 <= after - slept_at <= 7, f"resumed {after - slept_at:.2f} s after it slept"
    assert tags(cluster, sleeper) == ["step:before", "step:after"]  # the step before the sleep did not run again
    assert (job.deliveries, job.attempt) == (1, 1)  # the sleep counted neither


def test_a_signal_sent_from_a_view_resumes_the_waiting_task_with_its_payload(cluster, client, settings):
    settings.ROOT_URLCONF = "tests.cluster.urls_durable"
    job_id = async_task(f"{TASKS}.approval")
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: suspended(job_id, "wait"), "the task to wait for its signal", alive=[qc])
    response = client.post(f"/approve/{job_id}/", {"by": "ann"})
    assert (response.status_code, response.json()) == (200, {"woke": True})
    cluster.wait_final([job_id], alive=[qc])

    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result) == ("SUCCEEDED", {"by": "ann"}), job.error
    assert tags(cluster, job_id) == ["step:asked", "step:answered:{'by':"]
    # A finished job takes no signal: the view says so.
    response = client.post(f"/approve/{job_id}/", {"by": "bob"})
    assert response.status_code == 409 and "has ended" in response.json()["error"]


def test_a_signal_sent_before_the_task_reached_its_wait_is_delivered(cluster):
    job_id = async_task(f"{TASKS}.approval")
    assert send_signal(job_id, "approved", "early") is False  # kept: nothing waits yet
    qc = cluster.start("-w", "1")
    cluster.wait_final([job_id], alive=[qc])
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result, job.deliveries) == ("SUCCEEDED", "early", 1), job.error


def test_a_wait_that_times_out_resumes_with_none(cluster):
    job_id = async_task(f"{TASKS}.approval", 2)
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: suspended(job_id, "wait"), "the task to wait for its signal", alive=[qc])
    cluster.wait_final([job_id], alive=[qc])
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result, job.deliveries) == ("SUCCEEDED", None, 1), job.error
    assert tags(cluster, job_id) == ["step:asked", "step:answered:None"]


def test_cancel_while_waiting_ends_the_job_cancelled_at_once(cluster):
    job_id = async_task(f"{TASKS}.approval")
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: suspended(job_id, "wait"), "the task to wait for its signal", alive=[qc])
    assert cancel(job_id) is True
    assert Job.objects.get(pk=job_id).state == "CANCELLED"  # at once: nothing runs it to find out
    other = async_task("tests.tasks.record_run")
    cluster.wait_final([other], alive=[qc])  # the cluster went on; the cancelled job never ran again
    assert tags(cluster, job_id) == ["step:asked"]
    assert Job.objects.get(pk=job_id).state == "CANCELLED"


def test_two_clusters_run_200_durable_tasks_that_sleep_twice_and_wait_once(cluster):
    ids = enqueue_many(f"{TASKS}.sleeps_and_waits", [(n,) for n in range(200)])
    early, late = ids[::2], ids[1::2]
    for job_id in early:  # sent before the task reaches its wait: kept for it
        send_signal(job_id, "go", 1)
    first, second = cluster.start("-w", "2"), cluster.start("-w", "2")
    alive = [first, second]

    def waiting() -> int:
        return JobStep.objects.filter(job_id__in=late, kind="wait", done=False, job__state="SUSPENDED").count()

    cluster.wait_until(lambda: waiting() == len(late), lambda: f"{len(late)} tasks waiting; {waiting()} now",
                       alive=alive)
    cluster.wait_final(early, alive=alive)
    # Nothing is held while they wait: no lease, no worker, no delivery counted.
    held = Job.objects.filter(pk__in=late).exclude(lease_owner=None).count()
    assert held == 0 and job_states(late) == {"SUSPENDED": len(late)}
    assert {j.deliveries for j in jobs(late).values()} == {0}
    for job_id in late:
        assert send_signal(job_id, "go", 1) is True
    cluster.wait_final(ids, alive=alive)

    assert job_states(ids) == {"SUCCEEDED": len(ids)}
    finished = jobs(ids)
    assert [finished[j].result for j in ids] == [n + 2 for n in range(200)]
    assert {(j.deliveries, j.attempt) for j in finished.values()} == {(1, 1)}
    runs: dict[str, list[str]] = {job_id: [] for job_id in ids}
    for job_id, tag in cluster.log():
        runs[job_id].append(tag)
    assert {tuple(r) for r in runs.values()} == {("step:a", "step:b", "step:c")}  # every step ran once


@pytest.mark.parametrize("dead", [3, 0])
def test_a_batch_of_100_runs_each_callback_that_applies_once_across_a_sigkill_of_one_of_two_clusters(cluster, dead):
    cluster.configure(lease=4)
    b = Batch(on_success=f"{TASKS}.on_success", on_finish=f"{TASKS}.on_finish", on_discard=f"{TASKS}.on_discard")
    dead_at = {10, 50, 90} if dead else set()
    for n in range(100):
        if n in dead_at:
            b.add("tests.tasks.reject", f"job {n} is rejected")
        else:
            b.add(f"{TASKS}.slow_record", n, 0.2)
    batch_id = b.enqueue()
    victim, survivor = cluster.start("-w", "2"), cluster.start("-w", "2")
    cluster.wait_until(lambda: sum(tag.startswith("member") for _, tag in cluster.log()) >= 20,
                       "20 jobs of the batch to run", alive=[victim, survivor])
    victim.kill_all()  # with whatever it holds: its leases run out and the survivor runs them
    assert not batch(batch_id).finished  # killed in the middle of the batch
    cluster.wait_until(lambda: batch(batch_id).finished, lambda: f"the batch to finish: {batch(batch_id)}",
                       alive=[survivor])
    callback_jobs = list(Job.objects.filter(func__startswith=f"{TASKS}.on_").values_list("pk", flat=True))
    cluster.wait_final(callback_jobs, alive=[survivor])

    info = batch(batch_id)
    expected = {"DEAD": dead, "SUCCEEDED": 100 - dead} if dead else {"SUCCEEDED": 100}
    assert (info.total, info.counts) == (100, expected)
    counts = str(sorted(expected.items()))
    ran = sorted(tag for j, tag in cluster.log() if j == batch_id)
    kinds = ["on_discard", "on_finish"] if dead else ["on_finish", "on_success"]
    assert ran == [f"{kind} 100 {counts}" for kind in kinds]  # each once; the other never
    assert len(callback_jobs) == 2


def test_the_timeout_counts_the_time_a_run_takes_not_the_sleep(cluster):
    job_id = async_task(f"{TASKS}.long_sleep_short_runs", 1.0, 3)  # 5 s from start to end, timeout 2.5 s
    qc = cluster.start("-w", "1")
    cluster.wait_final([job_id], alive=[qc])
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result, job.deliveries) == ("SUCCEEDED", ["first", "second"], 1), job.error
    assert (job.finished_at - job.enqueued_at).total_seconds() > 2.5 + 1  # longer than the timeout in all
    assert tags(cluster, job_id) == ["step:first", "step:second"]
