"""The operator's admin pages through the test client: job list and page, retry and cancel, the
dead-letter list with replay (into another queue and priority), replay-all and purge, schedules
(form checks, next runs, pause and resume), and the dashboard. Every action confirms first and
leaves a LogEntry."""

from __future__ import annotations

import datetime
import re

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_taskmq import async_chain, async_task
from django_taskmq.api import run_sync
from django_taskmq.models import Cluster, DeadLetter, Job, Schedule, State, WorkflowStep

pytestmark = pytest.mark.django_db

JOBS = "/admin/django_taskmq/job/"
LETTERS = "/admin/django_taskmq/deadletter/"
SCHEDULES = "/admin/django_taskmq/schedule/"
DASHBOARD = "/admin/django_taskmq/dashboard/"


def dead_job(**options) -> str:
    job_id = async_task("tests.tasks.fail", "kaput", max_deliveries=1, **options)
    run_sync(job_id)
    assert Job.objects.get(pk=job_id).state == State.DEAD
    return job_id


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def text(response) -> str:
    return response.content.decode()


# -- jobs ------------------------------------------------------------------------------------------

def test_job_list_shows_the_columns_and_filters(admin_client, broker):
    done = async_task("tests.tasks.add", 1, 2, queue="emails", priority=5, group="batch-7", key="k-1")
    run_sync(done)
    Cluster.objects.create(id="web:h:1:x", name="web", host="h", pid=1, state="running")  # the cluster filter's choice
    page = text(admin_client.get(JOBS))
    for column in ("task name", "queue", "priority", "state", "deliveries", "attempts", "enqueued", "started",
                   "finished", "run time"):
        assert column in page.lower(), column
    assert "taskmq-state-succeeded" in page  # the coloured state
    for title in ("By state", "By queue", "By priority", "By cluster", "By group"):
        assert title in page, title
    assert "Dashboard" in page  # linked from the list


@pytest.mark.parametrize("query, field", [("state=SUCCEEDED", None), ("queue=emails", None), ("priority=5", None),
                                          ("group=batch-7", None), ("q=k-1", "key"), ("q=batch-7", "group"),
                                          ("q=tasks.add", "task"), ("q={id}", "id")])
def test_job_filters_and_search_find_the_job(admin_client, broker, query, field):
    done = async_task("tests.tasks.add", 1, 2, queue="emails", priority=5, group="batch-7", key="k-1")
    other = async_task("tests.tasks.noop")
    run_sync(done)
    response = admin_client.get(f"{JOBS}?{query.format(id=done)}")
    ids = [row.pk for row in response.context["cl"].result_list]
    assert ids == [done] and other not in ids


def test_job_list_filters_by_cluster_label(admin_client, broker):
    job_id = async_task("tests.tasks.noop")
    broker.reserve(["default"], 1, 60, "web-7:host:1:abc", cluster="web-7")
    Cluster.objects.create(id="web-7:host:1:abc", name="web-7", host="host", pid=1, state="running")
    response = admin_client.get(f"{JOBS}?cluster=web-7")
    assert [row.pk for row in response.context["cl"].result_list] == [job_id]


def test_job_page_is_written_for_people(admin_client, broker):
    job_id = async_task("tests.tasks.echo", "a" * 5000, 42, flag=True, group="g1")
    run_sync(job_id)
    page = text(admin_client.get(f"{JOBS}{job_id}/change/"))
    assert "[1] 42" in page and "flag = True" in page  # the arguments, readably
    assert "a" * 5000 not in page and "…" in page  # long values shortened
    for label in ("enqueued", "started", "finished", "run time", "deliveries", "1 of 5", "executions started",
                  "yields", "0 of 100"):
        assert label in page, label
    assert "?group=g1" in page and "1 job" in page  # the group, linked
    assert "taskmq-state-succeeded" in page


