"""``stop_timeout``: a deploy's SIGTERM interrupts what still runs after it, and loses and counts nothing.

Each test starts a task that would run for a minute, sends SIGTERM to a cluster with
``stop_timeout=2`` and checks that the cluster exits long before the task would have ended, that the
job is back in the queue exactly as it was before that delivery (deliveries and attempts 0, no
lease, visible now), and that a second cluster runs it at once: the lease is 600 s, so a job that
came back by its lease could not finish within the wait's bound.
"""

from __future__ import annotations

import signal
import time

import pytest

from .conftest import jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

LEASE = 600  # a job that came back only when its lease ran out would come back 10 minutes later
EXIT_BOUND = 40  # seconds: stop_timeout (2) + the stop's margins (5), generously widened for a busy machine


def starts(cluster, job_id):
    return [tag for j, tag in cluster.log() if j == job_id and tag.startswith("start:")]


@pytest.mark.parametrize("threads, task", [
    (1, "gated"),  # one thread: the worker is killed at the deadline
    (2, "gated"),  # threads: the task is interrupted in its thread (Python code: the exception lands)
    (2, "nap"),  # threads, a task blocked in C code (time.sleep(60)): it ignores the interruption; killed
])
def test_sigterm_interrupts_tasks_after_stop_timeout_and_gives_them_back_uncounted(cluster, threads, task):
    cluster.configure(stop_timeout=2, lease=LEASE)
    gate = cluster.gate("second-run")
    from django_taskmq import async_task

    args = ("stopped", gate) if task == "gated" else (gate, 60)
    job_id = async_task(f"tests.cluster.tasks_cluster.{task}", *args)
    # A second task in another thread of the same worker finishes before the deadline, recorded as usual.
    quick = async_task("tests.cluster.tasks_cluster.slow", "quick", 0.5) if threads > 1 else None
    qc = cluster.start("-w", "1", "--threads", str(threads))
    cluster.wait_until(lambda: starts(cluster, job_id), "the long task to start", alive=[qc])

    qc.send(signal.SIGTERM)
    code = qc.wait(timeout=EXIT_BOUND)  # fails the test if the cluster is still running then

    assert code == 0, f"exit status {code} after SIGTERM:\n{qc.output()}"
    assert not qc.tree(), "a process of the stopped cluster is still alive"
    job = jobs([job_id])[job_id]
    assert (job.state, job.deliveries, job.attempt, job.lease_owner, job.lease_token, job.lease_until) == (
        "QUEUED", 0, 0, None, None, None), "the interrupted job is back as it was before that delivery"
    assert "interrupted by shutdown" in job.error
    assert job.visible_at <= time.time(), "visible at once, not after its lease"
    assert [tag.split()[0] for j, tag in cluster.log() if j == job_id] == [f"start:{args[0] if task == 'gated' else 'nap'}"]
    if quick is not None:
        done = jobs([quick])[quick]
        assert (done.state, done.deliveries, done.attempt) == ("SUCCEEDED", 1, 1)

    # A new cluster runs it at once; this time it ends (the gate is open) after one delivery in all.
    cluster.open(gate)
    second = cluster.start("-w", "1", "--threads", str(threads))
    cluster.wait_final([job_id], timeout=LEASE / 4, alive=[second])
    job = jobs([job_id])[job_id]
    assert (job.state, job.deliveries, job.attempt) == ("SUCCEEDED", 1, 1), "the stop counted nothing"
    assert len(starts(cluster, job_id)) == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cancelled_task_the_stop_interrupts_ends_cancelled_not_back_in_the_queue(cluster, threads):
    """A job cancelled while running (its cancel_grace not over) and then interrupted by the stop was
    asked to stop: it ends CANCELLED instead of going back to run again."""
    cluster.configure(stop_timeout=1, cancel_grace=600, lease=LEASE)
    from django_taskmq import async_task, cancel

    job_id = async_task("tests.cluster.tasks_cluster.notices_cancel", 120)
    qc = cluster.start("-w", "1", "--threads", str(threads))
    cluster.wait_until(lambda: starts(cluster, job_id), "the task to start", alive=[qc])
    assert cancel(job_id)
    cluster.wait_until(lambda: ("saw-cancel" in [tag for j, tag in cluster.log() if j == job_id]),
                       "the task to see its cancellation", alive=[qc])

    qc.send(signal.SIGTERM)
    assert qc.wait(timeout=EXIT_BOUND) == 0, qc.output()

    job = jobs([job_id])[job_id]
    assert (job.state, job.deliveries, job.lease_owner) == ("CANCELLED", 1, None)
    assert len(starts(cluster, job_id)) == 1
