"""Running and reserved are two states to the eye: a job a cluster has reserved (prefetched) is
RUNNING in the table like the one a worker executes, and every view tells them apart by the
cluster's heartbeat (``counts["tasks"]``: what its workers have started): the dashboard's tiles and
queue table, the job list's filter and state column, ``qinfo`` (text and JSON), ``qmonitor`` and
the metrics. The stored state does not change."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_taskmq import enqueue_many
from django_taskmq.observability import statistics
from django_taskmq.models import Cluster, Job, State

pytestmark = pytest.mark.django_db

OWNER = "ops-demo:h1:4242:abcd1234"
JOBS = "/admin/django_taskmq/job/"


@pytest.fixture
def held(broker):
    """Five jobs of "emails" reserved by cluster "ops-demo", whose one worker runs the first; a
    sixth job waits in the queue."""
    ids = enqueue_many("tests.tasks.noop", [() for _ in range(6)], queue="emails")
    reserved = broker.reserve(["emails"], 5, 60.0, OWNER)
    assert len(reserved) == 5
    started = reserved[0].job_id
    Cluster.objects.create(id=OWNER, name="ops-demo", host="h1", pid=4242, state="running", workers=1,
                           queues=["emails"], beat_at=timezone.now(),
                           counts={"tasks": [[0, started, "emails", 1.5]], "running": 1, "waiting": 0})
    return started, [r.job_id for r in reserved[1:]], [i for i in ids if i not in {r.job_id for r in reserved}]


def test_the_stored_state_is_running_for_both(held):
    started, waiting, _ = held
    assert set(Job.objects.filter(pk__in=[started, *waiting]).values_list("state", flat=True)) == {State.RUNNING}


def test_queue_stats_count_them_apart(held):
    emails = next(q for q in statistics.queue_stats() if q.name == "emails")
    assert (emails.running, emails.reserved, emails.ready_total) == (1, 4, 1)


def test_a_cluster_that_is_not_alive_runs_nothing(held):
    Cluster.objects.update(beat_at=timezone.now() - timezone.timedelta(minutes=5))
    emails = next(q for q in statistics.queue_stats() if q.name == "emails")
    assert (emails.running, emails.reserved) == (0, 5)


def test_the_dashboard_shows_running_and_reserved(admin_client, held):
    page = admin_client.get("/admin/django_taskmq/dashboard/").content.decode()
    assert '<b id="taskmq-running">1</b>' in page and '<b id="taskmq-reserved">4</b>' in page
    assert "?queue=emails&amp;execution=reserved" in page and "?queue=emails&amp;execution=executing" in page


def test_the_job_list_filters_and_labels_them(admin_client, held):
    started, waiting, queued = held
    listed = admin_client.get(JOBS, {"execution": "reserved"})
    assert {j.pk for j in listed.context["cl"].result_list} == set(waiting)
    page = listed.content.decode()
    assert page.count("reserved by ops-demo, not started") == 4
    running = admin_client.get(JOBS, {"execution": "executing"})
    assert [j.pk for j in running.context["cl"].result_list] == [started]
    assert "reserved by ops-demo" not in running.content.decode() and "taskmq-state-running" in running.content.decode()
    everything = admin_client.get(JOBS).content.decode()
    assert everything.count("reserved by ops-demo, not started") == 4 and "taskmq-state-queued" in everything


def test_qinfo_text_and_json(held):
    out = io.StringIO()
    call_command("qinfo", stdout=out)
    (row,) = [line.split() for line in out.getvalue().splitlines() if line.startswith("emails ")]
    assert row[:7] == ["emails", "1", "0", "0", "1", "4", "0"]  # ready, delayed, retrying, running, reserved, dead
    out = io.StringIO()
    call_command("qinfo", "--json", stdout=out)
    emails = next(q for q in json.loads(out.getvalue())["queues"] if q["queue"] == "emails")
    assert (emails["running"], emails["reserved"]) == (1, 4)


def test_qmonitor_shows_both(held, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    out = io.StringIO()
    call_command("qmonitor", "--once", stdout=out)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if "reserved" in line and "running" in line)
    names = [cell.strip() for cell in header.strip("┃│ ").replace("┃", "│").split("│")]
    (row,) = [line for line in lines if line.strip("┃│ ").startswith("emails")]
    cells = [cell.strip() for cell in row.strip("┃│ ").split("│")]
    assert (cells[names.index("running")], cells[names.index("reserved")]) == ("1", "4")


def test_metrics_label_reserved_apart(client, held, taskmq_settings):
    from tests.api.test_metrics import TOKEN, samples

    taskmq_settings(metrics_token=TOKEN)
    found = samples(client.get("/taskmq/metrics/", headers={"Authorization": f"Bearer {TOKEN}"}))
    assert found["taskmq_jobs", (("queue", "emails"), ("state", "running"))] == 1
    assert found["taskmq_jobs", (("queue", "emails"), ("state", "reserved"))] == 4
    assert found["taskmq_jobs", (("queue", "emails"), ("state", "queued"))] == 1
