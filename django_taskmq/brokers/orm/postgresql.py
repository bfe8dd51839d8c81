"""PostgreSQL: what the ORM broker does differently on it, and how an idle pusher is woken.

Many hosts share one server: the clock is the server's (``statement_timestamp()``), a claim locks
the heads it reads (``FOR UPDATE SKIP LOCKED``) so concurrent clusters claim disjoint sets,
``GREATEST`` is the scalar maximum, and the hot statements are prepared (psycopg 3).

Waking: ``LISTEN`` on the channel a trigger on the job table notifies after each insert, on the
broker's connection or on ``TASKMQ['listen_database']``'s (a direct one, beside a pooled broker
alias). Before the first wait a probe (:mod:`.notify_probe`) checks that notifications arrive
there; where they do not (a pooler in transaction mode drops them without an error), one warning,
and the pusher polls.
"""

from __future__ import annotations

import functools
import logging
import select
from multiprocessing.connection import Connection
from typing import Any

from django.db import connections

from ...policy.connections import keepalive_options
from ..clock import POSTGRESQL
from .dialect import Dialect, register
from .notify_probe import PROBE_WAIT, probe
from .wakeup import Waker, sleep

logger = logging.getLogger(__name__)

CHANNEL = "taskmq_job"
CONNECT_TIMEOUT = 5  # seconds a cluster's connection attempt may take, unless the project says


class PostgresqlDialect(Dialect):
    vendor = "postgresql"
    clock = POSTGRESQL
    row_locks = True
    greatest = "GREATEST"

    def waker(self, broker: Any, burst: bool = False) -> Waker:
        alias = broker.settings.listen_database
        listener = connections[alias] if alias is not None and alias != broker.alias else None
        # A burst naps 50 ms at most, and only while its last tasks run: it polls, rather than
        # spend up to PROBE_WAIT checking that LISTEN works.
        return ListenWaker(broker.connection, listener, broker.alias, listen=not burst)

    def prepared_cursor_class(self) -> type | None:
        return _prepared_cursor_class()

    def prepare(self, options: dict[str, Any], dead_connection_timeout: float | None = None) -> None:
        options.setdefault("connect_timeout", CONNECT_TIMEOUT)
        keepalives = keepalive_options(dead_connection_timeout)
        if _libpq_version() < 120000:  # tcp_user_timeout is libpq 12's: an older one refuses to connect
            keepalives.pop("tcp_user_timeout", None)
        for key, value in keepalives.items():
            options.setdefault(key, value)


register(PostgresqlDialect())


class ListenWaker(Waker):
    """Wakes on a ``NOTIFY`` from the job table's insert trigger, once a probe found that they arrive."""

    def __init__(self, connection, listener=None, broker_alias: str | None = None, listen: bool = True) -> None:
        super().__init__(connection)
        # The connection that LISTENs (the broker's unless TASKMQ['listen_database']), and the
        # alias the probe's NOTIFY goes through (the broker's).
        self.listener = connection if listener is None else listener
        self.broker_alias = broker_alias or connection.alias
        # What the probe found (None: not run yet); False without it when ``listen`` is.
        self.listens: bool | None = None if listen else False
        self._announced = False
        self._listening = False
        self._notified = False

    def _broken(self) -> None:
        self._listening = False
        if self.listener is not self.connection:  # nobody else would notice it broke
            try:
                self.listener.close()
            except Exception:
                pass

    def _wait(self, timeout: float, pipe: Connection | None) -> None:
        if self.listens is None:
            # The probe may block for PROBE_WAIT; it gives way when the sentinel speaks (a stop),
            # and runs again at a later wait.
            found = self._probe(pipe)
            if found is None:
                sleep(timeout, pipe)
                return
            self.listens = found
        if not self.listens:
            sleep(timeout, pipe)
            return
        raw = self.listener.connection
        if not self._listening or raw is None or raw.closed:
            self.listener.ensure_connection()
            raw = self.listener.connection
            # Notifications that arrive while the pusher runs queries are dispatched to this
            # handler by psycopg; the select below only covers the idle time in between.
            raw.add_notify_handler(self._on_notify)
            with self.listener.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")
            self._listening = True
            if not self._announced:  # once LISTEN is in force: from this line on, an insert wakes the pusher
                self._announced = True
                logger.info("pusher: idle wake-ups by LISTEN on database %s", self._where())
        if self._notified:
            self._notified = False
            self.woken = True
            return
        readers = [raw.fileno()] + ([pipe.fileno()] if pipe is not None else [])
        ready, _, _ = select.select(readers, [], [], timeout)
        if raw.fileno() in ready:
            # Read what arrived and drain the libpq queue: one wake-up covers many inserts.
            raw.pgconn.consume_input()
            while raw.pgconn.notifies() is not None:
                self.woken = True
        self._notified = False

    def _on_notify(self, notification) -> None:
        self._notified = True

    def _where(self) -> str:
        where = repr(self.listener.alias)
        return f"TASKMQ['listen_database'] {where}" if self.listener is not self.connection else where

    def _probe(self, pipe: Connection | None) -> bool | None:
        """Check that notifications reach the listener; if not, say so (once) and poll for good.
        None: the sentinel spoke first."""
        found = probe(self.listener, self.broker_alias, pipe=pipe)
        if found is not False:
            return found
        where = self._where()
        advice = ("check that it reaches the broker's database directly, not through a pooler"
                  if self.listener is not self.connection else
                  "set TASKMQ['listen_database'] to an alias that reaches PostgreSQL directly")
        logger.warning("pusher: LISTEN on database %s received no notification within %g s (a connection pooler in "
                       "transaction mode drops them): an idle cluster looks for new work every TASKMQ['poll'] seconds "
                       "instead; %s", where, PROBE_WAIT, advice)
        return False


@functools.cache
def _prepared_cursor_class() -> type | None:
    """psycopg 3's server-binding cursor, whose ``execute`` prepares every statement it runs
    (``executemany`` does already); None with psycopg2."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return None
    import psycopg

    class PreparedCursor(psycopg.Cursor):
        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True, binary=binary)

    return PreparedCursor


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
