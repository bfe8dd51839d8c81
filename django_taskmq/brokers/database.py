"""What the rest of the package asks of the broker's database, per engine, without knowing the
engines: the system checks, the start-up check, the cluster's connection set-up and the worker's
short lock wait ask here, never ``brokers/orm/`` (its dialects and engine modules are the ORM
broker's own). Each function takes a database alias; an engine the broker does not run on
answers "nothing to do" (:func:`engine_problem` says why it is refused).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from django.db import connections

from .orm.dialect import ADVICE, dialect_named, engine_problem

__all__ = ["ADVICE", "bound_statements", "connection_limit", "engine_problem", "file_missing", "lock_wait", "server_problems",
           "tune_connections"]


def file_missing(alias: str) -> bool:
    """True when the database ``alias`` does not exist and connecting would create it empty (an
    SQLite file): say so instead of connecting."""
    conn = connections[alias]
    dialect = dialect_named(conn.vendor)
    return dialect is not None and dialect.created_by_connecting(conn)


def lock_wait(alias: str, seconds: float) -> contextlib.AbstractContextManager[None]:
    """Return a context in which the connection to ``alias`` waits at most ``seconds`` for a lock
    another writer holds, where the engine would wait longer (SQLite's busy timeout)."""
    conn = connections[alias]
    dialect = dialect_named(conn.vendor)
    return contextlib.nullcontext() if dialect is None else dialect.lock_wait(conn, seconds)


def tune_connections(alias: str, options: dict[str, Any],
                     dead_connection_timeout: float | None) -> Callable[[Any], None] | None:
    """Set in ``options`` (the ``OPTIONS`` of ``alias``) what the cluster's connections need
    (timeouts, locking); return what to run on each new connection where ``OPTIONS`` cannot say
    it (None: the engine is refused, nothing to tune)."""
    dialect = dialect_named(connections[alias].vendor)
    if dialect is None:
        return None
    dialect.prepare(options, dead_connection_timeout)
    return lambda connection: dialect.connected(connection, dead_connection_timeout)


def bound_statements(connection: Any, seconds: float) -> bool:
    """Make every statement of ``connection`` end within about ``seconds`` where its engine can do
    it alone, and return True; False: the caller times them itself (``cluster/statement_clock.py``)."""
    dialect = dialect_named(connection.vendor)
    return dialect is not None and dialect.bound_statements(connection, seconds)


def connection_limit(alias: str) -> tuple[int, str, str] | None:
    """Return how many connections the server behind ``alias`` allows clients like ours, how that
    is computed, and the engine's name (for messages); None: no limit worth checking. Queries it."""
    conn = connections[alias]
    dialect = dialect_named(conn.vendor)
    found = dialect.connection_limit(conn) if dialect is not None else None
    return None if dialect is None or found is None else (*found, dialect.name)


def server_problems(alias: str) -> list[tuple[str, str, str]]:
    """Return (check id, problem, what to change) for each reason the broker cannot run on the
    server behind ``alias`` (its version, its settings); queries it. An engine the broker refuses:
    none here (:func:`engine_problem`)."""
    conn = connections[alias]
    dialect = dialect_named(conn.vendor)
    return [] if dialect is None else dialect.server_problems(conn)
