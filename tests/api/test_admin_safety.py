"""Admin safety: no page unpickles an unverified row, lists load neither payload nor result, every
change goes through the broker with the right permissions, and a replay that changes nothing says so."""

from __future__ import annotations

import base64
import pickle

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_taskmq import async_task
from django_taskmq.api import run_sync
from django_taskmq.models import DeadLetter, Job, State
from tests.contract.helpers import ack
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db

JOBS = "/admin/django_taskmq/job/"
LETTERS = "/admin/django_taskmq/deadletter/"


class RunsOnUnpickle:
    def __reduce__(self):
        from tests.tasks import record_run

        return record_run, ("unpickled",)


def forge_result(job_id: str) -> None:
    forged = base64.b64encode(pickle.dumps(RunsOnUnpickle())).decode()
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Job._meta.db_table} SET result_package = %s WHERE id = %s", [forged, job_id])


def dead_job(broker) -> str:
    job_id = async_task("tests.tasks.fail", max_deliveries=1)
    run_sync(job_id)
    assert Job.objects.get(pk=job_id).state == State.DEAD
    return job_id


def staff(*codenames: str) -> User:
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="django_taskmq", codename__in=codenames))
    return user


def action_names(response) -> set[str]:
    return {name for name, _ in response.context["action_form"].fields["action"].choices if name}


@pytest.fixture
def forged(broker, run_log):
    """A succeeded job and a dead job, both with a forged pickled result written by raw SQL."""
    ok = async_task("tests.tasks.add", 1, 2)
    run_sync(ok)
    dead = dead_job(broker)
    for job_id in (ok, dead):
        forge_result(job_id)
    return ok, dead


def test_no_admin_page_loads_a_forged_result(client, forged, run_log):
    ok, dead = forged
    letter = DeadLetter.objects.get(job_id=dead)
    client.force_login(staff("view_job", "view_deadletter"))  # a staff user who may only look
    for url in (JOBS, f"{JOBS}{ok}/change/", f"{JOBS}{dead}/change/", LETTERS, f"{LETTERS}{letter.pk}/change/"):
        response = client.get(url)
        assert response.status_code == 200, url
    page = client.get(f"{JOBS}{ok}/change/").content.decode()
    assert "unreadable result: bad signature" in page
    assert read_run_log(run_log) == []


def test_job_page_shows_the_verified_result_and_never_the_package(admin_client, broker):
    job_id = async_task("tests.tasks.add", 20, 22)
    run_sync(job_id)
    job = Job.objects.get(pk=job_id)
    page = admin_client.get(f"{JOBS}{job_id}/change/").content.decode()
    assert "42" in page
    assert job.payload.rsplit(":", 1)[1] not in page  # the package's signature
    assert job.result_package.rsplit(":", 1)[1] not in page


@pytest.mark.parametrize("url", [JOBS, LETTERS])
def test_list_pages_load_neither_payload_nor_result(admin_client, broker, url):
    dead_job(broker)
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(url).status_code == 200
    job_reads = [q["sql"] for q in queries if "django_taskmq_job" in q["sql"] and q["sql"].lstrip().startswith("SELECT")]
    assert job_reads
    for sql in job_reads:
        assert "payload" not in sql and "result_package" not in sql and "traceback" not in sql, sql


def test_jobs_offer_no_delete_selected(admin_client, broker):
    async_task("tests.tasks.noop")
    assert action_names(admin_client.get(JOBS)) == {"retry_jobs", "cancel_jobs"}  # retry: through the broker too


