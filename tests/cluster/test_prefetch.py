"""Prefetch (``TASKMQ['prefetch']``): a worker with one thread holds a few tasks beyond the one it
runs. What it holds stays revocable until it starts: a graceful stop, a recycle, a crash and a
timeout hand the unstarted ones back without counting a delivery for them, and an urgent task
passes the prefetched ones (it waits for at most the task that runs)."""

from __future__ import annotations

import collections
import os
import signal

import pytest

from django_taskmq import Priority, async_task, enqueue_many
from django_taskmq.models import Job

from .conftest import job_states, jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"


def starts(log) -> collections.Counter:
    return collections.Counter(j for j, tag in log if tag.startswith("start:"))


def stop(qc) -> None:
    qc.send(signal.SIGTERM)
    code = qc.wait()
    assert code == 0, f"qcluster exited {code} after SIGTERM:\n{qc.output()}"


def test_a_graceful_stop_hands_prefetched_tasks_back_uncounted(cluster):
    """One worker runs a gated task and holds 4 more: at SIGTERM the 4 go back to the queue at once
    (taken back without the busy worker's help), their deliveries unchanged, and the running one
    finishes."""
    cluster.configure(prefetch=4, queue_limit=1)
    gate = cluster.gate("stop")
    ids = enqueue_many(f"{TASKS}.gated", [(f"g{i}", gate) for i in range(5)])
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: len(starts(cluster.log())) == 1 and job_states(ids)["RUNNING"] == 5,
                       lambda: f"1 started and 5 reserved; {dict(job_states(ids))}", alive=[qc])
    qc.send(signal.SIGTERM)
    cluster.wait_until(lambda: "to finish their running tasks" in qc.output(), "the poison pill to be sent",
                       alive=[qc])
    cluster.wait_until(lambda: job_states(ids) == {"RUNNING": 1, "QUEUED": 4},
                       lambda: f"the 4 held ones back in the queue; {dict(job_states(ids))}", alive=[qc])
    cluster.open(gate)
    assert qc.wait() == 0, qc.output()

    (ran,) = starts(cluster.log())
    final = jobs(ids)
    assert (final[ran].state, final[ran].deliveries) == ("SUCCEEDED", 1)
    assert {(j.state, j.deliveries, j.lease_owner) for pk, j in final.items() if pk != ran} == {("QUEUED", 0, None)}


def test_an_urgent_task_passes_the_prefetched_ones(cluster):
    """One worker, prefetch 8, a gated NORMAL task running and 8 NORMAL ones held behind it: a
    CRITICAL task enqueued now runs right after the gated one."""
    cluster.configure(prefetch=8)
    gate = cluster.gate("first")
    first = async_task(f"{TASKS}.gated", "first", gate)
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: starts(cluster.log()), "the first task to start", alive=[qc])
    held = enqueue_many(f"{TASKS}.slow", [(f"n{i}", 0) for i in range(8)])
    cluster.wait_until(lambda: job_states(held)["RUNNING"] == 8, "the 8 to be reserved", alive=[qc])
    critical = async_task(f"{TASKS}.slow", "critical", 0, priority=Priority.CRITICAL)
    cluster.wait_until(lambda: Job.objects.get(pk=critical).state == "RUNNING", "the critical task to be reserved",
                       alive=[qc])
    cluster.open(gate)
    cluster.wait_final([first, *held, critical], alive=[qc])
    stop(qc)

    order = [j for j, tag in cluster.log() if tag.startswith("start:")]
    assert order[:2] == [first, critical], order
    assert job_states([first, *held, critical]) == {"SUCCEEDED": 10}


def test_sigkill_redelivers_the_running_task_and_returns_the_prefetched_ones_uncounted(cluster, tmp_path):
    cluster.configure(prefetch=4)
    pid_file = tmp_path / "victim.pid"
    victim = async_task(f"{TASKS}.victim", str(pid_file))
    qc = cluster.start("-w", "1")
    cluster.wait_until(pid_file.exists, "the victim to start", alive=[qc])
    behind = enqueue_many(f"{TASKS}.slow", [(f"b{i}", 0) for i in range(4)])
    cluster.wait_until(lambda: job_states(behind)["RUNNING"] == 4, "the 4 to be reserved (held by the worker)",
                       alive=[qc])
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    cluster.wait_final([victim, *behind], alive=[qc])
    stop(qc)

    final = jobs([victim, *behind])
    assert (final[victim].state, final[victim].deliveries) == ("SUCCEEDED", 2)
    assert "WorkerDied" in final[victim].error or final[victim].attempt == 2
    assert {(final[j].state, final[j].deliveries) for j in behind} == {("SUCCEEDED", 1)}
    assert starts(cluster.log()) == {victim: 2, **dict.fromkeys(behind, 1)}


