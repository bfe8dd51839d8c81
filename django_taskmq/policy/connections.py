"""The cluster's database connections: which errors mean "drop this connection and make a new one",
the TCP options that notice a connection whose far side vanished, and the pause between reconnects.

* :func:`disconnect` reads an exception (a driver's, or Django's wrapper of it) and returns why the
  connection is no longer worth using (the server is no longer the primary, it is shutting down or
  ended the session, the link failed), or None for any other error (a bug, bad data, a lock).
* :func:`keepalive_options` turns ``TASKMQ['dead_connection_timeout']`` into libpq's keepalive and
  ``tcp_user_timeout`` options.
* :data:`RECONNECT` is the backoff between two attempts of one component while its connection fails.

Pure: no Django, no driver import; exceptions are read by their attributes and class names.
"""

from __future__ import annotations

from .backoff import Retry

# SQLSTATE -> why the connection must be replaced (PostgreSQL's codes; class 08 is matched below).
SQLSTATES = {
    "25006": "the server is read-only: it is no longer the primary",  # read_only_sql_transaction
    "57P01": "the server ended the session (shutdown, or pg_terminate_backend)",  # admin_shutdown
    "57P02": "the server is shutting down after a crash",  # crash_shutdown
    "57P03": "the server does not accept connections now (starting up, shutting down, recovering)",  # cannot_connect_now
}
CONNECTION_CLASS = "08"  # connection_exception and its subclasses
CONNECTION_FAILED = "the connection failed"
LINK_LOST = "the connection failed or was lost"

# MySQL and MariaDB client error numbers (args[0] of MySQLdb's and PyMySQL's errors).
MYSQL_CODES = {
    2002: CONNECTION_FAILED, 2003: CONNECTION_FAILED, 2006: "the server has gone away", 2013: "the connection was lost",
    2055: "the connection was lost", 4031: "the server ended the idle session",
    1290: "the server is read-only: it is no longer the primary",  # ER_OPTION_PREVENTS_STATEMENT (--read-only)
    1792: "the server is read-only: it is no longer the primary",  # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
    1053: "the server is shutting down",  # ER_SERVER_SHUTDOWN
}
DRIVERS = ("psycopg", "psycopg2", "MySQLdb", "pymysql")
# Driver errors that carry no SQLSTATE when the link itself failed ("server closed the connection
# unexpectedly", "consuming input failed", "connection already closed").
LINK_ERRORS = ("OperationalError", "InterfaceError")

#: The pause before a component's next attempt after ``n`` failures in a row: 0.05 s, doubling, at most
#: 2 s, each +-50 % at random, so that the clusters that lost one server do not all come back at once.
RECONNECT = Retry(base=0.05, factor=2.0, max_delay=2.0, jitter=0.5)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (Django wraps the driver's in ``__cause__``)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen) and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of ``exc`` or of an exception it was raised from (psycopg: ``sqlstate``,
    psycopg2: ``pgcode``); None when there is none."""
    for error in _chain(exc):
        for attribute in ("sqlstate", "pgcode"):
            code = getattr(error, attribute, None)
            if isinstance(code, str) and len(code) == 5:
                return code
    return None


def _driver(error: BaseException) -> str:
    return type(error).__module__.split(".")[0]


def disconnect(exc: BaseException) -> str | None:
    """Return why the connection that raised ``exc`` must be closed and a new one made, or None.

    The failover errors: the server is read-only (SQLSTATE 25006: it was demoted, or a standby),
    it is shutting down or ended the session (57P01-57P03), the connection failed (class 08); and
    a driver's ``OperationalError``/``InterfaceError`` without a SQLSTATE (the link broke: nothing
    came back from the server), or an ``OSError`` of the socket. Anything else (an error in the
    statement or its data, a lock timeout, a deadlock) is None: the connection itself is fine.
    """
    code = sqlstate(exc)
    if code is not None:
        if code in SQLSTATES:
            return SQLSTATES[code]
        return CONNECTION_FAILED if code.startswith(CONNECTION_CLASS) else None
    for error in _chain(exc):
        driver = _driver(error)
        if driver in ("MySQLdb", "pymysql"):
            number = error.args[0] if error.args else None
            if isinstance(number, int) and number in MYSQL_CODES:
                return MYSQL_CODES[number]
        elif driver in ("psycopg", "psycopg2") and any(k.__name__ in LINK_ERRORS for k in type(error).__mro__):
            return LINK_LOST
        if isinstance(error, (ConnectionError, TimeoutError)):  # the socket's own errors
            return LINK_LOST
    # Django's own InterfaceError for a connection it already saw closed (its driver's error is gone).
    if type(exc).__name__ == "InterfaceError" and _driver(exc) == "django" and "closed" in str(exc):
        return LINK_LOST
    return None


def keepalive_options(timeout: float | None) -> dict[str, int]:
    """libpq options that make a connection whose far side vanished fail within ``timeout`` seconds.

    TCP keepalive probes start after a third of it without traffic, every sixth, three unanswered
    ones end the connection (an idle connection: a ``LISTEN``, a pool's); ``tcp_user_timeout``
    ends one whose sent data stays unacknowledged that long (a query in flight). A slow query is
    not cut: the server acknowledges what it receives. None: no options (the operating system's
    defaults, about 2 hours for an idle connection and 15 minutes for a query, on Linux).
    """
    if timeout is None:
        return {}
    return {
        "keepalives": 1,
        "keepalives_idle": max(1, int(timeout / 3)),
        "keepalives_interval": max(1, int(timeout / 6)),
        "keepalives_count": 3,
        "tcp_user_timeout": int(timeout * 1000),
    }
