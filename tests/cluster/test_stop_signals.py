"""Stop signals: a burst of one kind is one request (coreutils ``timeout`` signals the process and
then its group); a second, later request stops the cluster now and says what it gave back."""

from __future__ import annotations

import re
import signal
import time

import pytest

from django_taskmq import async_task, enqueue_many
from django_taskmq.models import Cluster, Job

from .conftest import job_states, jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def lines(output: str, pattern: str) -> list[str]:
    return [line for line in output.splitlines() if re.search(pattern, line)]


def test_timeout_signalling_twice_is_one_graceful_stop(cluster):
    """``timeout -s TERM`` with a task running: it finishes, nothing is counted, one line per step."""
    gate = cluster.gate("stop")
    job_id = async_task("tests.cluster.tasks_cluster.gated", "held", gate)
    # coreutils timeout sends SIGTERM to qcluster, then to its own process group, where qcluster is.
    qc = cluster.start("-w", "1", "-n", "timed", prefix=["timeout", "--preserve-status", "-s", "TERM", "10"])
    cluster.wait_until(lambda: ("start:held" in {tag.split()[0] for _, tag in cluster.log()}),
                       "the gated task to start before timeout's signals", alive=[qc])
    cluster.wait_until(lambda: lines(qc.output(tail=10**6), r"cluster timed: waiting for 1 worker"),
                       "the stop to wait for the running task", alive=[qc])
    cluster.open(gate)
    assert qc.wait() == 0, qc.output()

    output = qc.output(tail=10**6)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.deliveries, job.attempt) == ("SUCCEEDED", 1, 1), output
    for step in (r"cluster timed started \(", r"cluster timed stopping \(SIGTERM\)",
                 r"cluster timed: waiting for 1 worker\(s\)", r"cluster timed stopped: 1 succeeded, 0 failed"):
        assert len(lines(output, step)) == 1, f"{step!r} once:\n{output}"
    assert not lines(output, ": hard stop"), output
    assert "gave back 0 unstarted and 0 interrupted" in lines(output, "cluster timed stopped")[0]
    counts = Cluster.objects.get(name="timed").counts
    assert (counts["succeeded"], counts["crashes"], counts["interrupted"]) == (1, 0, 0)


def test_a_second_later_sigterm_stops_now_and_gives_back_what_ran(cluster):
    cluster.configure(queue_limit=10, prefetch=0)
    gate = cluster.gate("never")
    ids = enqueue_many("tests.cluster.tasks_cluster.gated", [(f"g{i}", gate) for i in range(8)])
    qc = cluster.start("-w", "2", "-n", "hard")

    def started() -> set[str]:
        return {j for j, tag in cluster.log() if tag.startswith("start:")}

    cluster.wait_until(lambda: len(started()) == 2, lambda: f"two tasks running; {dict(job_states(ids))}",
                       alive=[qc])
    qc.send(signal.SIGTERM)
    qc.send(signal.SIGTERM)  # within the burst: the same request
    cluster.wait_until(lambda: lines(qc.output(tail=10**6), r"cluster hard: waiting for 2 worker"),
                       "the graceful stop to wait for the running tasks", alive=[qc])
    assert qc.running()
    time.sleep(1.2)  # past the burst: the next SIGTERM is a second request (the wait is the point of the test)
    qc.send(signal.SIGTERM)
    assert qc.wait() == 1, qc.output()

    output = qc.output(tail=10**6)
    (hard,) = lines(output, ": hard stop")
    assert "hard stop (a second stop request, SIGTERM)" in hard
    assert "2 running task(s) interrupted and 0 unstarted given back to the queue, uncounted" in hard, hard
    final = jobs(ids)
    ran = started()
    # What ran is back in the queue at once, its delivery given back, saying why; nothing is left RUNNING.
    assert {(final[j].state, final[j].deliveries) for j in ran} == {("QUEUED", 0)}
    assert all("interrupted by a hard stop" in final[j].error for j in ran)
    assert job_states(ids) == {"QUEUED": 8}
    assert Cluster.objects.get(name="hard").state == "stopped"