def test_job_page_shows_error_traceback_lease_and_dead_letters(admin_client, broker):
    dead = dead_job()
    page = text(admin_client.get(f"{JOBS}{dead}/change/"))
    assert "TaskFailed: kaput" in page and "Traceback (most recent call last)" in page
    assert "font-family: monospace" in page
    letter = DeadLetter.objects.get(job_id=dead)
    assert f"/admin/django_taskmq/deadletter/{letter.pk}/change/" in page
    running = async_task("tests.tasks.noop")
    broker.reserve(["default"], 1, 300, "c1:host:9:x")
    page = text(admin_client.get(f"{JOBS}{running}/change/"))
    assert "held by" in page and "c1:host:9:x" in page and "lease until" in page


def test_job_page_lists_each_failed_execution_with_its_traceback(admin_client, broker):
    """Three failed executions, then dead: the page lists the three, oldest first, each with its
    error and its traceback folded; a job that never failed shows none."""
    job_id = async_task("tests.tasks.fail", "kaput", max_deliveries=3)
    for _ in range(3):
        run_sync(job_id)
    assert Job.objects.get(pk=job_id).state == State.DEAD
    page = text(admin_client.get(f"{JOBS}{job_id}/change/"))
    listed = re.findall(r"<li>execution (\d+), started [^:]+:[^<]*TaskFailed: kaput<details>", page)
    assert listed == ["1", "2", "3"], page[page.find("failed executions"):][:2000]
    assert page.count("<summary>traceback</summary>") == 3
    fine = async_task("tests.tasks.noop")
    run_sync(fine)
    page = text(admin_client.get(f"{JOBS}{fine}/change/"))
    assert "failed executions" in page.lower() and "<summary>traceback</summary>" not in page


def test_job_page_of_a_forged_package_says_so(admin_client, broker, run_log):
    job_id = async_task("tests.tasks.noop", 1)
    Job.objects.filter(pk=job_id).update(payload="forged:package")
    response = admin_client.get(f"{JOBS}{job_id}/change/")
    assert response.status_code == 200
    assert "unreadable package: bad signature" in text(response)


def test_a_chain_links_page_links_its_workflow_and_the_next_link_waits(admin_client, broker):
    first = async_chain([("tests.tasks.add", (1, 2)), ("tests.tasks.noop", (3,))])
    step = WorkflowStep.objects.get(job_id=first)
    page = text(admin_client.get(f"{JOBS}{first}/change/"))
    assert f"/admin/django_taskmq/workflow/{step.workflow_id}/change/" in page and "(step link-1)" in page
    nxt = Job.objects.exclude(pk=first).get()
    assert nxt.state == State.WAITING
    run_sync(first)
    nxt.refresh_from_db()
    assert nxt.state == State.QUEUED


def test_retry_confirms_then_requeues_under_the_same_id_and_logs(admin_client, broker):
    dead, cancelled = dead_job(), async_task("tests.tasks.noop")
    broker.cancel([cancelled])
    running = async_task("tests.tasks.noop", priority=9)
    broker.reserve(["default"], 1, 300, "t")
    selected = {"action": "retry_jobs", "_selected_action": [dead, cancelled, running]}
    page = admin_client.post(JOBS, selected)
    assert page.status_code == 200
    body = text(page)
    assert "Yes, retry" in body and "2 of them can be retried" in body and 'name="target_queue"' in body
    assert Job.objects.get(pk=dead).state == State.DEAD  # nothing changed yet
    response = admin_client.post(JOBS, {**selected, "post": "yes", "target_queue": "b", "target_priority": "-3"},
                                 follow=True)
    assert "2 jobs requeued." in messages_of(response)
    assert any("1 job was not retried" in m for m in messages_of(response))
    for job_id in (dead, cancelled):
        job = Job.objects.get(pk=job_id)
        assert (job.state, job.queue, job.priority, job.deliveries) == (State.QUEUED, "b", -3, 0)
    assert Job.objects.get(pk=running).state == State.RUNNING
    assert DeadLetter.objects.get(job_id=dead).replayed_at is not None
    logged = LogEntry.objects.filter(action_flag=CHANGE, content_type__model="job")
    assert sorted(logged.values_list("object_id", flat=True)) == sorted([dead, cancelled])
    assert all("Retried into queue b at priority -3" in e.change_message for e in logged)


