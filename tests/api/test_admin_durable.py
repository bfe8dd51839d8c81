"""The admin and durable jobs: the job page lists the steps, sleeps and waits (values verified), and
a form sends a signal, for users with ``change job`` only, each one logged."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from django_taskmq import async_task
from django_taskmq.models import Job, JobSignal, State
from tests.api.test_admin_permissions import login
from tests.api.test_durable import run

pytestmark = pytest.mark.django_db
JOBS = "/admin/django_taskmq/job/"
TASKS = "tests.cluster.tasks_durable"


@pytest.fixture
def waiting(broker):
    job_id = async_task(f"{TASKS}.approval")
    assert run(broker, job_id).state == State.SUSPENDED
    return job_id


def test_the_job_page_lists_steps_and_what_the_job_waits_for(client, waiting):
    login(client, "view")
    page = client.get(f"{JOBS}{waiting}/change/").content.decode()
    assert "Steps, sleeps and waits" in page
    assert "asked" in page and "#wait:approved:1" in page
    assert "waits for the signal &#x27;approved&#x27;" in page
    assert f"{JOBS}{waiting}/signal/" in page


def test_a_user_without_change_job_cannot_send_a_signal(client, waiting):
    login(client, "view")
    assert client.get(f"{JOBS}{waiting}/signal/").status_code == 403
    response = client.post(f"{JOBS}{waiting}/signal/", {"post": "yes", "signal_name": "approved", "payload": "1"})
    assert response.status_code == 403
    assert not JobSignal.objects.exists() and not LogEntry.objects.exists()


def test_the_signal_form_sends_the_signal_and_logs_it(client, broker, waiting):
    user = login(client, "change")
    form = client.get(f"{JOBS}{waiting}/signal/")
    assert form.status_code == 200 and "signal_name" in form.content.decode()
    response = client.post(f"{JOBS}{waiting}/signal/",
                           {"post": "yes", "signal_name": "approved", "payload": '{"by": "admin"}'})
    assert response.status_code == 302 and response["Location"] == f"{JOBS}{waiting}/change/"
    assert Job.objects.get(pk=waiting).visible_at <= broker.now()  # it woke
    (entry,) = LogEntry.objects.all()
    assert (entry.user_id, entry.object_id, entry.change_message) == (user.pk, waiting, "Sent the signal 'approved'")
    job = run(broker, waiting)
    assert (job.state, job.result) == (State.SUCCEEDED, {"by": "admin"})


def test_a_signal_to_a_finished_job_says_why_and_changes_nothing(client, broker, waiting):
    Job.objects.filter(pk=waiting).update(state=State.CANCELLED)
    login(client, "change")
    response = client.post(f"{JOBS}{waiting}/signal/", {"post": "yes", "signal_name": "approved"}, follow=True)
    assert "has ended" in response.content.decode()
    assert not JobSignal.objects.exists() and not LogEntry.objects.exists()


def test_step_values_are_shown_only_with_view_job_payload(client, broker, settings):
    from django.contrib.auth.models import Permission, User

    from django_taskmq import send_signal
    from django_taskmq.admin.payload_access import VIEWED
    from django_taskmq.encryption import generate_key

    settings.TASKMQ = {**settings.TASKMQ, "encryption_keys": [generate_key()]}
    job_id = async_task(f"{TASKS}.approval", encrypt=True)
    send_signal(job_id, "approved", "marker-7c1d")
    assert run(broker, job_id).state == State.SUCCEEDED
    login(client, "view")
    page = client.get(f"{JOBS}{job_id}/change/").content.decode()
    assert "marker-7c1d" not in page and "an encrypted value, not shown" in page
    user = User.objects.create_user("payload", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_job", "view_job_payload"]))
    client.force_login(user)
    page = client.get(f"{JOBS}{job_id}/change/").content.decode()
    assert "marker-7c1d" in page
    assert LogEntry.objects.filter(user=user, object_id=job_id, change_message=VIEWED).count() == 1
