"""Progress of long jobs in a real cluster: current_job().set_progress(...) seen by fetch(), the admin
job page and the dashboard while the job runs; a loop of 100,000 reports writes a bounded number of times."""

from __future__ import annotations

import math

import pytest
from django.urls import reverse

from django_taskmq import async_task, fetch
from django_taskmq.policy.progress import INTERVAL

pytestmark = [pytest.mark.cluster]

BAR = '<progress class="taskmq-progress" value="5" max="10">'


def test_a_running_job_shows_its_progress(cluster, admin_client):
    gate = cluster.gate("finish")
    job = async_task("tests.observe.reports_then_waits", gate)
    qc = cluster.start("-w", "1")
    progress = cluster.wait_until(lambda: fetch(job).progress, "a progress report of the running job", alive=[qc])
    assert fetch(job).state == "RUNNING"
    assert (progress["done"], progress["total"], progress["message"]) == (5, 10, "halfway")
    assert progress["updated_at"].tzinfo is not None

    page = admin_client.get(reverse("admin:django_taskmq_job_change", args=[job])).content.decode()
    assert BAR in page and "5 / 10 (50 %) halfway" in page
    # The dashboard lists the busy workers from the cluster's heartbeat.
    dashboard = reverse("admin:django_taskmq_dashboard")
    cluster.wait_until(lambda: job in admin_client.get(dashboard).content.decode(), "the job on the dashboard",
                       alive=[qc])
    assert BAR in admin_client.get(dashboard).content.decode()

    cluster.open(gate)
    cluster.wait_final([job], alive=[qc])
    assert fetch(job).state == "SUCCEEDED"


def test_a_job_without_reports_has_no_progress(cluster):
    job = async_task("tests.tasks.noop")
    qc = cluster.start("-w", "1")
    cluster.wait_final([job], alive=[qc])
    assert fetch(job).progress is None


def test_a_hundred_thousand_reports_write_about_once_a_second(cluster):
    calls = 100_000
    job = async_task("tests.observe.reports_often", calls)
    qc = cluster.start("-w", "1")
    cluster.wait_final([job], alive=[qc])
    done = fetch(job)
    assert done.state == "SUCCEEDED", done.error
    made = done.result
    # The first report is written at once, then at most one per INTERVAL while reports keep coming.
    assert 1 <= made["writes"] <= math.ceil(made["seconds"] / INTERVAL) + 1, made
    assert (done.progress["done"], done.progress["total"]) == (calls, calls)  # the last report was written
