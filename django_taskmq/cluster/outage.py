"""The cluster and its database: the cluster's connection options, a start-up check, and failure
logs that do not flood.

* :func:`prepare` runs in ``qcluster`` before any connection opens (the forked children inherit
  it). On SQLite it makes the cluster's own connections take the write lock at ``BEGIN``
  (``transaction_mode`` ``IMMEDIATE``) and wait for it (a busy timeout of at least
  :data:`~django_taskmq.brokers.orm.sqlite.SQLITE_BUSY_TIMEOUT`), whatever ``DATABASES`` says; on PostgreSQL it bounds the time a
  connection attempt may take (``connect_timeout``) and makes a connection whose far side went
  silent fail within ``TASKMQ['dead_connection_timeout']`` (TCP keepalives and ``tcp_user_timeout``,
  see :func:`~django_taskmq.policy.connections.keepalive_options`), each option unless the
  project set it in ``OPTIONS``.
* :func:`bound_statements` runs at the start of each of the cluster's own processes (sentinel,
  monitor, pusher, scheduler; never a worker, whose tasks' queries are the user's): from then on the
  statements of that process's connections end within a bound (see ``cluster/statement_clock.py``).
* :func:`~django_taskmq.brokers.problems.check` (imported here, as :func:`close_quietly` is) opens a
  connection, runs a trivial query and looks for the app's tables. It returns one line saying what is
  wrong, or None.
* :class:`~django_taskmq.brokers.outage.FailureLog` (imported here for the cluster's components) logs one
  component's failures while the database is away without flooding the log.

What differs per engine is its dialect's (:meth:`.Dialect.prepare`, ``brokers/orm/``).
"""

from __future__ import annotations

import os

from django.db import connections
from django.db.backends.signals import connection_created

from ..brokers import database
from ..brokers.outage import FailureLog, cause  # the cluster's components reach them here
from ..brokers.problems import check, close_quietly  # (ditto)
from ..conf import DEAD_CONNECTION_TIMEOUT, Settings
from ..policy.lease import statement_bound

__all__ = ["FailureLog", "bound_statements", "cause", "check", "close_quietly", "prepare", "unbound_statements"]

# alias -> (pid, seconds): the process that asked for the bound (a forked child does not inherit it)
_bounds: dict[str, tuple[int, float]] = {}


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
    tune = database.tune_connections(alias, options, dead_connection_timeout)
    if tune is None:  # an engine the broker refuses (a system check says why)
        return

    def connected(sender, connection, **kwargs) -> None:
        if connection.alias == alias:
            tune(connection)
            pid, seconds = _bounds.get(alias, (None, 0.0))
            if pid == os.getpid() and not database.bound_statements(connection, seconds):
                from .statement_clock import clock_for

                clock_for(seconds).watch(connection)

    # One receiver per alias (the latest call's), for the connections opened from now on.
    uid = f"django_taskmq.outage.prepare:{alias}"
    connection_created.disconnect(dispatch_uid=uid)
    connection_created.connect(connected, weak=False, dispatch_uid=uid)
    close_quietly(alias)
    settings_dict["OPTIONS"] = options
    if conn.settings_dict is not settings_dict:  # a wrapper built from a copy (tests overriding DATABASES)
        conn.settings_dict["OPTIONS"] = dict(options)


def bound_statements(settings: Settings) -> None:
    """From now on, in this process only, end the statements and commits of its connections to the
    cluster's database that run for longer than :func:`~django_taskmq.policy.lease.statement_bound`
    with an error (the caller retries on a new connection, as after a restart). Call after
    :func:`prepare`, before this process connects."""
    _bounds[settings.database] = (os.getpid(), statement_bound(settings.lease))


def unbound_statements(settings: Settings) -> None:
    """Undo :func:`bound_statements` in this process: connections opened from now on are not bounded
    (a sentinel run inside another program, a test, leaves that program's connections as they were)."""
    if _bounds.get(settings.database, (None,))[0] == os.getpid():
        del _bounds[settings.database]


def forget(alias: str) -> None:
    """Close this thread's connection to ``alias`` and drop Django's object for it, so a child forked
    afterwards starts from a new one: not a copy carrying this process's statement clock."""
    close_quietly(alias)
    try:
        del connections[alias]
    except AttributeError:  # never made in this thread
        pass
