"""The scheduler tick: due schedules fire once and move on; a broken schedule cannot stop the others."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from django_taskmq import ConfigError, schedule
from django_taskmq.models import Job, Schedule
from django_taskmq.scheduler import tick

pytestmark = pytest.mark.django_db


def test_a_due_minutes_schedule_fires_once_and_moves_to_its_next_run(broker):
    """tick() enqueues one job for a due schedule and advances next_run past now (no catch-up)."""
    past = timezone.now() - datetime.timedelta(minutes=30)
    s = schedule("tests.tasks.add", 1, 2, name="adder", schedule_type=Schedule.MINUTES, minutes=5,
                 next_run=past, catch_up=False)
    fired = tick()
    assert len(fired) == 1
    job = Job.objects.get(pk=fired[0])
    assert (job.func, job.task_name) == ("tests.tasks.add", "adder")
    s.refresh_from_db()
    assert s.next_run > timezone.now() and s.last_job == fired[0]
    assert tick() == []  # not due again until next_run


def test_repeats_count_down_and_a_once_schedule_stops(broker):
    """A ONCE schedule fires one time; repeats reaches 0 and the schedule stays, disabled."""
    s = schedule("tests.tasks.noop", name="once", next_run=timezone.now() - datetime.timedelta(seconds=1))
    assert len(tick()) == 1
    s.refresh_from_db()
    assert s.repeats == 0
    assert tick() == []


def test_a_broken_schedule_is_disabled_and_the_others_still_fire(broker):
    """A schedule made invalid behind the API's back (the admin) is disabled; the tick goes on."""
    past = timezone.now() - datetime.timedelta(minutes=1)
    schedule("tests.tasks.noop", name="good", next_run=past)
    Schedule.objects.create(name="broken", func="tests.tasks.noop", schedule_type=Schedule.CRON,
                            cron="not a cron", next_run=past)
    fired = tick()
    assert [Job.objects.get(pk=j).task_name for j in fired] == ["good"]
    assert Schedule.objects.get(name="broken").repeats == 0


def test_schedule_kwargs_named_like_options_go_to_the_function(broker):
    """A schedule's kwargs called e.g. ``delay`` are the function's arguments, not enqueue options."""
    schedule("tests.tasks.takes_options", name="opts", next_run=timezone.now() - datetime.timedelta(seconds=1),
             delay=7, priority=0)
    (job_id,) = tick()
    from django_taskmq.envelope import verify

    envelope = verify(Job.objects.get(pk=job_id).payload, "tests")
    assert envelope.kwargs == {"delay": 7}


def test_bad_schedule_arguments_raise_config_error():
    with pytest.raises(ConfigError):
        schedule("tests.tasks.noop", name="x", schedule_type=Schedule.MINUTES)
    with pytest.raises(ConfigError):
        schedule("tests.tasks.noop", name="y", schedule_type="nope")


def test_a_paused_schedule_does_not_fire_until_resumed(broker):
    import datetime

    from django.utils import timezone

    from django_taskmq.models import Job, Schedule
    from django_taskmq.scheduler import tick

    Schedule.objects.create(name="p", func="tests.tasks.noop", next_run=timezone.now() - datetime.timedelta(seconds=1),
                            paused=True)
    assert tick() == [] and not Job.objects.exists()
    Schedule.objects.filter(name="p").update(paused=False)
    assert len(tick()) == 1


def test_a_cron_schedule_created_through_the_orm_gets_its_next_run_from_its_expression(broker):
    """As django-q2's Schedule.save() does: not the field's default (now), which would fire at once."""
    before = timezone.now()
    item = Schedule.objects.create(name="nightly", func="tests.tasks.noop", schedule_type=Schedule.CRON,
                                   cron="30 3 * * *")
    item.refresh_from_db()
    assert item.next_run > before
    local = timezone.localtime(item.next_run)  # the project's TIME_ZONE, the schedule's without tz
    assert (local.hour, local.minute, local.second) == (3, 30, 0)
    assert item.next_run - before <= datetime.timedelta(days=1)
    assert tick() == []
    # A later next_run (the admin's form) is kept, any given to schedule() too; an edit does not move it.
    later = timezone.now() + datetime.timedelta(days=3)
    assert Schedule.objects.create(name="later", func="tests.tasks.noop", schedule_type=Schedule.CRON,
                                   cron="30 3 * * *", next_run=later).next_run == later
    given = timezone.now() - datetime.timedelta(minutes=7)
    kept = schedule("tests.tasks.noop", name="given", schedule_type=Schedule.CRON, cron="30 3 * * *",
                    next_run=given)
    assert kept.next_run == given and Schedule.objects.get(name="given").next_run == given
    item.cron = "0 4 * * *"
    item.save()
    item.refresh_from_db()
    assert timezone.localtime(item.next_run).hour == 3


def test_schedule_gives_a_cron_schedule_without_next_run_its_expressions_next_match(broker):
    before = timezone.now()
    item = schedule("tests.tasks.noop", name="cron", schedule_type=Schedule.CRON, cron="15 4 * * *", tz="UTC")
    assert item.next_run > before and (item.next_run.hour, item.next_run.minute) == (4, 15)
    assert Schedule.objects.get(name="cron").next_run == item.next_run
    assert tick() == []
