"""Many jobs through real clusters: each runs exactly once and ends SUCCEEDED."""

from __future__ import annotations

import collections

import pytest

from django_taskmq import enqueue_many
from django_taskmq.models import Cluster, Job

from .conftest import job_states

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_1000_tasks_through_2_workers_each_run_once(cluster):
    ids = enqueue_many("tests.tasks.record_run", [() for _ in range(1000)])

    qc = cluster.burst("-w", "2")

    assert job_states(ids) == {"SUCCEEDED": 1000}
    runs = collections.Counter(job_id for job_id, _ in cluster.log())
    assert set(runs) == set(ids), "every job ran, and nothing else did"
    assert max(runs.values()) == 1, f"jobs that ran more than once: {[j for j, n in runs.items() if n > 1][:10]}"
    assert set(Job.objects.filter(pk__in=ids[:500]).values_list("deliveries", flat=True)) == {1}
    beat = Cluster.objects.get(pid=qc.pid)
    assert beat.state == "stopped" and beat.workers == 0
    assert beat.counts["succeeded"] == 1000 and beat.counts["crashes"] == 0
