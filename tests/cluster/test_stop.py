"""Stopping a cluster: SIGTERM runs the stop procedure; --burst drains and exits; -Q picks queues."""

from __future__ import annotations

import collections
import signal

import pytest

from django_taskmq import enqueue_many
from django_taskmq.models import Job

from .conftest import job_states, jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("threads", [1, 4])
def test_sigterm_finishes_running_tasks_and_returns_unstarted_reservations(cluster, threads):
    """With one thread per worker or four: what runs finishes, what waits goes back uncounted."""
    running = 2 * threads
    cluster.configure(queue_limit=10)
    gate = cluster.gate("stop")
    ids = enqueue_many("tests.cluster.tasks_cluster.gated", [(f"g{i}", gate) for i in range(30)])
    qc = cluster.start("-w", "2", "--threads", str(threads))

    def started() -> set[str]:
        return {j for j, tag in cluster.log() if tag.startswith("start:")}

    # The tasks run (held by the gate) and more are reserved, waiting unstarted in the cluster.
    cluster.wait_until(lambda: len(started()) == running and job_states(ids)["RUNNING"] >= running + 5,
                       lambda: f"{running} running and 5+ reserved jobs; started {len(started())}, "
                               f"{dict(job_states(ids))}", alive=[qc])
    qc.send(signal.SIGTERM)
    # The stop procedure hands the unstarted reservations back while the running tasks go on...
    cluster.wait_until(lambda: job_states(ids)["RUNNING"] == running,
                       lambda: f"only the {running} running jobs left RUNNING; now {dict(job_states(ids))}", alive=[qc])
    assert qc.running(), "the cluster exited while tasks were still running"
    # ...and lets them finish before the cluster exits.
    cluster.open(gate)
    code = qc.wait()
    assert code == 0, f"exit status {code} after SIGTERM:\n{qc.output()}"

    ran = started()
    assert len(ran) == running
    final = jobs(ids)
    for job_id in ran:
        assert (final[job_id].state, final[job_id].deliveries) == ("SUCCEEDED", 1)
    rest = [final[j] for j in ids if j not in ran]
    assert collections.Counter((j.state, j.deliveries, j.lease_owner, j.yields) for j in rest) == {
        ("QUEUED", 0, None, 0): len(ids) - running
    }, "unstarted jobs are back in the broker with their deliveries unchanged"
    # Each of the two ran once, to its end; nothing else started.
    assert sorted((j, tag.split()[0].split(":")[0]) for j, tag in cluster.log()) == sorted(
        (j, event) for j in ran for event in ("start", "end"))


def test_burst_serves_only_the_given_queues_then_exits_0(cluster):
    in_a = enqueue_many("tests.tasks.record_run", [() for _ in range(20)], queue="a")
    in_b = enqueue_many("tests.tasks.record_run", [() for _ in range(20)], queue="b")

    cluster.burst("-Q", "a", "-w", "2")  # exits 0 once "a" is drained, although "b" has work

    assert job_states(in_a) == {"SUCCEEDED": 20}
    assert {(j.state, j.deliveries) for j in jobs(in_b).values()} == {("QUEUED", 0)}
    assert sorted(j for j, _ in cluster.log()) == sorted(in_a)

    cluster.burst("-w", "2")
    assert job_states(in_b) == {"SUCCEEDED": 20}
    assert collections.Counter(j for j, _ in cluster.log()) == {j: 1 for j in in_a + in_b}
    assert Job.objects.count() == 40