def test_a_timeout_kills_only_the_running_task_and_the_prefetched_ones_run_once(cluster):
    cluster.configure(prefetch=4)
    late = async_task(f"{TASKS}.sleeper", 60, timeout=1, max_deliveries=1)
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: starts(cluster.log()), "the sleeper to start", alive=[qc])
    behind = enqueue_many(f"{TASKS}.slow", [(f"b{i}", 0) for i in range(4)])
    cluster.wait_final([late, *behind], alive=[qc])
    stop(qc)

    job = Job.objects.get(pk=late)
    assert (job.state, job.deliveries) == ("DEAD", 1) and "TaskTimeout" in job.error
    assert {(j.state, j.deliveries) for j in jobs(behind).values()} == {("SUCCEEDED", 1)}
    assert starts(cluster.log()) == {late: 1, **dict.fromkeys(behind, 1)}


def test_many_short_tasks_with_prefetch_and_recycling_each_run_once(cluster):
    cluster.configure(prefetch=16, recycle=50)
    ids = enqueue_many(f"{TASKS}.slow", [(f"s{i}", 0) for i in range(1000)])
    cluster.burst("-w", "2")
    assert job_states(ids) == {"SUCCEEDED": 1000}
    assert {j.deliveries for j in jobs(ids).values()} == {1}
    assert starts(cluster.log()) == dict.fromkeys(ids, 1)


def test_an_idle_worker_takes_over_what_waits_behind_a_long_task(cluster):
    """Two workers, prefetch 4: each runs a gated task and holds the short ones dealt to it. When
    B's gate opens, B runs its own, then takes over what A holds behind its still-running task:
    every short task ends while A's gate is closed, each started once, one delivery each."""
    cluster.configure(prefetch=4)
    gate_a, gate_b = cluster.gate("a"), cluster.gate("b")
    long_a, long_b = enqueue_many(f"{TASKS}.gated", [("a", gate_a), ("b", gate_b)])
    short = enqueue_many(f"{TASKS}.slow", [(f"s{i}", 0) for i in range(8)])
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: starts(cluster.log()).keys() == {long_a, long_b}
                       and job_states([long_a, long_b, *short])["RUNNING"] == 10,
                       "both gated tasks to start and the 8 short ones to be held", alive=[qc])
    cluster.open(gate_b)
    cluster.wait_final([long_b, *short], timeout=30, alive=[qc])
    assert Job.objects.get(pk=long_a).state == "RUNNING"  # its gate is still closed
    cluster.open(gate_a)
    cluster.wait_final([long_a], alive=[qc])
    stop(qc)

    assert {(j.state, j.deliveries) for j in jobs([long_a, long_b, *short]).values()} == {("SUCCEEDED", 1)}
    assert starts(cluster.log()) == dict.fromkeys([long_a, long_b, *short], 1)


def test_the_dashboard_counts_as_running_the_jobs_started_and_shows_the_others_reserved(cluster, admin_client):
    """A busy cluster with prefetch: 2 workers run 2 gated tasks and the cluster holds more. The
    table says RUNNING for all it holds; the dashboard and the job list say 2 running (the ones the
    run log says started) and the others reserved, not started."""
    from django_taskmq.observability import statistics

    cluster.configure(prefetch=4)
    gate = cluster.gate("busy")
    ids = enqueue_many(f"{TASKS}.gated", [(f"g{i}", gate, 600) for i in range(12)])
    qc = cluster.start("-w", "2", "-n", "busy-cluster")

    def split() -> tuple[int, int]:
        default = next(q for q in statistics.queue_stats() if q.name == "default")
        return default.running, default.reserved

    def settled() -> int:  # how many the cluster holds, once 2 started and every view agrees
        held = job_states(ids)["RUNNING"]
        return held if len(starts(cluster.log())) == 2 and held > 2 and split() == (2, held - 2) else 0

    held = cluster.wait_until(settled, lambda: f"2 started, more held; {dict(job_states(ids))}, split {split()}",
                              alive=[qc])
    started = set(starts(cluster.log()))
    page = admin_client.get("/admin/django_taskmq/dashboard/").content.decode()
    assert '<b id="taskmq-running">2</b>' in page and f'<b id="taskmq-reserved">{held - 2}</b>' in page
    reserved = admin_client.get("/admin/django_taskmq/job/", {"execution": "reserved"})
    listed = {job.pk for job in reserved.context["cl"].result_list}
    assert len(listed) == held - 2 and not listed & started
    assert reserved.content.decode().count("reserved by busy-cluster, not started") == held - 2
    running = admin_client.get("/admin/django_taskmq/job/", {"execution": "executing"})
    assert {job.pk for job in running.context["cl"].result_list} == started
    cluster.open(gate)
    cluster.wait_final(ids, alive=[qc])
    stop(qc)
    assert job_states(ids) == {"SUCCEEDED": 12}