def test_cancel_logs_each_cancelled_job(admin_client, broker):
    job_id = async_task("tests.tasks.noop")
    admin_client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [job_id], "post": "yes"})
    assert Job.objects.get(pk=job_id).state == State.CANCELLED
    assert LogEntry.objects.get(object_id=job_id).change_message == "Cancelled"


def test_a_confirmation_page_keeps_select_all_across_pages(admin_client, broker):
    ids = [async_task("tests.tasks.noop") for _ in range(3)]
    page = text(admin_client.post(JOBS, {"action": "cancel_jobs", "_selected_action": ids[:1], "select_across": "1"}))
    assert 'name="select_across" value="1"' in page
    admin_client.post(JOBS, {"action": "cancel_jobs", "_selected_action": ids[:1], "select_across": "1", "post": "yes"})
    assert set(Job.objects.values_list("state", flat=True)) == {State.CANCELLED}


# -- dead letters ----------------------------------------------------------------------------------

def test_dead_letter_list_columns_filters_and_search(admin_client, broker):
    dead = dead_job(queue="emails")
    page = text(admin_client.get(LETTERS)).replace("<wbr>", "")  # (line breaks allowed inside names)
    for column in ("job", "task", "queue", "reason", "last error", "deliveries", "failed at", "replays"):
        assert f">{column.capitalize()}<" in page or column in page.lower(), column
    assert "TaskFailed: kaput" in page and "waiting" in page
    for title in ("By queue", "By kind of reason", "By replayed"):
        assert title in page
    for query in (f"q={dead}", "q=tasks.fail", "q=kaput", "queue=emails", "reason=failed", "replayed=no"):
        result = admin_client.get(f"{LETTERS}?{query}").context["cl"].result_list
        assert [d.job_id for d in result] == [dead], query
    for query in ("queue=a", "reason=no_ack", "reason=bad_package", "reason=manual", "replayed=yes"):
        assert list(admin_client.get(f"{LETTERS}?{query}").context["cl"].result_list) == [], query


def test_reason_kinds_cover_every_reason(admin_client, broker):
    reasons = {
        "failed": "max deliveries exceeded: failed 5 times",
        "no_ack": "max deliveries exceeded: delivered 5 times without an ack",
        "bad_package": "bad signature",
        "expired": "expired before it ran",
        "manual": "django_taskmq.exceptions.Reject: account deleted",
    }
    for kind, reason in reasons.items():
        job_id = async_task("tests.tasks.noop", queue="a")
        (r,) = broker.reserve(["a"], 1, 60, "t")
        broker.dead_letter(r, reason)
    for kind, reason in reasons.items():
        result = admin_client.get(f"{LETTERS}?reason={kind}").context["cl"].result_list
        assert [d.reason for d in result] == [reason], kind
    assert job_id


def test_replay_into_another_queue_and_priority(admin_client, broker):
    dead = dead_job()
    letter = DeadLetter.objects.get(job_id=dead)
    page = text(admin_client.post(LETTERS, {"action": "replay", "_selected_action": [letter.pk]}))
    assert "its own queue (default)" in page and "its own priority" in page
    queues = re.findall(r'<option value="([^"]*)"', page.split('name="target_queue"')[1].split("</select>")[0])
    assert queues == ["", "a", "b", "default", "emails", "reports"]  # TASKMQ['queues'], own first
    response = admin_client.post(LETTERS, {"action": "replay", "_selected_action": [letter.pk], "post": "yes",
                                           "target_queue": "emails", "target_priority": "7"}, follow=True)
    assert "1 job replayed." in messages_of(response)
    job = Job.objects.get(pk=dead)
    assert (job.state, job.queue, job.priority, job.deliveries, job.error) == (
        State.QUEUED, "emails", 7, 0, job.error)  # the same job, its history (last error) kept
    assert "kaput" in job.error
    entry = LogEntry.objects.get(object_id=str(letter.pk))
    assert entry.change_message == "Replayed into queue emails at priority 7"


