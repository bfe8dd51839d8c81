"""The time the broker compares and stores: one clock per engine, written into its statements.

On a server engine (PostgreSQL) many hosts share one database, and their clocks disagree: every
time the queue decides with (leases, visibility, expiry, retries, rate windows, heartbeats,
schedules, key TTLs) is the database's, read by the statement that uses it
(``statement_timestamp()``: one value per statement, usable by an index), so no statement costs a
round trip more. SQLite is one host: its clock is the host's, passed as a parameter.

A broker asks its engine's :class:`Clock` for SQL fragments: :meth:`Clock.at` (epoch seconds, the
float columns such as ``visible_at`` and ``lease_until``) and :meth:`Clock.stamp` (a datetime, the
``DateTimeField`` columns). Each fragment comes with its parameters, one placeholder per fragment,
so a statement's text is the same at every run (it can be prepared once). A new engine adds its
clock to :data:`CLOCKS`.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from ..exceptions import ConfigError
from ..policy.times import FromNow

__all__ = ["CLOCKS", "Clock", "DatabaseClock", "FromNow", "HostClock", "MysqlClock", "Skew", "as_datetime", "clock_for"]


@dataclass(frozen=True)
class Skew:
    """One measurement of this host's clock against the queue's clock (seconds)."""

    seconds: float  # host minus database: positive when this host is ahead
    uncertainty: float  # half the round trip of the reading: the true skew is within +- this


class Clock:
    """Where one engine's statements read the time. Subclasses implement every method."""

    #: True when the clock is this host's (one host: nothing to measure or correct).
    local: bool = True

    def at(self, seconds: float = 0.0) -> tuple[str, list[Any]]:
        """Return (SQL, parameters): epoch seconds ``seconds`` after the statement's time."""
        raise NotImplementedError(f"{type(self).__name__} must implement at()")

    def stamp(self, connection: Any, seconds: float = 0.0) -> tuple[str, list[Any]]:
        """Return (SQL, parameters): the datetime ``seconds`` after the statement's time."""
        raise NotImplementedError(f"{type(self).__name__} must implement stamp()")

    def value(self, connection: Any, value: float) -> tuple[str, list[Any]]:
        """Return (SQL, parameters) that store a job time: a :class:`FromNow` counts from the
        statement's time, any other number is an absolute time."""
        if isinstance(value, FromNow):
            return self.at(value.seconds)
        return "%s", [value]

    def now(self, connection: Any) -> float:
        """Return the clock's time now, epoch seconds (a query on a database clock: off hot paths)."""
        raise NotImplementedError(f"{type(self).__name__} must implement now()")

    def local_now(self) -> float | None:
        """Return this host's time if the clock is this host's; None: statements read the database's."""
        return time.time() if self.local else None

    def skew(self, connection: Any) -> Skew | None:
        """Measure this host's clock minus the clock's (None: the clock is this host's)."""
        return None


class HostClock(Clock):
    """This host's clock (SQLite: the database file lives on one host)."""

    local = True

    def at(self, seconds: float = 0.0) -> tuple[str, list[Any]]:
        return "%s", [time.time() + seconds]

    def stamp(self, connection: Any, seconds: float = 0.0) -> tuple[str, list[Any]]:
        moment = timezone.now() + datetime.timedelta(seconds=seconds)
        return "%s", [connection.ops.adapt_datetimefield_value(moment)]

    def value(self, connection: Any, value: float) -> tuple[str, list[Any]]:
        return "%s", [float(value)]

    def now(self, connection: Any) -> float:
        return time.time()


class DatabaseClock(Clock):
    """The database server's clock, read by each statement.

    ``epoch`` and ``stamp_sql`` are the engine's SQL for "the statement's time plus %s seconds",
    as epoch seconds and as a datetime; ``read`` selects the server's time now (epoch seconds).
    """

    local = False

    def __init__(self, epoch: str, stamp_sql: str, read: str) -> None:
        self.epoch = epoch
        self.stamp_sql = stamp_sql
        self.read = read

    def at(self, seconds: float = 0.0) -> tuple[str, list[Any]]:
        return self.epoch, [float(seconds)]

    def stamp(self, connection: Any, seconds: float = 0.0) -> tuple[str, list[Any]]:
        return self.stamp_sql, [float(seconds)]

    def now(self, connection: Any) -> float:
        with connection.cursor() as cursor:
            cursor.execute(self.read)
            return float(cursor.fetchone()[0])

    def skew(self, connection: Any) -> Skew:
        """One reading: this host's time at the middle of the round trip minus the server's."""
        connection.ensure_connection()
        with connection.cursor() as cursor:
            before, sent = time.time(), time.monotonic()
            cursor.execute(self.read)
            server = float(cursor.fetchone()[0])
            trip = time.monotonic() - sent
        # The server read its clock somewhere inside the round trip; the middle is the best guess,
        # and the host's end of it is measured on the monotonic clock (wall clocks may step).
        return Skew(seconds=before + trip / 2 - server, uncertainty=trip / 2)


POSTGRESQL = DatabaseClock(
    # statement_timestamp() is stable within a statement: one time for every row it compares, and
    # an index condition can use it (clock_timestamp() is volatile: neither).
    epoch="(EXTRACT(EPOCH FROM statement_timestamp())::float8 + %s)",
    stamp_sql="(statement_timestamp() + %s * INTERVAL '1 second')",
    read="SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8",
)


class MysqlClock(DatabaseClock):
    """MySQL's and MariaDB's clock. ``UTC_TIMESTAMP(6)`` is read once per statement (as ``NOW()``);
    epoch seconds are counted from it without the session's time zone, which an hour of daylight
    saving time would make ambiguous. The ``DateTimeField`` columns hold UTC with ``USE_TZ`` (what
    Django's MySQL backend writes), the session's local time without."""

    def stamp(self, connection: Any, seconds: float = 0.0) -> tuple[str, list[Any]]:
        from django.conf import settings

        if settings.USE_TZ:
            return self.stamp_sql, [float(seconds)]
        return "(NOW(6) + INTERVAL ROUND(%s * 1000000) MICROSECOND)", [float(seconds)]


MYSQL = MysqlClock(
    # 1e6 is a DOUBLE literal: the result is a float, as the columns it is compared with.
    epoch="(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6 + %s)",
    stamp_sql="(UTC_TIMESTAMP(6) + INTERVAL ROUND(%s * 1000000) MICROSECOND)",
    read="SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6",
)
HOST = HostClock()
#: The clock of each engine (``connection.vendor``).
CLOCKS: dict[str, Clock] = {"postgresql": POSTGRESQL, "mysql": MYSQL, "sqlite": HOST}


def as_datetime(epoch: float) -> datetime.datetime:
    """Return the instant ``epoch`` as :func:`django.utils.timezone.now` gives times: aware (UTC)
    with ``USE_TZ``, naive local time without."""
    from django.conf import settings

    if settings.USE_TZ:
        return datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return datetime.datetime.fromtimestamp(epoch)


def clock_for(connection: Any) -> Clock:
    """Return the clock of Django's ``connection``; an engine without one is a ConfigError."""
    try:
        return CLOCKS[connection.vendor]
    except KeyError:
        raise ConfigError(f"django_taskmq has no clock for the database engine {connection.vendor!r} "
                          f"(database {connection.alias!r}); supported: {sorted(CLOCKS)}") from None
