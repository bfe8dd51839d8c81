"""A running cluster that meets jobs one at a time: each worker records its own plain successes;
failures, and successes of a busy cluster, are the monitor's. Every job ends once, attempt 1."""

from __future__ import annotations

import collections
import time

import pytest

from django_taskmq import async_task, enqueue_many
from django_taskmq.models import Job

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"


def test_idle_workers_record_their_successes_and_the_monitor_the_rest(cluster):
    cluster.configure(max_deliveries=1)
    qc = cluster.start("-w", "2")
    cluster.wait_pool(qc, 2)
    ids = []
    for _ in range(12):  # one at a time, each a while after the previous one ended: an idle cluster
        time.sleep(0.1)  # (the sentinel has read the previous one's outcome)
        ids.append(async_task(f"{TASKS}.ran_by"))
        cluster.wait_final(ids[-1:], alive=[qc])
    failed = async_task("tests.tasks.fail")
    cluster.wait_final([failed], alive=[qc])
    busy = enqueue_many(f"{TASKS}.ran_by", [()] * 200)  # a backlog: workers are never idle in between
    cluster.wait_final(busy, alive=[qc])

    jobs = Job.objects.in_bulk([*ids, failed, *busy])
    assert collections.Counter(j.state for j in jobs.values()) == {"SUCCEEDED": 212, "DEAD": 1}
    assert {(j.attempt, j.deliveries) for j in jobs.values()} == {(1, 1)}
    ran = {job_id: tag.split(":")[1] for job_id, tag in cluster.log() if tag.startswith("ran-by:")}
    recorded = collections.defaultdict(list)
    for job_id, tag in cluster.log():
        if tag.startswith("recorded-by:"):
            recorded[job_id].append(tag.split(":")[1])
    # Once a worker has the receiver (after its first task), the idle jobs it ran are recorded by it,
    # once each. At most one such job per worker came before its receiver.
    idle_recorded = [i for i in ids if recorded[i]]
    assert len(idle_recorded) >= len(ids) - 2
    assert all(recorded[i] == [ran[i]] for i in idle_recorded)
    assert failed not in recorded  # the monitor's (no receiver there)
    # In the backlog workers hold prefetched tasks: the monitor records nearly all of them.
    assert sum(1 for i in busy if recorded[i]) < len(busy) // 4