def test_a_dead_letter_s_page_replays_it_into_another_queue(admin_client, broker):
    letter = DeadLetter.objects.get(job_id=dead_job(queue="a"))
    other = DeadLetter.objects.get(job_id=dead_job(queue="a"))
    page = text(admin_client.get(f"{LETTERS}{letter.pk}/change/"))
    assert f'href="{LETTERS}{letter.pk}/replay/" id="taskmq-replay"' in page
    confirmation = admin_client.get(f"{LETTERS}{letter.pk}/replay/")
    assert "Yes, replay" in text(confirmation) and [o.pk for o in confirmation.context["objects"]] == [letter.pk]
    response = admin_client.post(f"{LETTERS}{letter.pk}/replay/", {"post": "yes", "target_queue": "b",
                                                                    "target_priority": "7"}, follow=True)
    assert response.redirect_chain[-1][0] == f"{LETTERS}{letter.pk}/change/"
    assert "1 job replayed." in messages_of(response)
    assert Job.objects.filter(pk=letter.job_id).values_list("state", "queue", "priority").get() == (
        State.QUEUED, "b", 7)
    assert Job.objects.get(pk=other.job_id).state == State.DEAD  # the other letter stays
    assert 'id="taskmq-replay"' not in text(admin_client.get(f"{LETTERS}{letter.pk}/change/"))  # replayed now


def test_replay_refuses_a_priority_out_of_range(admin_client, broker):
    letter = DeadLetter.objects.get(job_id=dead_job())
    response = admin_client.post(LETTERS, {"action": "replay", "_selected_action": [letter.pk], "post": "yes",
                                           "target_priority": "12"})
    assert response.status_code == 200 and "Select a valid choice" in text(response)
    assert Job.objects.get(pk=letter.job_id).state == State.DEAD


def test_replay_all_in_a_queue(admin_client, broker):
    a1, a2, b1 = dead_job(queue="a"), dead_job(queue="a"), dead_job(queue="b")
    chooser = admin_client.get(f"{LETTERS}replay-all/")  # two queues have letters: which one?
    assert "Yes, replay all" not in text(chooser)
    assert f'href="{LETTERS}replay-all/?queue=a">a</a> (2 waiting)' in text(chooser)
    assert f'href="{LETTERS}replay-all/?queue=b">b</a> (1 waiting)' in text(chooser)
    page = admin_client.get(f"{LETTERS}replay-all/?queue=a")
    assert page.status_code == 200 and "Yes, replay all" in text(page)
    assert {o.job_id for o in page.context["objects"]} == {a1, a2} and page.context["total"] == 2  # a's alone
    assert Job.objects.get(pk=a1).state == State.DEAD
    admin_client.post(f"{LETTERS}replay-all/?queue=a", {"queue": "b", "post": "yes"})  # not the queue listed
    assert Job.objects.get(pk=b1).state == State.DEAD
    response = admin_client.post(f"{LETTERS}replay-all/?queue=a", {"queue": "a", "post": "yes"}, follow=True)
    assert "2 jobs of queue a replayed." in messages_of(response)
    assert [Job.objects.get(pk=i).state for i in (a1, a2, b1)] == [State.QUEUED, State.QUEUED, State.DEAD]
    assert LogEntry.objects.filter(content_type__model="deadletter").count() == 2
    assert "replay-all/" in text(admin_client.get(LETTERS))  # linked from the list


def test_purge_confirms_logs_and_deletes_letters_with_their_jobs(admin_client, broker):
    dead = dead_job()
    letter = DeadLetter.objects.get(job_id=dead)
    page = admin_client.post(LETTERS, {"action": "purge", "_selected_action": [letter.pk]})
    assert "Yes, purge" in text(page) and Job.objects.filter(pk=dead).exists()
    response = admin_client.post(LETTERS, {"action": "purge", "_selected_action": [letter.pk], "post": "yes"},
                                 follow=True)
    assert "1 dead letter purged." in messages_of(response)
    assert not Job.objects.filter(pk=dead).exists()
    assert set(LogEntry.objects.filter(action_flag=DELETION).values_list("content_type__model", flat=True)) == {
        "job", "deadletter"}


# -- schedules -------------------------------------------------------------------------------------

def schedule_form(**changes) -> dict:
    return {"name": "report", "func": "tests.tasks.noop", "args": "[]", "kwargs": "{}", "schedule_type": "C",
            "cron": "0 9 * * 1-5", "minutes": "", "repeats": -1, "next_run_0": "2030-01-07", "next_run_1": "09:00:00",
            "queue": "", "priority": 0, "hook": "", "intended_date_kwarg": "", "options": "{}", **changes}


