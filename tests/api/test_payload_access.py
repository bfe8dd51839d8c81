"""Who sees a job's arguments and result in the admin: ``view_job_payload``. Without it the job,
dead-letter and workflow pages say that there are arguments, not what they are; with it they
show them decrypted (redacted names still masked) and log who saw an encrypted payload."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

from django_taskmq import Workflow, async_task
from django_taskmq.admin.payload_access import VIEWED
from django_taskmq.api import run_sync
from django_taskmq.encryption import generate_key
from django_taskmq.models import DeadLetter, Job

pytestmark = pytest.mark.django_db

MARKER = "marker-a93b7d"
KEY = generate_key()
VIEWING = ["view_job", "view_deadletter", "view_workflow"]


@pytest.fixture
def encrypted(settings, broker):
    settings.TASKMQ = {**settings.TASKMQ, "encryption_keys": [KEY]}


def staff(client, *codenames: str) -> User:
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="django_taskmq",
                                                        codename__in=codenames))
    client.force_login(user)
    return user


def pages(job_id: str) -> dict[str, str]:
    letter = DeadLetter.objects.filter(job_id=job_id).first()
    found = {"job": f"/admin/django_taskmq/job/{job_id}/change/"}
    if letter is not None:
        found["dead letter"] = f"/admin/django_taskmq/deadletter/{letter.pk}/change/"
    return found


def dead_job(**options) -> str:
    job_id = async_task("tests.tasks.fail", MARKER, max_deliveries=1, **options)
    run_sync(job_id)
    assert Job.objects.get(pk=job_id).state == "DEAD"
    return job_id


@pytest.mark.parametrize("encrypt", [True, None])
def test_without_the_permission_no_page_shows_the_arguments_or_the_result(client, encrypted, encrypt):
    done = async_task("tests.tasks.echo", MARKER, email=MARKER, encrypt=encrypt)
    run_sync(done)
    dead = dead_job(encrypt=encrypt)
    flow = Workflow(name="flow")
    flow.add("tests.tasks.echo", MARKER, name="step", q_options={"encrypt": encrypt})
    flow.enqueue()
    staff(client, *VIEWING)
    urls = {**pages(done), **{f"{k} (dead)": v for k, v in pages(dead).items()},
            "workflow": f"/admin/django_taskmq/workflow/{flow.id}/change/"}
    for what, url in urls.items():
        response = client.get(url)
        assert response.status_code == 200, what
        text = response.content.decode()
        # The dead job's error is the task's own message ("TaskFailed: <marker>"): drop that block.
        if "dead" in what:
            text = text.replace(f"TaskFailed: {MARKER}", "")
        assert MARKER not in text, what
        if what != "workflow":
            assert "viewing arguments and results needs the permission" in text, what
    assert not LogEntry.objects.exists()


def test_with_the_permission_the_pages_show_the_decrypted_payload_and_log_who_saw_it(client, encrypted):
    done = async_task("tests.tasks.echo", MARKER, email=MARKER, encrypt=True)
    run_sync(done)
    dead = dead_job(encrypt=True)
    plain = async_task("tests.tasks.echo", MARKER)
    user = staff(client, *VIEWING, "view_job_payload")
    for job_id in (done, dead):
        for what, url in pages(job_id).items():
            text = client.get(url).content.decode()
            assert text.count(MARKER) >= (4 if what == "job" and job_id == done else 1), (what, job_id)
    assert MARKER in client.get(pages(plain)["job"]).content.decode()
    seen = LogEntry.objects.filter(user=user, change_message=VIEWED)
    # One entry per page that showed an encrypted payload; the plain job's page logs nothing.
    assert sorted(seen.values_list("object_id", flat=True)) == sorted([done, dead, dead])


def test_redacted_names_are_masked_even_for_those_who_may_see_payloads(client, broker):
    job_id = async_task("tests.tasks.echo", MARKER, password="hunter2", options={"api_key": "k-hunter2"})
    run_sync(job_id)
    staff(client, *VIEWING, "view_job_payload")
    text = client.get(pages(job_id)["job"]).content.decode()
    assert MARKER in text and "hunter2" not in text
    assert "‹redacted›" in text


def test_a_job_whose_key_is_gone_shows_why_not_its_arguments(client, settings, encrypted):
    job_id = async_task("tests.tasks.echo", MARKER, encrypt=True)
    settings.TASKMQ = {**settings.TASKMQ, "encryption_keys": [generate_key()]}
    staff(client, *VIEWING, "view_job_payload")
    text = client.get(pages(job_id)["job"]).content.decode()
    assert "unreadable package: encrypted with key id" in text and MARKER not in text


def test_replay_retry_and_cancel_need_their_own_permissions_not_the_payload(client, encrypted):
    dead = dead_job(encrypt=True)
    failed = async_task("tests.tasks.fail", MARKER, encrypt=True, ack_failure=True)
    run_sync(failed)
    queued = async_task("tests.tasks.echo", MARKER, encrypt=True)
    staff(client, *VIEWING, "delete_deadletter", "change_job", "delete_job")
    letter = DeadLetter.objects.get(job_id=dead)
    posts = [("/admin/django_taskmq/deadletter/", "replay", letter.pk),
             ("/admin/django_taskmq/job/", "retry_jobs", failed), ("/admin/django_taskmq/job/", "cancel_jobs", queued)]
    for url, action, pk in posts:
        for confirm in ({}, {"post": "yes"}):  # the confirmation page, then its "Yes"
            response = client.post(url, {"action": action, "_selected_action": [pk], **confirm}, follow=True)
            assert response.status_code == 200
            assert MARKER not in response.content.decode().replace(f"TaskFailed: {MARKER}", ""), action
    assert [Job.objects.get(pk=pk).state for pk in (dead, failed, queued)] == ["QUEUED", "QUEUED", "CANCELLED"]
    assert not LogEntry.objects.filter(change_message=VIEWED).exists()
