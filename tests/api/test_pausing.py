"""pause_queue / resume_queue / paused_queues, and their admin: the confirmation pages on the
dashboard's links, the LogEntry of each, the permissions, and what qinfo and the dashboard show."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command

from django_taskmq import ConfigError, async_task, pause_queue, paused_queues, resume_queue
from django_taskmq.models import Job, QueuePause

pytestmark = pytest.mark.django_db

DASHBOARD = "/admin/django_taskmq/dashboard/"
PAUSE = "/admin/django_taskmq/queuepause/pause/"
RESUME = "/admin/django_taskmq/queuepause/resume/"


def test_pause_and_resume(broker):
    assert pause_queue("a", by="ops") is True
    assert pause_queue("a") is False  # already paused
    assert paused_queues() == frozenset({"a"})
    assert QueuePause.objects.get(queue="a").paused_by == "ops"
    job_id = async_task("tests.tasks.noop", queue="a")  # enqueues still succeed
    assert Job.objects.get(pk=job_id).state == "QUEUED"
    assert resume_queue("a") is True
    assert resume_queue("a") is False
    assert paused_queues() == frozenset()


def test_an_unknown_queue_is_refused(broker):
    with pytest.raises(ConfigError, match="unknown queue 'nope'"):
        pause_queue("nope")
    with pytest.raises(ConfigError, match="unknown queue"):
        resume_queue("nope")
    assert not QueuePause.objects.exists()


def test_qinfo_and_the_dashboard_show_it(admin_client, broker, capsys):
    pause_queue("emails")
    call_command("qinfo")
    assert "paused queues (no cluster claims from them): emails" in capsys.readouterr().out
    page = admin_client.get(DASHBOARD).content.decode()
    assert "paused" in page and f"{RESUME}?queue=emails" in page and f"{PAUSE}?queue=a" in page


def test_the_admin_pauses_and_resumes_after_confirming_and_logs_both(admin_client, broker):
    confirm = admin_client.get(f"{PAUSE}?queue=a")
    assert confirm.status_code == 200 and b"Pause a queue" in confirm.content
    assert not QueuePause.objects.exists()  # nothing before "Yes"
    done = admin_client.post(PAUSE, {"post": "yes", "queue": "a"})
    assert done.status_code == 302
    assert paused_queues() == frozenset({"a"})
    assert LogEntry.objects.filter(object_repr="a", action_flag=ADDITION, change_message="Paused").count() == 1

    assert admin_client.get(f"{RESUME}?queue=a").status_code == 200
    assert paused_queues() == frozenset({"a"})
    assert admin_client.post(f"{RESUME}?queue=a", {"post": "yes"}).status_code == 302
    assert paused_queues() == frozenset()
    assert LogEntry.objects.filter(object_repr="a", action_flag=DELETION, change_message="Resumed").count() == 1


def test_pausing_needs_its_permissions(client, broker):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "view_queuepause"]))
    client.force_login(user)
    assert client.get(f"{PAUSE}?queue=a").status_code == 403
    assert client.post(PAUSE, {"post": "yes", "queue": "a"}).status_code == 403
    pause_queue("a")
    assert client.post(f"{RESUME}?queue=a", {"post": "yes"}).status_code == 403
    assert paused_queues() == frozenset({"a"})
