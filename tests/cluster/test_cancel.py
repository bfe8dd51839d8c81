"""Cancelling running work: ``django_taskmq.cancel(job_id)`` from this process (not the cluster that
runs the job) stops a job running in a ``qcluster`` subprocess.

Three kinds of task: one that never looks (stopped by the interruption after ``cancel_grace``), a
cooperative loop (``current_job().cancelled``) and a coroutine (``CancelledError``). Each ends
``CANCELLED`` after one run, its hook sees ``CANCELLED``, and it never runs again (the test waits
past the retry delays of the test settings, 0.5 s at most). The worker carries on: with two threads
the other task of the same worker finishes normally; with one, the next job runs in the same process.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import async_task, cancel

from .conftest import jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

# kind -> (function, its log name, what it logs when it sees the cancellation, the error it ends with)
TASKS = {
    "ignores": ("ignores_cancel", "ignores", None, "cancel_grace"),  # stopped by the interruption
    "cooperative": ("cooperative", "cooperative", "saw-cancel", "JobCancelled: job "),
    "coroutine": ("async_waits", "async", "cancelled-error", "CancelledError"),
}
RETRY_PERIOD = 2.0  # seconds: four times the longest retry delay of the test settings (max_delay 0.5)


def tags(cluster, job_id):
    return [tag.split()[0] for j, tag in cluster.log() if j == job_id]


def pid_of(cluster, job_id):
    return next(int(tag.split()[1]) for j, tag in cluster.log() if j == job_id and tag.startswith("start:"))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", list(TASKS))
def test_cancel_stops_a_job_running_in_another_cluster(cluster, threads, kind):
    func, name, seen, error = TASKS[kind]
    cluster.configure(cancel_grace=1)
    gate = cluster.gate("sibling")
    job_id = async_task(f"tests.cluster.tasks_cluster.{func}", 120, hook="tests.cluster.tasks_cluster.hook")
    sibling = async_task("tests.cluster.tasks_cluster.gated", "sibling", gate) if threads > 1 else None
    qc = cluster.start("-w", "1", "--threads", str(threads))
    started = [job_id] + ([sibling] if sibling else [])
    cluster.wait_until(lambda: all(tags(cluster, j) for j in started), "the tasks to start", alive=[qc])

    assert cancel(job_id) is True
    cluster.wait_final([job_id], alive=[qc])

    job = jobs([job_id])[job_id]
    assert (job.state, job.deliveries, job.attempt, job.lease_owner) == ("CANCELLED", 1, 1, None)
    assert job.cancel_requested_at is not None and job.finished_at is not None
    assert error in job.error, job.error
    expected = [f"start:{name}"] + ([seen] if seen else []) + ["hook:CANCELLED"]
    cluster.wait_until(lambda: tags(cluster, job_id) == expected,
                       lambda: f"run log of the job {expected}; now {tags(cluster, job_id)}", alive=[qc])
    assert cancel(job_id) is False, "a finished job cannot be cancelled again"

    # The worker carries on: its other task (threads) or the next job (one thread) runs there, to its end.
    if sibling is not None:
        cluster.open(gate)
        follow = sibling
    else:
        follow = async_task("tests.cluster.tasks_cluster.slow", "next", 0)
    cluster.wait_final([follow], alive=[qc])
    done = jobs([follow])[follow]
    assert (done.state, done.deliveries) == ("SUCCEEDED", 1)
    assert pid_of(cluster, follow) == pid_of(cluster, job_id), "the same worker process ran both"

    time.sleep(RETRY_PERIOD)  # a retry, if there were one, would have started by now
    assert tags(cluster, job_id) == expected, "the cancelled job never ran again"
    assert jobs([job_id])[job_id].state == "CANCELLED"
    assert qc.running()


@pytest.mark.parametrize("prefetch", [0, 4])  # 0: it waits in the sentinel; 4: unstarted in the worker
def test_cancel_of_a_job_reserved_but_not_started_ends_it_without_running_it(cluster, prefetch):
    cluster.configure(prefetch=prefetch)
    gate = cluster.gate("first")
    first = async_task("tests.cluster.tasks_cluster.gated", "first", gate, priority=9)
    waiting = async_task("tests.cluster.tasks_cluster.slow", "waiting", 0, hook="tests.cluster.tasks_cluster.hook")
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: tags(cluster, first) and jobs([waiting])[waiting].state == "RUNNING",
                       "the first task running and the second reserved behind it", alive=[qc])

    assert cancel(waiting) is True
    cluster.wait_final([waiting], alive=[qc])
    job = jobs([waiting])[waiting]
    assert (job.state, job.attempt, job.started_at) == ("CANCELLED", 0, None)
    assert "before it started" in job.error

    cluster.open(gate)
    cluster.wait_final([first], alive=[qc])
    assert jobs([first])[first].state == "SUCCEEDED"
    cluster.wait_until(lambda: tags(cluster, waiting) == ["hook:CANCELLED"],
                       lambda: f"only the hook of the cancelled job; its log {tags(cluster, waiting)}", alive=[qc])
