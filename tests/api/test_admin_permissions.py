"""The admin's permission matrix: a view-only staff user sees every page and can do nothing; the
change, delete and superuser profiles get exactly the actions their permissions allow, and a
forbidden POST changes nothing."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

from django_taskmq import async_task
from django_taskmq.api import run_sync
from django_taskmq.models import DeadLetter, Job, Schedule, State

pytestmark = pytest.mark.django_db

JOBS = "/admin/django_taskmq/job/"
LETTERS = "/admin/django_taskmq/deadletter/"
SCHEDULES = "/admin/django_taskmq/schedule/"
DASHBOARD = "/admin/django_taskmq/dashboard/"
MODELS = ("job", "deadletter", "schedule", "cluster")

PROFILES = {
    "view": [f"view_{m}" for m in MODELS],
    "change": [f"view_{m}" for m in MODELS] + ["change_job", "change_deadletter", "change_schedule"],
    "delete": [f"view_{m}" for m in MODELS] + ["delete_job", "delete_deadletter", "delete_schedule"],
    "superuser": None,
}
# The actions each profile is offered, per list.
ACTIONS = {
    "view": {JOBS: set(), LETTERS: set(), SCHEDULES: set()},
    "change": {JOBS: {"retry_jobs"}, LETTERS: set(), SCHEDULES: {"pause", "resume"}},
    "delete": {JOBS: {"cancel_jobs"}, LETTERS: {"replay", "purge"}, SCHEDULES: {"delete_selected"}},
    "superuser": {JOBS: {"retry_jobs", "cancel_jobs"}, LETTERS: {"replay", "purge"},
                  SCHEDULES: {"pause", "resume", "delete_selected"}},
}


def login(client, profile: str) -> User:
    if PROFILES[profile] is None:
        user = User.objects.create_superuser("root", password="pw")
    else:
        user = User.objects.create_user(profile, password="pw", is_staff=True)
        user.user_permissions.set(Permission.objects.filter(content_type__app_label="django_taskmq",
                                                            codename__in=PROFILES[profile]))
    client.force_login(user)
    return user


def action_names(response) -> set[str]:
    form = response.context.get("action_form") if response.context else None
    if form is None:
        return set()
    return {name for name, _ in form.fields["action"].choices if name}


@pytest.fixture
def rows(broker):
    """A dead job and its letter, a queued job, a schedule."""
    dead = async_task("tests.tasks.fail", max_deliveries=1)
    run_sync(dead)
    queued = async_task("tests.tasks.noop")
    schedule = Schedule.objects.create(name="s", func="tests.tasks.noop", schedule_type="C", cron="* * * * *")
    return {"dead": dead, "letter": DeadLetter.objects.get(job_id=dead).pk, "queued": queued, "schedule": schedule.pk}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_profile_sees_every_page(client, rows, profile):
    login(client, profile)
    pages = [JOBS, f"{JOBS}{rows['dead']}/change/", LETTERS, f"{LETTERS}{rows['letter']}/change/", SCHEDULES,
             f"{SCHEDULES}{rows['schedule']}/change/", "/admin/django_taskmq/cluster/", DASHBOARD,
             "/admin/django_taskmq/"]
    for url in pages:
        assert client.get(url).status_code == 200, (profile, url)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_profile_is_offered_exactly_its_actions(client, rows, profile):
    login(client, profile)
    for url, expected in ACTIONS[profile].items():
        assert action_names(client.get(url)) == expected, (profile, url)


@pytest.mark.parametrize("profile", ["view", "change", "delete"])
def test_forbidden_action_posts_change_nothing(client, rows, profile):
    login(client, profile)
    allowed = ACTIONS[profile]
    posts = [
        (JOBS, "retry_jobs", rows["dead"]), (JOBS, "cancel_jobs", rows["queued"]),
        (LETTERS, "replay", rows["letter"]), (LETTERS, "purge", rows["letter"]),
        (SCHEDULES, "pause", rows["schedule"]),
    ]
    for url, action, pk in posts:
        if action in allowed[url]:
            continue
        client.post(url, {"action": action, "_selected_action": [pk], "post": "yes"})
    states = {"dead": Job.objects.get(pk=rows["dead"]).state, "queued": Job.objects.get(pk=rows["queued"]).state}
    if "retry_jobs" not in allowed[JOBS] and "replay" not in allowed[LETTERS]:
        assert states["dead"] == State.DEAD
    if "cancel_jobs" not in allowed[JOBS]:
        assert states["queued"] == State.QUEUED
    if "purge" not in allowed[LETTERS]:
        assert DeadLetter.objects.filter(pk=rows["letter"]).exists()
    if "pause" not in allowed[SCHEDULES]:
        assert not Schedule.objects.get(pk=rows["schedule"]).paused
    if profile == "view":
        assert not LogEntry.objects.exists()


def test_view_only_cannot_reach_the_action_pages_of_their_own(client, rows):
    login(client, "view")
    assert client.get(f"{LETTERS}replay-all/").status_code == 403
    assert client.post(f"{LETTERS}replay-all/", {"queue": "default", "post": "yes"}).status_code == 403
    assert client.post(f"{LETTERS}{rows['letter']}/replay/", {"post": "yes"}).status_code == 403
    assert 'id="taskmq-replay"' not in client.get(f"{LETTERS}{rows['letter']}/change/").content.decode()
    assert client.get(f"{SCHEDULES}{rows['schedule']}/pause/").status_code == 403
    assert client.post(f"{SCHEDULES}{rows['schedule']}/pause/", {"post": "yes"}).status_code == 403
    assert client.get(f"{SCHEDULES}add/").status_code == 403
    assert Job.objects.get(pk=rows["dead"]).state == State.DEAD and not Schedule.objects.get().paused


def test_the_allowed_profiles_reach_them(client, rows):
    login(client, "delete")
    assert client.get(f"{LETTERS}replay-all/").status_code == 200
    assert client.get(f"{LETTERS}{rows['letter']}/replay/").status_code == 200
    client.logout()
    login(client, "change")
    assert client.get(f"{SCHEDULES}{rows['schedule']}/pause/").status_code == 200
    client.post(f"{SCHEDULES}{rows['schedule']}/pause/", {"post": "yes"})
    assert Schedule.objects.get().paused


def test_actions_need_csrf(rows):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    login(client, "superuser")
    response = client.post(JOBS, {"action": "retry_jobs", "_selected_action": [rows["dead"]], "post": "yes"})
    assert response.status_code == 403
    assert client.post(f"{SCHEDULES}{rows['schedule']}/pause/", {"post": "yes"}).status_code == 403
    assert Job.objects.get(pk=rows["dead"]).state == State.DEAD and not Schedule.objects.get().paused


def test_dashboard_needs_staff_and_the_view_permission_on_jobs(client, rows):
    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(DASHBOARD).status_code == 403
    assert DASHBOARD not in client.get("/admin/").content.decode()
    user.is_staff = False
    user.save()
    assert client.get(DASHBOARD).status_code == 302  # to the login page