@pytest.mark.parametrize("changes, field, message", [
    ({"func": "os.system"}, "func", "not in an allowed task module"),
    ({"args": "[1, 2"}, "args", "Enter a valid JSON"),
    ({"args": '{"a": 1}'}, "args", "must be a JSON list"),
    ({"kwargs": "[1]"}, "kwargs", "must be a JSON object"),
    ({"cron": "99 * * * *"}, "cron", "not a valid cron expression"),
    ({"schedule_type": "I", "minutes": ""}, "minutes", "needs its interval in minutes"),
    ({"queue": "nowhere"}, "queue", "Select a valid choice"),
    ({"hook": "os.system"}, "hook", "not in an allowed task module"),
    ({"options": '{"nonsense": 1}'}, "options", "unknown"),
])
def test_schedule_form_checks(admin_client, changes, field, message):
    response = admin_client.post(f"{SCHEDULES}add/", schedule_form(**changes))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert not Schedule.objects.exists()


def test_schedule_change_page_shows_next_runs_and_last_job(admin_client, broker, settings):
    settings.TIME_ZONE = "Europe/Paris"
    assert admin_client.post(f"{SCHEDULES}add/", schedule_form()).status_code == 302
    schedule = Schedule.objects.get()
    job_id = async_task("tests.tasks.noop")
    Schedule.objects.filter(pk=schedule.pk).update(last_job=job_id)
    page = text(admin_client.get(f"{SCHEDULES}{schedule.pk}/change/"))
    runs = re.findall(r"<li>([^<]*)</li>", page.split("Next runs")[1].split("</ol>")[0])
    assert len(runs) == 5 and "Europe/Paris" in page
    assert runs[0].startswith("Jan. 7, 2030, 9 a.m.") and runs[1].startswith("Jan. 8, 2030, 9 a.m.")
    assert f"/admin/django_taskmq/job/{job_id}/change/" in page
    assert f"{SCHEDULES}{schedule.pk}/pause/" in page


def test_schedules_pause_and_resume(admin_client, broker):
    admin_client.post(f"{SCHEDULES}add/", schedule_form())
    schedule = Schedule.objects.get()
    page = admin_client.get(f"{SCHEDULES}{schedule.pk}/pause/")
    assert "Yes, pause" in text(page) and not Schedule.objects.get().paused
    admin_client.post(f"{SCHEDULES}{schedule.pk}/pause/", {"post": "yes"})
    assert Schedule.objects.get().paused
    page = text(admin_client.get(f"{SCHEDULES}{schedule.pk}/change/"))
    assert f"{SCHEDULES}{schedule.pk}/resume/" in page and "paused: none of these fires" in page
    admin_client.post(SCHEDULES, {"action": "resume", "_selected_action": [schedule.pk], "post": "yes"})
    assert not Schedule.objects.get().paused
    assert list(LogEntry.objects.filter(content_type__model="schedule", action_flag=CHANGE)
                .order_by("pk").values_list("change_message", flat=True))[-2:] == ["Paused", "Resumed"]


def test_schedules_are_deleted_one_or_selected(admin_client, broker):
    """Deleting from a schedule's page and with "delete selected" (Broker.delete_schedules) deletes and logs."""
    for name in ("one", "two", "three"):
        admin_client.post(f"{SCHEDULES}add/", schedule_form(name=name))
    one, two, three = (Schedule.objects.get(name=n).pk for n in ("one", "two", "three"))
    admin_client.post(f"{SCHEDULES}{one}/delete/", {"post": "yes"})
    assert sorted(Schedule.objects.values_list("name", flat=True)) == ["three", "two"]
    admin_client.post(SCHEDULES, {"action": "delete_selected", "_selected_action": [two], "post": "yes"})
    assert list(Schedule.objects.values_list("pk", flat=True)) == [three]
    assert LogEntry.objects.filter(content_type__model="schedule", action_flag=DELETION).count() == 2


# -- the dashboard ---------------------------------------------------------------------------------

