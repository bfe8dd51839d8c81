"""Schedules carry a hook (allow-listed like func), the run's due time in a keyword argument, and more
async_task options; Job answers django-q2's Task names; Broker.forget_group."""

from __future__ import annotations

import datetime

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_taskmq import async_task, schedule, scheduler
from django_taskmq.exceptions import ConfigError
from django_taskmq.models import Job, Schedule, State


@pytest.fixture
def due():
    return timezone.now() - datetime.timedelta(seconds=5)


def test_a_schedule_runs_with_its_hook_options_and_intended_date(db, due, taskmq_settings):
    taskmq_settings(sync=True)
    made = schedule("tests.tasks.echo", 1, name="s", next_run=due, hook="tests.tasks.noop",
                    intended_date_kwarg="when", q_options={"timeout": 30, "group": "grp", "max_deliveries": 2})
    (job_id,) = scheduler.tick()
    job = Job.objects.get(pk=job_id)
    assert job.result == ((1,), {"when": due.isoformat()})
    assert (job.group, job.max_deliveries, job.hook, job.task_name) == ("grp", 2, "tests.tasks.noop", "s")
    assert made.options == {"timeout": 30, "group": "grp", "max_deliveries": 2}


def test_a_hook_outside_the_allowed_modules_is_refused_and_never_runs(db, due):
    with pytest.raises(ConfigError, match="not in an allowed task module"):
        schedule("tests.tasks.noop", name="s", hook="os.system")
    row = Schedule.objects.create(name="forged", func="tests.tasks.noop", hook="os.system", next_run=due)
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    assert "hook" in caught.value.message_dict
    assert scheduler.tick() == []
    row.refresh_from_db()
    assert row.repeats == 0  # disabled, as a forged func is


@pytest.mark.parametrize("options, message", [
    ({"queue": "a"}, "may not hold \\['queue'\\]"),
    ({"hook": "tests.tasks.noop"}, "may not hold \\['hook'\\]"),
    ({"sync": True}, "may not hold \\['sync'\\]"),
    ({"chain": []}, "unknown option"),
    ({"timeout": -1}, "timeout must be a positive number"),
    ({"nope": 1}, "unknown option"),
])
def test_schedule_options_are_checked(db, options, message):
    with pytest.raises(ConfigError, match=message):
        schedule("tests.tasks.noop", name="s", q_options=options)


def test_arguments_that_are_not_a_list_never_fire(db, due):
    row = Schedule.objects.create(name="text-args", func="tests.tasks.noop", args="2,-2", next_run=due)
    assert scheduler.tick() == []
    row.refresh_from_db()
    assert row.repeats == 0 and Job.objects.count() == 0


def test_save_schedule_gives_any_keyword_to_the_function(db, due, taskmq_settings):
    taskmq_settings(sync=True)
    scheduler.save_schedule("tests.tasks.takes_options", (), {"queue": "q", "priority": 3}, name="kw", next_run=due)
    with pytest.raises(ConfigError, match="exists already"):
        scheduler.save_schedule("tests.tasks.noop", name="kw", replace=False)
    (job_id,) = scheduler.tick()
    assert Job.objects.get(pk=job_id).result == {"queue": "q", "priority": 3, "delay": None, "hook": None}


def test_a_job_answers_django_q2s_task_names(db, taskmq_settings):
    taskmq_settings(sync=True)
    job = Job.objects.get(pk=async_task("tests.tasks.add", 1, 2, group="g", task_name="adding", hook="tests.tasks.noop"))
    assert (job.name, job.started, job.stopped, job.attempt_count) == ("adding", job.enqueued_at, job.finished_at, 1)
    assert job.time_taken() == (job.finished_at - job.enqueued_at).total_seconds()
    assert (job.args, job.kwargs, job.hook) == ((1, 2), {}, "tests.tasks.noop")
    assert (job.group_result(), job.group_count(), job.group_count(failures=True)) == ([3], 1, 0)
    job.payload = "forged"
    assert job.args is None and job.kwargs is None


def test_forget_group_takes_the_label_off_finished_jobs_or_deletes_them(broker, taskmq_settings):
    taskmq_settings(sync=True)
    done = [async_task("tests.tasks.add", i, 0, group="g") for i in range(2)]
    taskmq_settings(sync=False)
    waiting = async_task("tests.tasks.add", 9, 0, group="g")
    assert broker.forget_group("g") == 2
    assert set(Job.objects.filter(group__isnull=True).values_list("pk", flat=True)) == set(done)
    assert Job.objects.get(pk=waiting).group == "g"
    Job.objects.filter(pk__in=done).update(group="h")
    assert broker.forget_group("h", delete=True) == 2
    assert not Job.objects.filter(pk__in=done).exists() and Job.objects.get(pk=waiting).state == State.QUEUED
