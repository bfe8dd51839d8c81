"""The cluster and its database: the cluster's connection options, a start-up check, and failure
logs that do not flood.

* :func:`prepare` runs in ``qcluster`` before any connection opens (the forked children inherit
  it). On SQLite it makes the cluster's own connections take the write lock at ``BEGIN``
  (``transaction_mode`` ``IMMEDIATE``) and wait for it (a busy timeout of at least
  :data:`SQLITE_BUSY_TIMEOUT`), whatever ``DATABASES`` says; on PostgreSQL it bounds the time a
  connection attempt may take (``connect_timeout``) and makes a connection whose far side went
  silent fail within ``TASKMQ['dead_connection_timeout']`` (TCP keepalives and ``tcp_user_timeout``,
  see :func:`~django_taskmq.policy.connections.keepalive_options`), each option unless the
  project set it in ``OPTIONS``.
* :func:`check` opens a connection, runs a trivial query and looks for the app's tables. It returns
  one line saying what is wrong, or None.
* :class:`FailureLog` logs one component's failures while the database is away: the first one as one
  line, then at most one line every :data:`LOG_EVERY` seconds with a count, and one line when it
  works again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from django.db import connections

from ..conf import DEAD_CONNECTION_TIMEOUT
from ..policy.connections import disconnect, keepalive_options

SQLITE_BUSY_TIMEOUT = 20.0  # seconds a cluster's SQLite connection waits for the write lock, at least
CONNECT_TIMEOUT = 5  # seconds a cluster's PostgreSQL connection attempt may take, unless the project says
LOG_EVERY = 5.0  # seconds between two lines of one component while its failures go on
CAUSE_LENGTH = 300


def prepare(alias: str, dead_connection_timeout: float | None = DEAD_CONNECTION_TIMEOUT) -> None:
    """Set the options of the cluster's connections to ``alias``; call before any connection opens.

    The change is made in the settings dict every connection to ``alias`` reads when it connects
    (``connections.settings[alias]``, the same object as ``settings.DATABASES[alias]``), so it holds
    for the connections this process and its forked children open afterwards. An open connection
    is closed first. Idempotent.
    """
    settings_dict = connections.settings[alias]
    conn = connections[alias]
    options = dict(settings_dict.get("OPTIONS") or {})  # a copy: the dict may be shared with another alias
    if conn.vendor == "sqlite":
        # Every transaction of the cluster writes or must see the latest commit: taking the lock at
        # BEGIN makes a busy writer wait for the busy timeout instead of failing at once with
        # "database is locked" when it would upgrade a read lock.
        options["transaction_mode"] = "IMMEDIATE"
        options["timeout"] = max(float(options.get("timeout", 5.0)), SQLITE_BUSY_TIMEOUT)
    elif conn.vendor == "postgresql":
        options.setdefault("connect_timeout", CONNECT_TIMEOUT)
        keepalives = keepalive_options(dead_connection_timeout)
        if _libpq_version() < 120000:  # tcp_user_timeout is libpq 12's: an older one refuses to connect
            keepalives.pop("tcp_user_timeout", None)
        for key, value in keepalives.items():
            options.setdefault(key, value)
    else:
        return
    close_quietly(alias)
    settings_dict["OPTIONS"] = options
    if conn.settings_dict is not settings_dict:  # a wrapper built from a copy (tests overriding DATABASES)
        conn.settings_dict["OPTIONS"] = dict(options)


def _libpq_version() -> int:
    """The version of the libpq the PostgreSQL driver uses (120000 for 12.0); 0 when unknown."""
    try:
        import psycopg

        return psycopg.pq.version()
    except ImportError:
        pass
    try:
        import psycopg2.extensions

        return psycopg2.extensions.libpq_version()
    except ImportError:
        return 0


def check(alias: str, where: str) -> str | None:
    """Return None when the cluster can use the database ``alias``, else one line saying why not;
    ``where`` names it (``Broker.describe()``).

    Connects (within the connect timeout :func:`prepare` set), runs ``SELECT 1`` and checks that
    the tables of django_taskmq exist. The connection is closed afterwards.
    """
    from django.apps import apps

    conn = connections[alias]
    where = f"database {where}"
    name = str(conn.settings_dict.get("NAME") or "")
    if conn.vendor == "sqlite" and not conn.is_in_memory_db() and not name.startswith("file:") \
            and not os.path.exists(name):
        # sqlite3 would create an empty file; say what is wrong instead.
        return f"cannot reach {where}: the file does not exist (run manage.py migrate)"
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
            tables = set(conn.introspection.table_names(cursor))
    except Exception as exc:
        return f"cannot reach {where}: {cause(exc, kind=False)}"
    finally:
        close_quietly(alias)
    from ..models import Job

    models = apps.get_app_config("django_taskmq").get_models()
    missing = sorted((m is not Job, m._meta.db_table) for m in models if m._meta.db_table not in tables)
    if missing:
        others = f" and {len(missing) - 1} other table(s) of django_taskmq" if len(missing) > 1 else ""
        return f"{where} has no table {missing[0][1]}{others}: run manage.py migrate"
    return None


def close_quietly(alias: str) -> None:
    """Close the connection to ``alias`` so the next query reconnects; a broken one may fail to close."""
    try:
        connections[alias].close()
    except Exception:
        pass


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
        self._logged_at = 0.0
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
            self.since = self._logged_at = now
            self._unlogged = 0
            self._last_logged = self.last
            # A lost connection, a server that is no longer the primary or is shutting down: say so.
            reason = disconnect(exc)
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
        line = (f"{self.component}: still failing, {self._unlogged} failure(s) in the last "
                f"{now - self._logged_at:.0f} s ({self.failures} in {now - self.since:.0f} s); last: {last}")
        self._last_logged = self.last
        self._logged_at = now
        self._unlogged = 0
        self.logger.warning("%s", line)
        return line

    def succeeded(self) -> str | None:
        """Note a successful attempt; after failures, log that the component works again."""
        if self.since is None:
            return None
        what = "database is back" if self._database else "working again"
        line = (f"{self.component}: {what} after {self.failures} failure(s) in "
                f"{self.clock() - self.since:.0f} s")
        self.failures = 0
        self.since = None
        self._unlogged = 0
        self._database = False
        self.logger.warning("%s", line)
        return line
