"""PostgreSQL behind a connection pooler: whether the broker may prepare its statements on a connection.

A pooler in transaction mode (PgBouncer's usual set-up) hands each transaction of a client to
whichever server connection of its pool is free. What a session keeps between transactions
(server-side prepared statements, ``LISTEN``, ``SET``, session advisory locks, ``WITH HOLD``
cursors) stays on a server connection that other clients then use: a statement prepared by one
client collides with another's of the same name (``DuplicatePreparedStatement``), or is missing
where the client's next transaction lands (``InvalidSqlStatementName``).

How a pooler is recognised: when a session starts, PostgreSQL sends the client its process id
(what psycopg's ``info.backend_pid`` reports). A pooler cannot pass that on, since its client has
no one server process, so it sends one of its own making, and ``pg_backend_pid()`` then names
another process. A plain TCP proxy or a NAT passes it on unchanged: there the session is the
client's own. One query per new connection, made the first time the broker's hot statements run on
it (never on a web process's connection that only enqueues).

Whatever the detection misses, the first error of either kind turns preparing off for good in the
process, with one warning, and is raised as an ``OperationalError`` so the caller retries it as it
retries a lost connection (a prepared-statement error says nothing about the job being recorded).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from django.db import OperationalError

logger = logging.getLogger(__name__)

# Said once on a direct connection whose hot statements are prepared: plan each once, with its
# parameters unknown. PostgreSQL's default ("auto") kept re-planning the claims at every run, since
# a generic plan's estimates (a LIMIT or an array of unknown size) look dearer than a custom plan's,
# yet both plans are the same index scans: planning the one-statement claim cost 0.9 ms of server
# CPU a claim for an execution of 0.6 (docs/performance.rst). Only prepared statements are planned
# under this setting, and only the broker's hot statements are prepared on its connections.
GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"
# Said besides it on the pusher's connections, which run nothing but the broker's statements
# (Preparing.dedicate). A claim's generic plan estimates its LIMIT (unknown) at a tenth of the
# ready rows the statistics count, for each queue: with the statistics of a backlog of some
# thousands of jobs its cost passes jit_above_cost, and PostgreSQL compiled the claim at every
# execution, 30 to 60 ms of JIT for a statement that runs in 2 (docs/decisions.rst). A worker's
# or the monitor's connection is also the tasks' and the hooks', whose queries keep the server's JIT.
NO_JIT = "SET jit = off"
# SQLSTATEs of a prepared statement that a pooler lost or mixed up: duplicate_prepared_statement,
# invalid_sql_statement_name.
PREPARE_ERRORS = frozenset({"42P05", "26000"})


def behind_pooler(raw: Any) -> bool:
    """Return True when the psycopg 3 connection ``raw`` reaches PostgreSQL through a pooler that
    owns the session (the process id it was given is not its server process's)."""
    with raw.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    return pid != raw.info.backend_pid


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg error, or of the one a Django database error wraps; else None."""
    for error in (exc, exc.__cause__):
        state = getattr(error, "sqlstate", None)
        if state:
            return state
    return None


class Preparing:
    """Whether one database alias's hot statements may be prepared on the server, per connection.

    ``enabled`` is ``TASKMQ['prepared_statements']``: with True a connection through a pooler never
    prepares, and psycopg's own automatic preparing (``OPTIONS['prepare_threshold']``) is turned off
    on it; ``"always"`` prepares without looking (a pooler that carries prepared statements, such as
    PgBouncer 1.21+ with ``max_prepared_statements``); False never prepares. Whatever it is, a lost
    prepared statement turns preparing off for good (:meth:`failed`).
    """

    def __init__(self, alias: str, enabled: bool | str) -> None:
        self.alias = alias
        self.enabled = enabled
        self.broken = False  # a prepared statement failed: none again in this process
        self._verdicts: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        self._told = False
        #: What a direct connection that prepares is told once (see :meth:`dedicate`).
        self.session: tuple[str, ...] = (GENERIC_PLANS,)

    def dedicate(self) -> None:
        """This process's connections run the broker's statements only (the pusher's): they are
        also told :data:`NO_JIT`, from their next connection on."""
        self.session = (GENERIC_PLANS, NO_JIT)

    def allowed(self, raw: Any) -> bool:
        """Return True when statements may be prepared on the psycopg 3 connection ``raw``."""
        verdict = self._verdicts.get(raw)
        if verdict is not None:
            return verdict and not self.broken
        if self.enabled == "always":
            verdict = True
        elif not self.enabled and raw.prepare_threshold is None:
            verdict = False  # nothing would be prepared there: no need to look
        elif behind_pooler(raw):
            raw.prepare_threshold = None  # psycopg prepares nothing, even when asked
            verdict = False
            if not self._told:
                self._told = True
                logger.info("database %r is reached through a connection pooler: no server-side prepared "
                            "statements on its connections", self.alias)
        else:
            verdict = bool(self.enabled)
            if verdict:  # a session of its own (not "always": a pooler's session is others' too)
                with raw.cursor() as cursor:
                    for statement in self.session:
                        cursor.execute(statement)
        self._verdicts[raw] = verdict
        return verdict and not self.broken

    def failed(self, exc: BaseException, raw: Any) -> BaseException | None:
        """After ``exc`` on the connection ``raw``: when it says a prepared statement was lost or
        mixed up, turn preparing off for good (one warning) and return the error to raise instead;
        else None."""
        if sqlstate(exc) not in PREPARE_ERRORS:
            return None
        if raw is not None:
            raw.prepare_threshold = None
        if not self.broken:
            self.broken = True
            logger.warning("database %r lost or mixed up a prepared statement (%s): a connection pooler in "
                           "transaction mode? Not preparing statements any more in this process; the "
                           "statement is retried", self.alias, str(exc).strip().splitlines()[0] if str(exc).strip()
                           else type(exc).__name__)
        error = OperationalError(f"prepared statement lost on database {self.alias!r} (statements are no longer "
                                 "prepared): retry")
        error.__cause__ = exc
        return error


_by_alias: dict[str, Preparing] = {}


def preparing(alias: str, enabled: bool | str) -> Preparing:
    """The process's :class:`Preparing` for ``alias`` (one per alias, so "for good" outlives a broker
    object; a changed ``enabled`` makes a new one)."""
    found = _by_alias.get(alias)
    if found is None or found.enabled != enabled:
        found = _by_alias[alias] = Preparing(alias, enabled)
    return found
