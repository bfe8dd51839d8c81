"""Schedule arithmetic, compatible with django-q2's schedule types.

Two kinds of step:

* elapsed time (``MINUTES``, ``HOURLY``): a fixed number of seconds, so a DST change neither
  skips nor doubles a run;
* wall-clock time (``DAILY`` and longer, ``CRON``): computed in the project's time zone, so a
  daily run at 09:00 stays at 09:00 local time across DST. Months are added like
  ``dateutil.relativedelta`` does: Jan 31 + 1 month is Feb 28 (or 29), and the next step starts
  from there (django-q2 behaves the same).

A local time that falls in a DST gap moves forward by the gap (02:30 becomes 03:30, and a
DAILY schedule stepping from there stays at 03:30: steps start from the previous run). An
ambiguous local time means its first occurrence. A cron
expression with a fixed minute and hour (``30 2 * * *``) runs once when the clock falls back,
as Vixie cron does; one with ``*`` in its minute or hour field runs on both passes.

Results are aware datetimes in UTC, as Django stores them: Python compares and subtracts two
datetimes of the same zone by wall clock (PEP 495), which is wrong around a DST change, so
all arithmetic here happens in UTC or on naive local times.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta, timezone, tzinfo

from typing import TYPE_CHECKING

from dateutil.relativedelta import relativedelta

from django_taskmq.exceptions import ConfigError

if TYPE_CHECKING:
    from croniter import croniter


class ScheduleType(str, enum.Enum):
    """How a schedule repeats; the values are django-q2's."""

    ONCE = "O"
    MINUTES = "I"
    HOURLY = "H"
    DAILY = "D"
    WEEKLY = "W"
    BIWEEKLY = "BW"
    MONTHLY = "M"
    BIMONTHLY = "BM"
    QUARTERLY = "Q"
    YEARLY = "Y"
    CRON = "C"

    def __str__(self) -> str:
        return self.value


_CALENDAR = {
    ScheduleType.DAILY: relativedelta(days=1),
    ScheduleType.WEEKLY: relativedelta(weeks=1),
    ScheduleType.BIWEEKLY: relativedelta(weeks=2),
    ScheduleType.MONTHLY: relativedelta(months=1),
    ScheduleType.BIMONTHLY: relativedelta(months=2),
    ScheduleType.QUARTERLY: relativedelta(months=3),
    ScheduleType.YEARLY: relativedelta(years=1),
}

# The longest one calendar step can be in elapsed time (a long month plus a DST hour); used to
# jump over long gaps without stepping through them one by one.
_LONGEST = {
    ScheduleType.DAILY: timedelta(days=1, hours=1),
    ScheduleType.WEEKLY: timedelta(weeks=1, hours=1),
    ScheduleType.BIWEEKLY: timedelta(weeks=2, hours=1),
    ScheduleType.MONTHLY: timedelta(days=31, hours=1),
    ScheduleType.BIMONTHLY: timedelta(days=62, hours=1),
    ScheduleType.QUARTERLY: timedelta(days=92, hours=1),
    ScheduleType.YEARLY: timedelta(days=366, hours=1),
}

# Steps taken one by one before advance() jumps ahead.
_MAX_STEPS = 1000
# Fall-back occurrences skipped in a row by a fixed-time cron; more means a broken tz.
_MAX_SKIPS = 100


def _schedule_type(value: ScheduleType | str) -> ScheduleType:
    try:
        return ScheduleType(value)
    except ValueError:
        choices = ", ".join(f"{t.value} ({t.name})" for t in ScheduleType)
        raise ConfigError(f"schedule_type must be one of {choices}, got {value!r}") from None


def _check_minutes(minutes: object) -> int:
    if isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1:
        raise ConfigError(f"minutes must be an integer >= 1 for a MINUTES schedule, got {minutes!r}")
    return minutes


def _croniter(cron: object, start: datetime) -> croniter:
    # Imported here, not at the top: croniter's import runs platform.architecture(), which
    # forks `file`, and every cluster start (most never parse a cron) would pay for it.
    from croniter import CroniterError, croniter

    if not isinstance(cron, str) or not cron.strip():
        raise ConfigError(f"cron must be a cron expression for a CRON schedule, got {cron!r}")
    try:
        return croniter(cron, start)
    except CroniterError as exc:
        raise ConfigError(f"cron {cron!r} is not a valid cron expression: {exc}") from None


def _check_aware(name: str, value: object) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ConfigError(f"{name} must be an aware datetime, got {value!r}")
    return value


def _check_tz(tz: object) -> tzinfo:
    if not isinstance(tz, tzinfo):
        raise ConfigError(f"tz must be a tzinfo, got {tz!r}")
    return tz


def _utc(value: datetime) -> datetime:
    """Return ``value`` in UTC; a local time in a DST gap moves forward by the gap."""
    return value.astimezone(timezone.utc)


