"""``manage.py qimport_djangoq`` against the real django-q2: schedules and queued tasks made with
django-q2's own API (no django-q2 cluster running) are imported, run once by ``qcluster --burst``,
fire at their next run, and a second import duplicates nothing."""

from __future__ import annotations

import datetime
import io
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_taskmq import scheduler
from django_taskmq.compat import django_q as compat
from django_taskmq.models import Imported, Job, Schedule, State
from tests.conftest import ROOT, db_env
from tests.tasks import read_run_log

RECORD = "tests.djangoq.tasks_djangoq.record"
HOOK = "tests.djangoq.tasks_djangoq.hook"

pytestmark = pytest.mark.django_db(transaction=True)


def qimport(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("qimport_djangoq", *args, stdout=out)
    return out.getvalue().splitlines()


def burst(settings) -> str:
    """Run django_taskmq's ``qcluster --burst`` on the test database; return its output."""
    env = db_env({"TASKMQ_CACHE_DIR": settings.CACHES["default"]["LOCATION"]})
    proc = subprocess.run([sys.executable, "manage.py", "qcluster", "--burst", "-w", "2"], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def old_schedules():
    from django_q.models import Schedule as QSchedule

    return QSchedule.objects


def test_queued_tasks_and_schedules_are_imported_run_once_and_fire_at_their_next_run(settings, run_log):
    from django_q.models import OrmQ
    from django_q.models import Schedule as QSchedule
    from django_q.tasks import async_chain as q_chain
    from django_q.tasks import async_task as q_async
    from django_q.tasks import schedule as q_schedule

    # Queued with django-q2's API: no django-q2 cluster runs, the packages wait in django_q_ormq.
    plain = q_async(RECORD, "plain")
    hooked = q_async(RECORD, "hooked", hook=HOOK, group="g1", timeout=30, task_name="the-hooked-one")
    in_queue = q_async(RECORD, "emails", cluster="emails")
    q_chain([(RECORD, ("link-1",)), (RECORD, ("link-2",))])
    assert OrmQ.objects.count() == 4
    OrmQ.objects.create(key="legacy", payload="not a signed package", lock=timezone.now())

    soon = timezone.now() + datetime.timedelta(hours=1)
    once = q_schedule(RECORD, "once", name="once", schedule_type=QSchedule.ONCE, next_run=soon)
    minutes = q_schedule(RECORD, "every-5", name="every-5", schedule_type=QSchedule.MINUTES, minutes=5,
                         repeats=3, next_run=soon + datetime.timedelta(minutes=1))
    daily = q_schedule(RECORD, tag="daily", name="daily", hook=HOOK, schedule_type=QSchedule.DAILY,
                       next_run=soon + datetime.timedelta(minutes=2), intended_date_kwarg="when")
    cron = q_schedule(RECORD, "cron", name="cron", schedule_type=QSchedule.CRON, cron="0 22 * * 1-5", cluster="reports")
    refused = q_schedule("os.getcwd", name="not-allowed", schedule_type=QSchedule.HOURLY)

    lines = qimport()
    assert lines[:3] == [
        "schedules: 4 imported, 0 already imported, 1 refused",
        "queued tasks: 4 imported, 0 already imported, 1 refused, 0 held by a running django-q2 cluster",
        "finished tasks: 0 imported, 0 already imported, 0 refused",
    ], lines
    assert any("schedule" in line and "not-allowed" in line and "allowed task module" in line for line in lines)
    assert any("bad signature" in line for line in lines)

    # The imported rows are moved (queued) or disabled (schedules); the refused ones stay as they were.
    assert list(OrmQ.objects.values_list("payload", flat=True)) == ["not a signed package"]
    assert {s.name: s.repeats for s in QSchedule.objects.all()} == {
        "once": 0, "every-5": 0, "daily": 0, "cron": 0, "not-allowed": -1}

    ours = {s.name: s for s in Schedule.objects.all()}
    assert sorted(ours) == ["cron", "daily", "every-5", "once"]
    assert (ours["once"].schedule_type, ours["once"].repeats, ours["once"].next_run) == ("O", -1, once.next_run)
    assert (ours["every-5"].minutes, ours["every-5"].repeats) == (5, 3)
    assert (ours["daily"].hook, ours["daily"].intended_date_kwarg, ours["daily"].kwargs) == (HOOK, "when", {"tag": "daily"})
    assert (ours["cron"].cron, ours["cron"].queue, ours["cron"].next_run) == ("0 22 * * 1-5", "reports", cron.next_run)
    assert ours["daily"].options == {"group": "daily"}
    assert ours["every-5"].next_run == minutes.next_run and ours["daily"].next_run == daily.next_run

    jobs = {j.task_name: j for j in Job.objects.all()}
    assert jobs["the-hooked-one"].group == "g1" and jobs["the-hooked-one"].queue == "default"
    assert {j.queue for j in jobs.values()} == {"default", "emails"}
    # The old task ids still find their jobs through the compat API.
    assert compat._find(hooked, settings_obj()).task_name == "the-hooked-one"
    assert compat._find(in_queue, settings_obj()).queue == "emails"
    assert Imported.objects.filter(source="django_q_ormq", source_id=plain).exists()

    # A second import finds everything imported, and changes nothing.
    assert qimport()[:2] == ["schedules: 0 imported, 0 already imported, 1 refused",
                             "queued tasks: 0 imported, 0 already imported, 1 refused, 0 held by a running django-q2 "
                             "cluster"]
    # (The chain's two tasks are two jobs, one workflow: the second waits for the first.)
    assert Job.objects.count() == 5 and Schedule.objects.count() == 4
    assert Job.objects.get(state=State.WAITING).workflow_step.name == "link-2"

    burst(settings)
    runs = read_run_log(run_log)
    tags = sorted(tag for _, tag in runs)
    assert tags == sorted(["plain", "hooked", "emails", "link-1", "link-2", "hook:True:hooked"]), runs
    assert Job.objects.filter(state=State.SUCCEEDED).count() == 5

    # Each schedule fires at its next run, not before: a tick just before fires nothing.
    before = min(s.next_run for s in Schedule.objects.all()) - datetime.timedelta(seconds=1)
    assert scheduler.tick(now=before) == []
    fired = {}
    for item in sorted(Schedule.objects.all(), key=lambda s: s.next_run):
        due = item.next_run
        ids = scheduler.tick(now=due)  # (a later due time also fires the others that came due again)
        item.refresh_from_db()
        assert item.last_job in ids, (item.name, ids)
        fired[item.name] = (item.last_job, due)
        assert item.next_run > due or item.repeats == 0
    assert Schedule.objects.get(name="every-5").repeats < 3
    assert Schedule.objects.get(name="once").repeats == 0
    burst(settings)
    runs: dict[str, list[str]] = {}
    for job_id, tag in read_run_log(run_log):
        runs.setdefault(job_id, []).append(tag)
    assert runs[fired["once"][0]] == ["once"]
    assert runs[fired["every-5"][0]] == ["every-5"]
    assert runs[fired["cron"][0]] == ["cron"]
    assert runs[fired["daily"][0]] == [f"daily@{fired['daily'][1].isoformat()}", "hook:True:daily"]
    daily_job = Job.objects.get(pk=fired["daily"][0])
    assert (daily_job.group, daily_job.task_name) == ("daily", "daily")
    assert Job.objects.get(pk=fired["cron"][0]).queue == "reports"


def settings_obj():
    from django_taskmq.conf import get_settings

    return get_settings()


def test_the_import_works_without_django_q2_installed(run_log, settings):
    from django.db import connection
    from django_q.tasks import async_task as q_async
    from django_q.tasks import schedule as q_schedule

    from tests.conftest import finish, start_script

    q_async(RECORD, "x")
    q_schedule(RECORD, "y", name="y", schedule_type="H")
    plain = f"tests.settings_{connection.vendor}"  # this engine's settings, without django_q
    # Settings without django_q, and django_q made unimportable: only its tables are left.
    out = finish(start_script("""
        import sys
        sys.modules["django_q"] = None
        from django.core.management import call_command
        call_command("qimport_djangoq", "--name", "legacy")
    """, env=db_env({"DJANGO_SETTINGS_MODULE": plain})))
    assert out.splitlines()[:2] == ["schedules: 1 imported, 0 already imported, 0 refused",
                                    "queued tasks: 1 imported, 0 already imported, 0 refused, 0 held by a running "
                                    "django-q2 cluster"]
    assert Job.objects.get().func == RECORD and Schedule.objects.get().name == "y"


def test_a_dry_run_changes_nothing():
    from django_q.models import OrmQ
    from django_q.tasks import async_task as q_async
    from django_q.tasks import schedule as q_schedule

    q_async(RECORD, "x")
    q_schedule(RECORD, "y", name="y", schedule_type="H")
    lines = qimport("--dry-run")
    assert lines[:2] == ["schedules: 1 would import, 0 already imported, 0 refused",
                         "queued tasks: 1 would import, 0 already imported, 0 refused, 0 held by a running django-q2 "
                         "cluster"]
    assert lines[-1] == "dry run: nothing was changed"
    assert (Job.objects.count(), Schedule.objects.count(), Imported.objects.count()) == (0, 0, 0)
    assert OrmQ.objects.count() == 1 and old_schedules().get(name="y").repeats == -1


def test_packages_signed_under_another_name_or_key_are_reported_not_imported(settings):
    from django_q.models import OrmQ
    from django_q.tasks import async_task as q_async

    q_async(RECORD, "x")
    lines = qimport("--name", "not-the-cluster")
    assert lines[1].startswith("queued tasks: 0 imported, 0 already imported, 1 refused")
    assert "bad signature" in "\n".join(lines)
    assert OrmQ.objects.count() == 1 and Job.objects.count() == 0
    settings.SECRET_KEY = "another key"
    assert "bad signature" in "\n".join(qimport())
    assert Job.objects.count() == 0


def test_a_task_a_django_q2_cluster_holds_is_left_for_a_later_run():
    from django_q.models import OrmQ
    from django_q.tasks import async_task as q_async

    q_async(RECORD, "x")
    OrmQ.objects.update(lock=timezone.now() + datetime.timedelta(minutes=2))
    lines = qimport()
    assert lines[1] == "queued tasks: 0 imported, 0 already imported, 0 refused, 1 held by a running django-q2 cluster"
    OrmQ.objects.update(lock=timezone.now() - datetime.timedelta(seconds=1))  # its lease ran out
    assert qimport()[1].startswith("queued tasks: 1 imported")


def test_a_task_a_django_q2_cluster_takes_while_importing_stays_there(monkeypatch):
    from django_q.models import OrmQ
    from django_q.tasks import async_task as q_async

    from django_taskmq.compat.djangoq_import import Importer

    q_async(RECORD, "taken")
    q_async(RECORD, "moved")
    original = Importer._job

    def dequeued_meanwhile(self, row, task):
        if task["args"] == ("taken",):  # django-q2's dequeue moves the lock of the row it takes
            OrmQ.objects.filter(pk=row["id"]).update(lock=timezone.now() + datetime.timedelta(seconds=60))
        return original(self, row, task)

    monkeypatch.setattr(Importer, "_job", dequeued_meanwhile)
    lines = qimport()
    assert lines[1] == "queued tasks: 1 imported, 0 already imported, 0 refused, 1 held by a running django-q2 cluster"
    assert "taken by a django-q2 cluster while importing" in "\n".join(lines)
    assert OrmQ.objects.count() == 1 and Job.objects.count() == 1


def test_history_imports_finished_tasks_without_unpickling_them():
    from django_q.models import Task

    now = timezone.now()
    ok = Task.objects.create(id="a" * 32, name="alpha-bravo", func="math.floor", args=(1.5,), kwargs={}, result=1,
                             group="old", started=now - datetime.timedelta(seconds=3), stopped=now, success=True,
                             attempt_count=1)
    bad = Task.objects.create(id="b" * 32, name="charlie-delta", func="tests.tasks.fail", args=(), kwargs={},
                              result="boom : Traceback (most recent call last):\n  ...\nTaskFailed: boom",
                              started=now - datetime.timedelta(seconds=2), stopped=now, success=False, attempt_count=2)
    lines = qimport("--history")
    assert lines[2] == "finished tasks: 2 imported, 0 already imported, 0 refused"
    assert qimport("--history")[2] == "finished tasks: 0 imported, 2 already imported, 0 refused"
    done = compat.fetch(ok.id)
    assert (done.state, done.name, done.group, done.result, done.payload) == (State.SUCCEEDED, "alpha-bravo", "old",
                                                                              None, "")
    assert done.time_taken() == pytest.approx(3, abs=0.01)
    failed = compat.fetch(bad.name)
    assert (failed.state, failed.error, failed.attempt) == (State.FAILED, "boom", 2)
    assert failed.traceback.startswith("Traceback (most recent call last):")
    assert compat.result(bad.id) == "boom"


def test_cached_results_written_by_the_cluster_are_read_here(settings, run_log):
    from django_taskmq import async_task, fetch, result, result_group

    ids = [async_task(RECORD, f"c{i}", cached=60, group="cg", save=False) for i in range(3)]
    burst(settings)
    assert [result(i, cached=True) for i in ids] == ["c0", "c1", "c2"]
    assert result_group("cg", cached=True) == ["c0", "c1", "c2"]
    assert all(Job.objects.get(pk=i).result_package is None for i in ids)  # save=False: none in the database
    assert fetch(ids[0], cached=True).state == State.SUCCEEDED


def test_the_system_check_warns_when_django_q_comes_first(settings):
    from django_taskmq.checks import check_app_order

    assert check_app_order() == []
    apps = [a for a in settings.INSTALLED_APPS if a != "django_q"]
    settings.INSTALLED_APPS = [*apps[:apps.index("django_taskmq")], "django_q", *apps[apps.index("django_taskmq"):]]
    (warning,) = check_app_order()
    assert warning.id == "taskmq.W003" and "qcluster" in warning.msg