def test_cancel_goes_through_the_broker_and_asks_running_jobs_to_stop(admin_client, broker):
    queued = async_task("tests.tasks.noop")
    running = async_task("tests.tasks.noop", priority=9)
    finished = async_task("tests.tasks.noop", priority=8)
    (r,) = broker.reserve(["default"], limit=1, lease=300, owner="t")
    assert r.job_id == running
    (f,) = broker.reserve(["default"], limit=1, lease=300, owner="t")
    ack(broker, f)
    selected = [queued, running, finished]
    # The action's first POST shows its confirmation page and changes nothing.
    page = admin_client.post(JOBS, {"action": "cancel_jobs", "_selected_action": selected})
    assert page.status_code == 200 and "Yes, cancel" in page.content.decode()
    assert Job.objects.get(pk=queued).state == State.QUEUED
    response = admin_client.post(JOBS, {"action": "cancel_jobs", "_selected_action": selected, "post": "yes"},
                                 follow=True)
    text = [str(m) for m in response.context["messages"]]
    assert "1 job cancelled." in text
    assert any("1 running job was asked to stop" in m for m in text)
    assert any("1 job was not cancelled: it had finished." in m for m in text)
    assert Job.objects.get(pk=queued).state == State.CANCELLED
    # The running job runs on until its cluster sees the request (tests/cluster/test_cancel.py).
    job = Job.objects.get(pk=running)
    assert (job.state, job.cancel_requested_at is not None) == (State.RUNNING, True)
    assert broker.cancel_requested([running, queued, finished]) == [running]
    assert Job.objects.get(pk=finished).state == State.SUCCEEDED


def test_purge_needs_the_delete_permission_on_jobs(client, broker):
    dead = dead_job(broker)
    letter = DeadLetter.objects.get(job_id=dead)
    client.force_login(staff("view_job", "view_deadletter", "delete_deadletter"))
    assert "purge" not in action_names(client.get(LETTERS))
    client.post(LETTERS, {"action": "purge", "_selected_action": [letter.pk], "post": "yes"})
    assert Job.objects.filter(pk=dead).exists() and DeadLetter.objects.filter(pk=letter.pk).exists()


def test_purge_with_both_permissions_deletes_letter_and_job(client, broker):
    dead = dead_job(broker)
    letter = DeadLetter.objects.get(job_id=dead)
    client.force_login(staff("view_job", "view_deadletter", "delete_deadletter", "delete_job"))
    assert "purge" in action_names(client.get(LETTERS))
    client.post(LETTERS, {"action": "purge", "_selected_action": [letter.pk]})  # the confirmation page
    assert Job.objects.filter(pk=dead).exists() and DeadLetter.objects.filter(pk=letter.pk).exists()
    client.post(LETTERS, {"action": "purge", "_selected_action": [letter.pk], "post": "yes"})
    assert not Job.objects.filter(pk=dead).exists() and not DeadLetter.objects.filter(pk=letter.pk).exists()


def test_replay_that_changes_nothing_says_so(admin_client, broker):
    """A letter whose job is no longer dead (replayed from code and running again) is skipped."""
    dead = dead_job(broker)
    letter = DeadLetter.objects.get(job_id=dead)
    Job.objects.filter(pk=dead).update(state=State.SUCCEEDED)  # e.g. re-run by other means
    response = admin_client.post(LETTERS, {"action": "replay", "_selected_action": [letter.pk], "post": "yes"},
                                 follow=True)
    text = [str(m) for m in response.context["messages"]]
    assert not any("replayed." in m for m in text)
    assert any("not replayed" in m and "no longer dead" in m for m in text)
    letter.refresh_from_db()
    assert letter.replayed_at is None
    assert Job.objects.get(pk=dead).state == State.SUCCEEDED


def test_replay_requeues_a_dead_job(admin_client, broker):
    dead = dead_job(broker)
    letter = DeadLetter.objects.get(job_id=dead)
    page = admin_client.post(LETTERS, {"action": "replay", "_selected_action": [letter.pk]})  # the confirmation page
    assert page.status_code == 200 and Job.objects.get(pk=dead).state == State.DEAD
    response = admin_client.post(LETTERS, {"action": "replay", "_selected_action": [letter.pk], "post": "yes"},
                                 follow=True)
    assert "1 job replayed." in [str(m) for m in response.context["messages"]]
    assert Job.objects.get(pk=dead).state == State.QUEUED
