"""The cluster's own statements end within a bound, whatever the link to the server does.

A connection may hang with nothing for TCP to notice: a proxy or a NAT that acknowledges what it
receives and never forwards it, a server that accepts and never answers, a lock held by another
session. TCP keepalives and ``tcp_user_timeout`` (``TASKMQ['dead_connection_timeout']``) end a
link whose far side vanished, not one that answers the kernel and nothing else. libpq has no read
timeout, and mysqlclient's ``read_timeout`` is a connect option that a forked worker, whose tasks'
queries must not be cut, would inherit. So a :class:`StatementClock` thread in each of the cluster's
own processes (sentinel, monitor, pusher, scheduler; never a worker) times every statement and
commit of the connections that process opened, and shuts the socket of one that runs longer than
its bound (:func:`~django_taskmq.policy.lease.statement_bound`): the driver raises a lost-link
error, the caller drops the connection and retries on a new one, as after a restart.

SQLite has no socket: there the connection's busy timeout is the bound (see
:meth:`.Dialect.bound_statements`), the only wait that can be long.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from .poller import pause

logger = logging.getLogger(__name__)


class StatementClock:
    """Times the statements of the connections given to :meth:`watch` (Django's, connected) and
    cuts the link of one that runs for more than ``bound`` seconds."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.pid = os.getpid()  # a forked child has a clock of its own, if any (see clock_for)
        # id(Django connection) -> (monotonic start, the connection) while a statement or commit runs
        self.running: dict[int, tuple[float, Any]] = {}
        self.cuts = 0
        self._thread: threading.Thread | None = None

    def watch(self, connection: Any) -> None:
        """Time every statement, commit and rollback of ``connection`` from now on (call again after
        each reconnect: the Django connection keeps its wrappers, its socket is new)."""
        # Read now: mysqlclient refuses any call on a connection while another thread's statement runs.
        connection._taskmq_socket = connection.connection.fileno()
        if getattr(connection, "_taskmq_clock", None) is self:
            return
        connection._taskmq_clock = self
        connection.execute_wrappers.append(self._statement)
        for name in ("commit", "rollback"):  # not statements to Django: no wrapper sees them
            setattr(connection, name, self._timed(connection, getattr(connection, name)))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="taskmq-statement-clock", daemon=True)
            self._thread.start()

    def _statement(self, execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
        return self._timed(context["connection"], execute)(sql, params, many, context)

    def _timed(self, connection: Any, call: Callable) -> Callable:
        key = id(connection)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if key in self.running:  # a statement inside a timed call (a commit's hook): timed already
                return call(*args, **kwargs)
            self.running[key] = (time.monotonic(), connection)
            try:
                return call(*args, **kwargs)
            finally:
                self.running.pop(key, None)

        return timed

    def _run(self) -> None:
        while True:
            pause(min(1.0, self.bound / 4))
            try:
                self.check(time.monotonic())
            except Exception:  # the clock must outlive any surprise: log it, look again
                logger.exception("statement clock: checking the running statements failed")

    def check(self, now: float) -> None:
        """Cut every connection whose statement has run for more than the bound."""
        for key, (started, connection) in list(self.running.items()):
            if now - started > self.bound and self.running.get(key, (None,))[0] == started:
                self.running.pop(key, None)  # once per statement
                self.cut(connection, now - started)

    def cut(self, connection: Any, took: float) -> None:
        """Shut the socket of ``connection``: its statement fails at once with a lost-link error."""
        try:
            with socket.socket(fileno=os.dup(connection._taskmq_socket)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:  # closed meanwhile: nothing to cut
            logger.debug("statement clock: could not cut the connection to %r: %s", connection.alias, exc)
            return
        self.cuts += 1
        logger.warning("a statement on database %r ran for %.1f s, longer than the cluster's bound of %.1f s "
                       "(a lock, or a link that no longer answers): its connection was cut; the statement is "
                       "retried on a new one", connection.alias, took, self.bound)


_clock: StatementClock | None = None


def clock_for(bound: float) -> StatementClock:
    """This process's clock (a new one in a forked child, whose parent's thread did not follow it)."""
    global _clock
    if _clock is None or _clock.pid != os.getpid() or _clock.bound != bound:
        _clock = StatementClock(bound)
    return _clock
