"""Wait and run time histograms on taskmq/metrics/ and p50/p95 on the dashboard, from jobs a real
cluster ran: the counts match the jobs run."""

from __future__ import annotations

import pytest
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_taskmq import async_task
from django_taskmq.policy.distribution import BUCKETS

pytestmark = [pytest.mark.cluster]


def series(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_histograms_count_the_jobs_run(cluster, admin_client):
    quick = [async_task("tests.tasks.noop", queue="a") for _ in range(7)]
    slow = [async_task("tests.cluster.tasks_cluster.sleeper", 0.3, queue="b") for _ in range(3)]
    failed = [async_task("tests.observe.failing", "x", ack_failure=True) for _ in range(2)]
    qc = cluster.start("-w", "2")
    cluster.wait_final(quick + slow + failed, alive=[qc])

    found = series(admin_client.get("/taskmq/metrics/").content.decode())
    expected = {("tests.tasks.noop", "a"): 7, ("tests.cluster.tasks_cluster.sleeper", "b"): 3,
                ("tests.observe.failing", "default"): 2}
    for metric in ("taskmq_job_wait_seconds", "taskmq_job_run_seconds"):
        for (task, queue), n in expected.items():
            labels = (("queue", queue), ("task", task))
            assert found[f"{metric}_gcount", labels] == n
            counts = [found[f"{metric}_bucket", tuple(sorted((*labels, ("le", f"{b:g}"))))] for b in BUCKETS]
            assert counts == sorted(counts) and counts[-1] <= n
            assert found[f"{metric}_bucket", tuple(sorted((*labels, ("le", "+Inf"))))] == n
    # Every sleeper ran at least 0.3 s: none is at or below the 0.25 s bound.
    sleeper = (("le", "0.25"), ("queue", "b"), ("task", "tests.cluster.tasks_cluster.sleeper"))
    assert found["taskmq_job_run_seconds_bucket", sleeper] == 0
    assert found["taskmq_job_run_seconds_gsum", (("queue", "b"), ("task", "tests.cluster.tasks_cluster.sleeper"))] >= 0.9

    page = admin_client.get(reverse("admin:django_taskmq_dashboard")).content.decode()
    assert 'id="taskmq-timings"' in page
    for task in ("tests.tasks.noop", "tests.cluster.tasks_cluster.sleeper", "tests.observe.failing"):
        assert f"<th>{task}</th>" in page
