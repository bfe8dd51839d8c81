"""Failure logs that do not flood: one component's failures while the database is away, the first
as one line, then at most one line every :data:`LOG_EVERY` seconds with a count, and one line when
it works again. Used by the cluster's components and by the brokers' wakers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..policy.connections import disconnect

LOG_EVERY = 5.0  # seconds between two lines of one component while its failures go on
CAUSE_LENGTH = 300


def cause(exc: BaseException, kind: bool = True) -> str:
    """One line for ``exc``: its class name (unless ``kind`` is False) and the first line of its text."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if not kind:
        return (text or type(exc).__name__)[:CAUSE_LENGTH]
    return f"{type(exc).__name__}: {text}"[:CAUSE_LENGTH] if text else type(exc).__name__


def _database_errors() -> tuple[type[BaseException], ...]:
    """The exception classes that mean "the database failed" (not a bug in the code that called it)."""
    import sqlite3

    from django.db import Error

    found: list[type[BaseException]] = [Error, sqlite3.Error, OSError]
    for module in ("psycopg", "psycopg2"):
        try:
            found.append(__import__(module).Error)
        except ImportError:
            pass
    return tuple(found)


def is_database_error(exc: BaseException) -> bool:
    return isinstance(exc, _database_errors())


class FailureLog:
    """Log the failures of one component (``"pusher"``, ``"monitor"``, ...) without flooding the log.

    Call :meth:`failed` after each failed attempt and :meth:`succeeded` after each one that worked.
    The first failure of an outage is logged as one line, with what ``meanwhile`` says and, when the
    error means the connection is gone (:func:`~django_taskmq.policy.connections.disconnect`), why
    (a database error without its traceback,
    unless ``logger`` is enabled for DEBUG; any other error with it, once: it is likely a bug). Then
    at most one line every ``every`` seconds, with the number of failures since the previous line.
    The first success after failures logs one line with their count and how long they lasted.
    An outage that begins less than ``every`` seconds after the previous line, for the same reason
    as the last outage told (a reconnect storm: sessions ended twice a second), logs nothing, nor
    does its end: the first success once the rate allows says how many outages and failures there
    were since. An outage for another reason (the server, back, is read-only) is told at once.

    Each method returns the line it logged (None when it logged nothing). The clock is a parameter so
    the rate can be checked without waiting.
    """

    def __init__(self, component: str, logger: logging.Logger, every: float = LOG_EVERY,
                 clock: Callable[[], float] = time.monotonic, meanwhile: str = "") -> None:
        self.component = component
        self.meanwhile = meanwhile  # what the component does while it fails, said in the first line
        self.logger = logger
        self.every = every
        self.clock = clock
        self.failures = 0  # failed attempts in the current outage
        self.since: float | None = None  # clock time of the current outage's first failure
        self.last: str = ""  # what failed last, and why
        self._last_logged = ""  # the ``last`` of the previous line
        self._unlogged = 0  # failures since the last line
        self._logged_at = -float("inf")  # clock time of the last line, of any kind
        self._storm_outages = 0  # outages since the last line that ended without a line of their own
        self._storm_failures = 0  # ... their failures
        self._storm_since: float | None = None  # ... when the first of them began
        self._storm_until = 0.0  # ... when the last of them ended
        self._announced = False  # the current outage's first failure was logged
        self._told_reason = ""  # why the last outage told began
        self._database = False  # whether a database error was among the failures

    @property
    def failing(self) -> bool:
        """True between a failure and the next success."""
        return self.since is not None

    def down_for(self) -> float:
        """Seconds since the first failure of the current outage (0 when nothing fails)."""
        return 0.0 if self.since is None else self.clock() - self.since

    def failed(self, what: str, exc: BaseException) -> str | None:
        """Count a failed attempt at ``what`` (``"heartbeat"``, ``"claim"``, ...) that raised ``exc``."""
        now = self.clock()
        database = is_database_error(exc)
        self.failures += 1
        self._database = self._database or database
        self.last = f"{what}: {cause(exc)}"
        if self.since is None:
            self.since = now
            self._unlogged = 0
            # A lost connection, a server that is no longer the primary or is shutting down: say so.
            reason = disconnect(exc)
            why = reason or cause(exc)
            self._announced = now - self._logged_at >= self.every or why != self._told_reason
            if not self._announced:  # a storm: told by a later line
                self._unlogged = 1
                return None
            self._told_reason = why
            self._logged_at = now
            self._last_logged = self.last
            retry = f"{reason}: reconnecting" if reason else "retrying"
            meanwhile = f"; {self.meanwhile}" if self.meanwhile else ""
            line = f"{self.component}: {self.last}; {retry}{meanwhile} (logging at most every {self.every:g} s)"
            show = not database or self.logger.isEnabledFor(logging.DEBUG)
            self.logger.warning("%s", line, exc_info=exc if show else None)
            return line
        self._unlogged += 1
        if now - self._logged_at < self.every:
            return None
        last = "the same error" if self.last == self._last_logged else self.last
        storm = f", after {self._storm_outages} short outage(s)" if self._storm_outages else ""
        line = (f"{self.component}: still failing, {self._unlogged} failure(s) in the last "
                f"{now - self._logged_at:.0f} s ({self.failures} in {now - self.since:.0f} s{storm}); last: {last}")
        self._last_logged = self.last
        self._logged_at = now
        self._unlogged = 0
        self.logger.warning("%s", line)
        return line

    def succeeded(self) -> str | None:
        """Note a successful attempt; after failures, log that the component works again (at the
        rate: after a storm, at the first success once the rate allows, for all its outages)."""
        if self.since is None and not self._storm_outages:
            return None
        now = self.clock()
        if self.since is not None:  # this outage ends
            self._storm_outages += 1
            self._storm_failures += self.failures
            self._storm_since = self.since if self._storm_since is None else self._storm_since
            self._storm_until = now
            self.failures = 0
            self.since = None
            self._unlogged = 0
            if self._announced:  # its first failure was told: its end is, at once
                self._announced = False
            elif now - self._logged_at < self.every:
                return None
        elif now - self._logged_at < self.every:
            return None
        what = "database is back" if self._database else "working again"
        outages = f"{self._storm_outages} outage(s), " if self._storm_outages > 1 else ""
        assert self._storm_since is not None
        line = (f"{self.component}: {what} after {outages}{self._storm_failures} failure(s) in "
                f"{self._storm_until - self._storm_since:.0f} s")
        self._storm_outages = self._storm_failures = 0
        self._storm_since = None
        self._database = False
        self._logged_at = now
        self.logger.warning("%s", line)
        return line
