"""Schedules in a named time zone: cron times read in the schedule's own IANA zone across both
daylight-saving changes, whatever the project's TIME_ZONE (UTC in the test settings)."""

from __future__ import annotations

import datetime
from zoneinfo import ZoneInfo

import pytest

from django_taskmq import ConfigError, schedule
from django_taskmq.models import Job, Schedule
from django_taskmq.scheduler import tick

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")
UTC = datetime.UTC


def berlin(*args: int) -> datetime.datetime:
    return datetime.datetime(*args, tzinfo=BERLIN)


def fires(name: str, start: datetime.datetime, hours: int, step_minutes: int = 15) -> list[datetime.datetime]:
    """Tick with a frozen clock every ``step_minutes`` from ``start`` for ``hours``; return the tick
    times (UTC) at which schedule ``name`` fired."""
    fired = []
    now = start
    while now < start + datetime.timedelta(hours=hours):
        if any(Job.objects.get(pk=j).task_name == name for j in tick(now=now)):
            fired.append(now.astimezone(UTC))
        now += datetime.timedelta(minutes=step_minutes)
    return fired


def test_the_spring_gap_runs_once_when_the_clock_jumps(broker):
    """2026-03-29: 02:00 CET becomes 03:00 CEST, so 02:30 does not exist that day; it runs once,
    at 03:00 CEST, and at 02:30 local on the days around it."""
    schedule("tests.tasks.noop", name="berlin-0230", schedule_type=Schedule.CRON, cron="30 2 * * *",
             tz="Europe/Berlin", next_run=berlin(2026, 3, 28, 2, 30))
    got = fires("berlin-0230", berlin(2026, 3, 28, 0, 0), hours=72)
    assert got == [
        berlin(2026, 3, 28, 2, 30).astimezone(UTC),  # 01:30 UTC
        berlin(2026, 3, 29, 3, 0).astimezone(UTC),  # the gap: when the clock jumps, 01:00 UTC
        berlin(2026, 3, 30, 2, 30).astimezone(UTC),  # 00:30 UTC in summer time
    ]


def test_the_autumn_repeat_runs_once(broker):
    """2026-10-25: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice; it runs at the first."""
    schedule("tests.tasks.noop", name="berlin-0230", schedule_type=Schedule.CRON, cron="30 2 * * *",
             tz="Europe/Berlin", next_run=berlin(2026, 10, 24, 2, 30))
    got = fires("berlin-0230", berlin(2026, 10, 24, 0, 0), hours=72)
    assert got == [
        datetime.datetime(2026, 10, 24, 0, 30, tzinfo=UTC),
        datetime.datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # the first 02:30 (CEST); not 01:30 UTC
        datetime.datetime(2026, 10, 26, 1, 30, tzinfo=UTC),  # winter time from here
    ]


def test_without_tz_the_project_time_zone_is_used(broker, settings):
    """The same cron without ``tz`` follows TIME_ZONE (UTC here): 02:30 UTC every day."""
    schedule("tests.tasks.noop", name="utc-0230", schedule_type=Schedule.CRON, cron="30 2 * * *",
             next_run=datetime.datetime(2026, 3, 28, 2, 30, tzinfo=UTC))
    got = fires("utc-0230", datetime.datetime(2026, 3, 28, 0, 0, tzinfo=UTC), hours=72)
    assert [t.hour for t in got] == [2, 2, 2] and [t.minute for t in got] == [30, 30, 30]


def test_a_daily_schedule_keeps_its_local_hour(broker):
    """A DAILY schedule at 09:00 Berlin stays at 09:00 local across the spring change."""
    s = schedule("tests.tasks.noop", name="daily", schedule_type=Schedule.DAILY, tz="Europe/Berlin",
                 next_run=berlin(2026, 3, 28, 9, 0), catch_up=True)
    for _ in range(3):
        s.refresh_from_db()
        tick(now=s.next_run)
    s.refresh_from_db()
    assert s.next_run.astimezone(BERLIN) == berlin(2026, 3, 31, 9, 0)
    assert s.zone() == BERLIN


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "../etc/passwd", 5])
def test_a_bad_time_zone_is_refused_at_the_call(broker, tz):
    with pytest.raises(ConfigError, match="tz"):
        schedule("tests.tasks.noop", name="bad", schedule_type=Schedule.CRON, cron="0 9 * * *", tz=tz)
    assert not Schedule.objects.filter(name="bad").exists()


def test_the_model_refuses_a_bad_time_zone(broker):
    s = Schedule(name="bad", func="tests.tasks.noop", schedule_type=Schedule.CRON, cron="0 9 * * *", tz="Nowhere/Else")
    with pytest.raises(Exception) as info:
        s.full_clean()
    assert "tz" in info.value.message_dict  # type: ignore[attr-defined]
