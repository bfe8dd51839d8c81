"""Pick order in a running cluster: an urgent task overtakes waiting ones (yield); weights share a band."""

from __future__ import annotations

import collections

import pytest

from django_taskmq import Priority, async_task, enqueue_many
from django_taskmq.models import Job

from .conftest import job_states, jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_urgent_task_runs_right_after_the_running_one_before_waiting_normals(cluster):
    # Without prefetch the normals wait in the sentinel's list, which the urgent task makes yield;
    # with it see test_prefetch.test_an_urgent_task_passes_the_prefetched_ones.
    cluster.configure(queue_limit=3, prefetch=0)
    gate = cluster.gate("slow")
    slow = async_task("tests.cluster.tasks_cluster.gated", "slow", gate)
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: any(t.startswith("start:slow") for _, t in cluster.log()),
                       "the slow task to start", alive=[qc])
    normals = [async_task("tests.tasks.record_run", f"normal{i}", priority=Priority.NORMAL) for i in range(3)]
    # The three normals are reserved and wait in the cluster (its whole buffer) behind the slow task.
    cluster.wait_until(lambda: job_states(normals) == {"RUNNING": 3},
                       lambda: f"3 reserved normals; {dict(job_states(normals))}", alive=[qc])
    urgent = async_task("tests.tasks.record_run", "urgent", priority=Priority.CRITICAL)
    cluster.wait_until(lambda: job_states([urgent]) == {"RUNNING": 1},
                       lambda: f"the urgent job reserved; {dict(job_states([urgent]))}", alive=[qc])
    cluster.open(gate)
    cluster.wait_final([slow, urgent, *normals], alive=[qc])

    order = [tag.split()[0] for _, tag in cluster.log()]
    assert order == ["start:slow", "end:slow", "urgent", "normal0", "normal1", "normal2"]
    final = jobs([urgent, *normals])
    assert {j.state for j in final.values()} == {"SUCCEEDED"}
    # One normal was handed back to make room (a yield), which did not count as a delivery.
    assert sum(final[j].yields for j in normals) >= 1
    assert {final[j].deliveries for j in normals} == {1}


def test_weights_3_to_1_share_one_priority_band_about_3_to_1(cluster):
    # Both queues stay busy for the whole window looked at: 400 jobs each, first 200 completions.
    emails = enqueue_many("tests.tasks.record_run", [("emails",) for _ in range(400)], queue="emails")
    reports = enqueue_many("tests.tasks.record_run", [("reports",) for _ in range(400)], queue="reports")
    assert (cluster.settings.TASKMQ["queues"]["emails"]["weight"],
            cluster.settings.TASKMQ["queues"]["reports"]["weight"]) == (3, 1)

    cluster.burst("-w", "2")

    assert job_states(emails + reports) == {"SUCCEEDED": 800}
    first = collections.Counter(tag for _, tag in cluster.log()[:200])
    ratio = first["emails"] / max(first["reports"], 1)
    assert 2 <= ratio <= 4, f"first 200 completions: {dict(first)} (ratio {ratio:.2f})"
    assert Job.objects.filter(state="SUCCEEDED").count() == 800
