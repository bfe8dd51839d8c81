"""Tests of schedule arithmetic."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_taskmq.exceptions import ConfigError
from django_taskmq.policy.cron import ScheduleType, advance, is_due, next_after, validate

AMS = ZoneInfo("Europe/Amsterdam")
UTC = timezone.utc
T = ScheduleType


def ams(*args, fold=0):
    return datetime(*args, tzinfo=AMS, fold=fold)


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def run(kind, start, count, **kwargs):
    """Return ``count`` successive runs after ``start``."""
    kwargs.setdefault("tz", AMS)
    runs = []
    for _ in range(count):
        start = next_after(kind, start, **kwargs)
        runs.append(start)
    return runs


def test_django_q2_values():
    assert {t.name: t.value for t in ScheduleType} == {
        "ONCE": "O", "MINUTES": "I", "HOURLY": "H", "DAILY": "D", "WEEKLY": "W",
        "BIWEEKLY": "BW", "MONTHLY": "M", "BIMONTHLY": "BM", "QUARTERLY": "Q",
        "YEARLY": "Y", "CRON": "C",
    }
    assert ScheduleType("BW") is T.BIWEEKLY
    assert str(T.CRON) == "C"


class TestValidate:
    @pytest.mark.parametrize("kind", [t for t in ScheduleType if t not in (T.MINUTES, T.CRON)])
    def test_others_ignore_minutes_and_cron(self, kind):
        validate(kind, None, None)
        validate(kind.value, 0, "not a cron")

    def test_minutes(self):
        validate(T.MINUTES, 1, None)
        validate("I", 90, None)
        for bad in (None, 0, -5, 1.5, True, "5"):
            with pytest.raises(ConfigError, match="minutes"):
                validate(T.MINUTES, bad, None)

    def test_cron(self):
        validate(T.CRON, None, "0 9 * * *")
        validate(T.CRON, None, "*/5 * * * 1-5")
        validate(T.CRON, None, "@daily")
        for bad in (None, "", "   ", "not a cron", "61 * * * *", "* * * *", 5):
            with pytest.raises(ConfigError, match="cron"):
                validate(T.CRON, None, bad)

    def test_cron_that_never_runs(self):
        with pytest.raises(ConfigError, match="never runs"):
            validate(T.CRON, None, "0 0 30 2 *")

    def test_unknown_type(self):
        with pytest.raises(ConfigError, match="schedule_type"):
            validate("X", None, None)


class TestNextAfter:
    def test_once(self):
        assert next_after(T.ONCE, ams(2024, 1, 1, 9), tz=AMS) is None

    def test_minutes_and_hourly_are_elapsed_time(self):
        # Across the fall-back night: 01:30 CEST + 90 min is 02:00 CET (2 h later by the clock).
        start = ams(2024, 10, 27, 1, 30)
        after = next_after(T.MINUTES, start, minutes=90, tz=AMS)
        assert after - start == timedelta(minutes=90)
        assert after == utc(2024, 10, 27, 1, 0)
        assert run("H", start, 3) == [utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 1, 30), utc(2024, 10, 27, 2, 30)]

    def test_daily_keeps_local_time_across_dst(self):
        # Europe/Amsterdam: CET -> CEST on 2024-03-31, CEST -> CET on 2024-10-27.
        assert run(T.DAILY, ams(2024, 3, 30, 9), 2) == [ams(2024, 3, 31, 9), ams(2024, 4, 1, 9)]
        assert next_after(T.DAILY, ams(2024, 3, 30, 9), tz=AMS) - utc(2024, 3, 30, 8) == timedelta(hours=23)
        assert run(T.DAILY, ams(2024, 10, 26, 9), 2) == [ams(2024, 10, 27, 9), ams(2024, 10, 28, 9)]
        assert next_after(T.DAILY, ams(2024, 10, 26, 9), tz=AMS) - utc(2024, 10, 26, 7) == timedelta(hours=25)

    def test_daily_in_the_gap_moves_forward(self):
        assert next_after(T.DAILY, ams(2024, 3, 30, 2, 30), tz=AMS) == ams(2024, 3, 31, 3, 30)

    def test_input_in_another_zone(self):
        # The stored value is usually UTC; the step is still local.
        assert next_after(T.DAILY, utc(2024, 3, 30, 8), tz=AMS) == utc(2024, 3, 31, 7)

    @pytest.mark.parametrize("kind", [t for t in ScheduleType if t is not T.ONCE])
    def test_result_is_utc(self, kind):
        after = next_after(kind, ams(2024, 1, 1, 9), minutes=5, cron="0 9 * * *", tz=AMS)
        assert after.tzinfo is UTC

    def test_weeks(self):
        assert next_after(T.WEEKLY, ams(2024, 3, 25, 9), tz=AMS) == ams(2024, 4, 1, 9)
        assert next_after(T.BIWEEKLY, ams(2024, 3, 25, 9), tz=AMS) == ams(2024, 4, 8, 9)

    def test_month_end_clamping(self):
        assert run(T.MONTHLY, ams(2024, 1, 31, 10), 3) == [
            ams(2024, 2, 29, 10), ams(2024, 3, 29, 10), ams(2024, 4, 29, 10),
        ]
        assert next_after(T.MONTHLY, ams(2023, 1, 31, 10), tz=AMS) == ams(2023, 2, 28, 10)
        assert next_after(T.BIMONTHLY, ams(2024, 12, 31, 10), tz=AMS) == ams(2025, 2, 28, 10)
        assert next_after(T.QUARTERLY, ams(2024, 11, 30, 10), tz=AMS) == ams(2025, 2, 28, 10)
        assert next_after(T.QUARTERLY, ams(2024, 1, 31, 10), tz=AMS) == ams(2024, 4, 30, 10)
        assert next_after(T.YEARLY, ams(2024, 2, 29, 10), tz=AMS) == ams(2025, 2, 28, 10)

    def test_cron_daily_across_dst(self):
        assert run(T.CRON, ams(2024, 3, 30, 9), 3, cron="0 9 * * *") == [
            ams(2024, 3, 31, 9), ams(2024, 4, 1, 9), ams(2024, 4, 2, 9),
        ]
        assert run(T.CRON, ams(2024, 10, 26, 9), 2, cron="0 9 * * *") == [ams(2024, 10, 27, 9), ams(2024, 10, 28, 9)]
        # In UTC that is 08:00 before the change and 07:00 after.
        assert run(T.CRON, utc(2024, 3, 30, 8), 2, cron="0 9 * * *") == [utc(2024, 3, 31, 7), utc(2024, 4, 1, 7)]

    def test_cron_fixed_time_runs_once_when_clock_falls_back(self):
        # 2024-10-27 02:30 happens twice (00:30 and 01:30 UTC); the job runs at the first.
        assert run(T.CRON, ams(2024, 10, 26, 2, 30), 2, cron="30 2 * * *") == [
            utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30),
        ]

    def test_cron_wildcard_runs_on_both_passes(self):
        assert run(T.CRON, ams(2024, 10, 27, 1, 45), 5, cron="*/30 * * * *") == [
            utc(2024, 10, 27, 0, 0),
            utc(2024, 10, 27, 0, 30),
            utc(2024, 10, 27, 1, 0),
            utc(2024, 10, 27, 1, 30),
            utc(2024, 10, 27, 2, 0),
        ]

    def test_cron_in_the_spring_gap(self):
        # 02:30 does not exist on 2024-03-31; the run happens when the clock jumps.
        assert run(T.CRON, ams(2024, 3, 30, 2, 30), 2, cron="30 2 * * *")[0] == utc(2024, 3, 31, 1, 0)

    def test_cron_is_strictly_after(self):
        assert next_after(T.CRON, ams(2024, 1, 1, 9), cron="0 9 * * *", tz=AMS) == ams(2024, 1, 2, 9)
        assert next_after(T.CRON, ams(2024, 1, 1, 8, 59, 59, 999999), cron="0 9 * * *", tz=AMS) == ams(2024, 1, 1, 9)

    def test_errors(self):
        with pytest.raises(ConfigError, match="aware"):
            next_after(T.DAILY, datetime(2024, 1, 1), tz=AMS)
        with pytest.raises(ConfigError, match="tz"):
            next_after(T.DAILY, ams(2024, 1, 1), tz="Europe/Amsterdam")
        with pytest.raises(ConfigError, match="minutes"):
            next_after(T.MINUTES, ams(2024, 1, 1), tz=AMS)
        with pytest.raises(ConfigError, match="cron"):
            next_after(T.CRON, ams(2024, 1, 1), cron="bad", tz=AMS)
        with pytest.raises(ConfigError, match="no run"):
            next_after(T.CRON, ams(2024, 1, 1), cron="0 0 30 2 *", tz=AMS)


class TestAdvance:
    def test_catch_up_fires_each_missed_run(self):
        # Down from Monday 09:00 to Thursday 12:00: Tue, Wed and Thu 09:00 are still due.
        next_run, now = ams(2024, 4, 1, 9), ams(2024, 4, 4, 12)
        runs = []
        while is_due(next_run, now):
            runs.append(next_run)
            next_run = advance(T.DAILY, next_run, now, catch_up=True, tz=AMS)
        assert runs == [ams(2024, 4, d, 9) for d in (1, 2, 3, 4)]
        assert next_run == ams(2024, 4, 5, 9)

    def test_no_catch_up_skips_to_after_now(self):
        next_run, now = ams(2024, 4, 1, 9), ams(2024, 4, 4, 12)
        assert advance(T.DAILY, next_run, now, catch_up=False, tz=AMS) == ams(2024, 4, 5, 9)
        assert advance(T.CRON, next_run, now, catch_up=False, cron="0 9 * * *", tz=AMS) == ams(2024, 4, 5, 9)
        assert advance(T.CRON, next_run, now, catch_up=True, cron="0 9 * * *", tz=AMS) == ams(2024, 4, 2, 9)
        assert advance(T.MINUTES, next_run, now, catch_up=False, minutes=7, tz=AMS) == (
            next_run + timedelta(minutes=7 * (75 * 60 // 7 + 1))
        )

    def test_strictly_after_now(self):
        # A run exactly at now is the one firing now, not the next one.
        next_run = ams(2024, 4, 1, 9)
        assert advance(T.DAILY, next_run, ams(2024, 4, 3, 9), catch_up=False, tz=AMS) == ams(2024, 4, 4, 9)
        assert advance(T.HOURLY, next_run, ams(2024, 4, 1, 12), catch_up=False, tz=AMS) == ams(2024, 4, 1, 13)

    def test_on_time(self):
        next_run = ams(2024, 4, 1, 9)
        for catch_up in (True, False):
            assert advance(T.DAILY, next_run, next_run, catch_up=catch_up, tz=AMS) == ams(2024, 4, 2, 9)

    def test_repeated_hour_compares_instants(self):
        # Same zone, same wall clock, an hour apart: Python would call these equal.
        first, second = ams(2024, 10, 27, 2, 30), ams(2024, 10, 27, 2, 45, fold=1)
        assert advance(T.HOURLY, first, second, catch_up=False, tz=AMS) == utc(2024, 10, 27, 2, 30)
        assert advance(T.MINUTES, first, second, catch_up=False, minutes=60, tz=AMS) == utc(2024, 10, 27, 2, 30)
        assert is_due(ams(2024, 10, 27, 2, 50), ams(2024, 10, 27, 2, 40, fold=1))
        assert not is_due(ams(2024, 10, 27, 2, 40, fold=1), ams(2024, 10, 27, 2, 50))

    def test_once(self):
        for catch_up in (True, False):
            assert advance(T.ONCE, ams(2024, 1, 1), ams(2024, 2, 1), catch_up=catch_up, tz=AMS) is None

    def test_month_end_skip_follows_the_catch_up_sequence(self):
        got = advance(T.MONTHLY, ams(2024, 1, 31, 10), ams(2024, 4, 15), catch_up=False, tz=AMS)
        assert got == ams(2024, 4, 29, 10)

    def test_long_outage_does_not_loop(self):
        start, now = utc(1900, 1, 1, 8), utc(2024, 6, 1, 12)
        assert advance(T.MINUTES, start, now, catch_up=False, minutes=1, tz=AMS) == utc(2024, 6, 1, 12, 1)
        assert advance(T.DAILY, start, now, catch_up=False, tz=UTC) == utc(2024, 6, 2, 8)
        assert advance(T.MONTHLY, utc(1024, 1, 1, 8), now, catch_up=False, tz=UTC) == utc(2024, 7, 1, 8)
        assert advance(T.CRON, start, now, catch_up=False, cron="0 9 * * *", tz=AMS) == ams(2024, 6, 2, 9)

    def test_naive_now(self):
        with pytest.raises(ConfigError, match="now"):
            advance(T.DAILY, ams(2024, 1, 1), datetime(2024, 2, 1), catch_up=False, tz=AMS)


def test_is_due():
    now = utc(2024, 1, 1, 12)
    assert is_due(now, now)
    assert is_due(now - timedelta(seconds=1), now)
    assert not is_due(now + timedelta(microseconds=1), now)
    assert not is_due(None, now)
    # Zones don't matter, instants do.
    assert is_due(ams(2024, 1, 1, 13), now)


KINDS = [T.MINUTES, T.HOURLY, T.DAILY, T.WEEKLY, T.BIWEEKLY, T.MONTHLY, T.QUARTERLY, T.YEARLY, T.CRON]
instants = st.datetimes(datetime(2000, 1, 1), datetime(2030, 1, 1)).map(lambda d: d.replace(tzinfo=UTC))


@settings(deadline=None, max_examples=150)
@given(
    st.sampled_from(KINDS),
    instants,
    st.integers(0, 60 * 24 * 400),
    st.integers(1, 600),
    st.sampled_from(["0 9 * * *", "*/15 * * * *", "30 2 * * 1-5", "0 0 1 * *"]),
    st.sampled_from([AMS, UTC, ZoneInfo("America/New_York")]),
)
def test_advance_properties(kind, next_run, gap_minutes, minutes, cron, tz):
    now = next_run + timedelta(minutes=gap_minutes)
    kwargs = dict(minutes=minutes, cron=cron, tz=tz)
    first = advance(kind, next_run, now, catch_up=True, **kwargs)
    assert first == next_after(kind, next_run, **kwargs) and first > next_run
    skipped = advance(kind, next_run, now, catch_up=False, **kwargs)
    assert skipped > now and skipped >= first
    # Skipping lands on the catch-up sequence: the first of its runs after now.
    if kind is not T.CRON and gap_minutes < 60 * 24 * 40:
        current = first
        while current <= now:
            current = next_after(kind, current, **kwargs)
        assert skipped == current
