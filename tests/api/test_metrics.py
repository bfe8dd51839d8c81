"""The Prometheus endpoint (``taskmq/metrics/``): who may read it, and what it says."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_taskmq import async_task
from django_taskmq.api import run_sync
from django_taskmq.models import Cluster

pytestmark = pytest.mark.django_db

URL = "/taskmq/metrics/"
TOKEN = "s3cret-token-of-sixteen+chars"


def samples(response) -> dict[tuple[str, tuple], float]:
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.fixture
def token(taskmq_settings):
    taskmq_settings(metrics_token=TOKEN)


def test_anyone_else_gets_403(client, broker, token):
    assert client.get(URL).status_code == 403
    assert client.get(URL, headers={"Authorization": "Bearer wrong-token-but-long-enough"}).status_code == 403
    assert client.get(URL, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 403
    client.force_login(User.objects.create_user("user", password="pw"))  # logged in, not staff
    assert client.get(URL).status_code == 403


def test_no_token_configured_means_no_token_works(client, broker):
    assert client.get(URL, headers={"Authorization": "Bearer "}).status_code == 403


def test_a_staff_session_or_the_bearer_token_reads_them(client, broker, token):
    assert client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
    assert client.get(URL).status_code == 200


def test_the_token_setting_is_checked(taskmq_settings):
    from django_taskmq import ConfigError
    from django_taskmq.conf import from_mapping

    with pytest.raises(ConfigError, match="metrics_token"):
        from_mapping({"metrics_token": "short"})
    assert from_mapping({"metrics_token": TOKEN}).metrics_token == TOKEN


def test_gauges_and_counters(client, broker, token):
    async_task("tests.tasks.noop", queue="emails", priority=5)
    async_task("tests.tasks.noop", queue="emails", delay=600)
    dead = async_task("tests.tasks.fail", queue="reports", max_deliveries=1)
    run_sync(dead)
    run_sync(async_task("tests.tasks.noop", queue="a"))
    now = timezone.now()
    Cluster.objects.create(id="c1", name="web", host="h1", pid=1, state="running", workers=4, beat_at=now,
                           counts={"succeeded": 5, "clock_skew": 120.5, "queues": {"emails": {"succeeded": 5, "failed": 2, "timeouts": 1,
                                                                         "crashes": 0}}})
    Cluster.objects.create(id="c0", name="web", host="h1", pid=0, state="stopped", workers=4,
                           beat_at=now - datetime.timedelta(hours=1),
                           counts={"queues": {"emails": {"succeeded": 10, "failed": 0, "timeouts": 0, "crashes": 1}}})
    found = samples(client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}))

    def value(name: str, **labels: str) -> float:
        return found[name, tuple(sorted(labels.items()))]

    assert value("taskmq_jobs", queue="emails", state="queued") == 2
    assert value("taskmq_jobs", queue="reports", state="dead") == 1
    assert value("taskmq_jobs", queue="b", state="running") == 0  # every configured queue, every state
    assert ("taskmq_jobs", (("queue", "a"), ("state", "succeeded"))) not in found
    assert value("taskmq_ready_jobs", queue="emails") == 1
    assert value("taskmq_delayed_jobs", queue="emails") == 1
    assert value("taskmq_dead_letters_waiting", queue="reports") == 1
    assert value("taskmq_dead_letters_waiting", queue="emails") == 0
    assert 0 <= value("taskmq_oldest_ready_age_seconds", queue="emails") < 60
    assert value("taskmq_oldest_ready_age_seconds", queue="a") == 0
    assert value("taskmq_clusters_alive") == 1 and value("taskmq_workers_alive") == 4
    assert value("taskmq_clock_skew_seconds", cluster="c1", host="h1") == 120.5  # the live cluster's only
    assert [key for key in found if key[0] == "taskmq_clock_skew_seconds"] == [
        ("taskmq_clock_skew_seconds", (("cluster", "c1"), ("host", "h1")))]
    # Counters: summed over every heartbeat row, the stopped cluster's last counts included.
    assert value("taskmq_jobs_finished_total", queue="emails", outcome="succeeded") == 15
    assert value("taskmq_jobs_finished_total", queue="emails", outcome="failed") == 2
    assert value("taskmq_jobs_finished_total", queue="emails", outcome="timeout") == 1
    assert value("taskmq_jobs_finished_total", queue="emails", outcome="crash") == 1


def test_metrics_url_is_named(client):
    from django.urls import reverse

    assert reverse("django_taskmq:metrics") == URL


def test_sleeping_and_waiting_durable_jobs_are_gauged(client, broker, token):
    from tests.api.test_durable import run

    run(broker, async_task("tests.cluster.tasks_durable.sleeper", 600))
    run(broker, async_task("tests.cluster.tasks_durable.approval"))
    run(broker, async_task("tests.cluster.tasks_durable.approval", 600))
    found = samples(client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}))
    assert found["taskmq_suspended_jobs", (("kind", "sleep"),)] == 1
    assert found["taskmq_suspended_jobs", (("kind", "wait"),)] == 2