def test_dashboard_shows_queues_clusters_and_throughput(admin_client, broker):
    for priority in (9, 9, 0):
        async_task("tests.tasks.noop", queue="emails", priority=priority)
    async_task("tests.tasks.noop", queue="emails", delay=3600)
    dead_job(queue="emails")
    run_sync(async_task("tests.tasks.noop", queue="a"))
    Cluster.objects.create(id="c:h:1:x", name="web", host="h1", pid=4242, state="running", workers=3,
                           queues=["emails"], counts={"succeeded": 7, "failed": 1, "uptime": 75})
    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    page = text(response)
    assert '<meta http-equiv="refresh"' in page and "<svg" in page and "<script" not in page.split("<body")[1]
    emails = next(q for q in response.context["queues"] if q["name"] == "emails")
    assert (emails["ready"], emails["bands"], emails["delayed"], emails["dead_letters"]) == (3, [(9, 2), (0, 1)], 1, 1)
    assert "h1" in page and "4242" in page
    throughput = response.context["throughput"]
    assert (throughput.succeeded_minute, throughput.succeeded_hour, throughput.failed_hour) == (1, 1, 1)
    assert sum(ok for _, ok, _f in throughput.per_minute) == 1


def test_dashboard_is_linked_from_the_admin_index_and_the_app_index_and_reads_little(admin_client, broker):
    for index in ("/admin/", "/admin/django_taskmq/"):
        assert re.search(rf'<tr class="model-dashboard[^"]*">\s*<th scope="row" id="django_taskmq-dashboard">\s*'
                         rf'<a href="{DASHBOARD}"', text(admin_client.get(index))), index
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(DASHBOARD)
    job_reads = [q["sql"] for q in queries if "django_taskmq_job" in q["sql"]]
    assert len(job_reads) <= 6  # the wait and run times of the last hour are one of them
    assert not any("payload" in sql or "result_package" in sql for sql in job_reads)


def test_clusters_show_their_clock_skew_and_are_alive_by_the_database_s_clock(admin_client, broker):
    """The heartbeat's clock skew shows on the dashboard and in the cluster list; "alive" and the
    heartbeat's age are read against the database's time (one reading with the page's query)."""
    Cluster.objects.create(id="ahead:h1:1:x", name="ahead", host="h1", pid=1, state="running", workers=1,
                           counts={"clock_skew": -3.25, "clock_skew_uncertainty": 0.001})
    Cluster.objects.create(id="gone:h2:2:x", name="gone", host="h2", pid=2, state="running", workers=1,
                           beat_at=timezone.now() - datetime.timedelta(minutes=5))
    dashboard = text(admin_client.get(DASHBOARD))
    assert "clock skew" in dashboard and "-3.250 s" in dashboard
    response = admin_client.get("/admin/django_taskmq/cluster/")
    rows = {c.name: c for c in response.context["cl"].result_list}
    admin = response.context["cl"].model_admin
    assert (admin.alive(rows["ahead"]), admin.alive(rows["gone"])) == (True, False)
    assert (admin.clock_skew(rows["ahead"]), admin.clock_skew(rows["gone"])) == ("-3.250 s", "-")
    assert admin.heartbeat_age(rows["gone"]).startswith("5 min")
    assert "-3.250 s" in text(response)


def test_dashboard_says_when_no_cluster_is_alive(admin_client, broker):
    Cluster.objects.create(id="old", name="old", host="h", pid=1, state="running",
                           beat_at=timezone.now() - datetime.timedelta(minutes=5))
    page = text(admin_client.get(DASHBOARD))
    assert "No cluster alive" in page


def test_no_row_is_deleted_through_a_form(admin_client, broker):
    """Deleting a job or a letter by hand would bypass the broker: no Delete button, no delete page."""
    dead = dead_job()
    letter = DeadLetter.objects.get(job_id=dead)
    for url in (f"{JOBS}{dead}/", f"{LETTERS}{letter.pk}/"):
        assert f"{url}delete/" not in text(admin_client.get(f"{url}change/"))
        assert admin_client.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=dead).exists() and DeadLetter.objects.filter(pk=letter.pk).exists()