def zone(name: str) -> tzinfo:
    """Return the IANA time zone ``name`` (``Europe/Berlin``); ConfigError names what is wrong."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(name, str) or not name:
        raise ConfigError(f"tz must be an IANA time zone name such as 'Europe/Berlin', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"tz {name!r} is not a known IANA time zone (e.g. 'Europe/Berlin', 'UTC')") from None


def validate(schedule_type: ScheduleType | str, minutes: int | None, cron: str | None) -> None:
    """Raise ConfigError unless ``minutes``/``cron`` suit ``schedule_type``."""
    kind = _schedule_type(schedule_type)
    if kind is ScheduleType.MINUTES:
        _check_minutes(minutes)
    elif kind is ScheduleType.CRON:
        # A valid expression may still never match (Feb 30): find one run to be sure.
        from croniter import CroniterError

        now = datetime.now(timezone.utc)
        try:
            _croniter(cron, now).get_next(datetime)
        except CroniterError:
            raise ConfigError(f"cron {cron!r} never runs") from None


def _is_repeated(value: datetime) -> bool:
    """Return True for the second pass through a wall-clock time when the clock falls back."""
    return value.fold == 1 and value.replace(fold=0).utcoffset() != value.utcoffset()


def _cron_next(cron: str | None, previous: datetime, tz: tzinfo) -> datetime:
    from croniter import CroniterError

    it = _croniter(cron, previous.astimezone(tz))
    minute, hour = it.expressions[:2]
    fixed_time = not (str(minute).startswith("*") or str(hour).startswith("*"))
    for _ in range(_MAX_SKIPS):
        try:
            candidate = it.get_next(datetime)
        except CroniterError:
            raise ConfigError(f"cron {cron!r} has no run after {previous.isoformat()}") from None
        if not (fixed_time and _is_repeated(candidate)):
            return _utc(candidate)
    raise ConfigError(f"cron {cron!r} found no run after {previous.isoformat()} in {tz}")


def _calendar_step(previous: datetime, step: relativedelta, tz: tzinfo) -> datetime:
    local = previous.astimezone(tz).replace(tzinfo=None)
    # fold=0: an ambiguous local time means its first occurrence.
    return _utc((local + step).replace(tzinfo=tz, fold=0))


def next_after(
    schedule_type: ScheduleType | str,
    previous: datetime,
    *,
    minutes: int | None = None,
    cron: str | None = None,
    tz: tzinfo,
) -> datetime | None:
    """Return the run that follows ``previous`` (aware, in UTC), or None for ONCE."""
    kind = _schedule_type(schedule_type)
    _check_aware("previous", previous)
    _check_tz(tz)
    if kind is ScheduleType.ONCE:
        return None
    if kind is ScheduleType.MINUTES:
        return _utc(previous) + timedelta(minutes=_check_minutes(minutes))
    if kind is ScheduleType.HOURLY:
        return _utc(previous) + timedelta(hours=1)
    if kind is ScheduleType.CRON:
        return _cron_next(cron, previous, tz)
    return _calendar_step(previous, _CALENDAR[kind], tz)


def advance(
    schedule_type: ScheduleType | str,
    next_run: datetime,
    now: datetime,
    *,
    catch_up: bool,
    minutes: int | None = None,
    cron: str | None = None,
    tz: tzinfo,
) -> datetime | None:
    """Return the schedule's new ``next_run`` after the run due at ``next_run`` fired.

    With ``catch_up`` the next step after ``next_run``, even if it is already past, so missed
    runs fire one per tick; without, the first step after ``now`` (missed runs are skipped).
    None for ONCE.
    """
    kind = _schedule_type(schedule_type)
    next_run = _utc(_check_aware("next_run", next_run))
    now = _utc(_check_aware("now", now))
    following = next_after(kind, next_run, minutes=minutes, cron=cron, tz=tz)
    if following is None or catch_up or following > now:
        return following
    if kind in (ScheduleType.MINUTES, ScheduleType.HOURLY):
        interval = following - next_run
        return next_run + ((now - next_run) // interval + 1) * interval
    if kind is ScheduleType.CRON:
        # The matches of a cron expression don't depend on where the search starts.
        return _cron_next(cron, now, tz)
    step = _CALENDAR[kind]
    gap = now - next_run
    current = following
    if gap > _MAX_STEPS * _LONGEST[kind]:
        # A schedule off for a very long time: jump close to now from the anchor. k steps take
        # at most k * _LONGEST, so the landing point is still not after now.
        k = gap // _LONGEST[kind] - 1
        current = _calendar_step(next_run, step * k, tz)
    while current <= now:
        following = _calendar_step(current, step, tz)
        if following <= current:  # Can't happen with a sane tz; never loop forever.
            raise ConfigError(f"schedule does not advance past {current.isoformat()} in {tz}")
        current = following
    return current


def is_due(next_run: datetime | None, now: datetime) -> bool:
    """Return True when a run at ``next_run`` should fire at ``now``."""
    # In UTC: two datetimes of one zone compare by wall clock, wrong in the repeated DST hour.
    return next_run is not None and _utc(next_run) <= _utc(now)
