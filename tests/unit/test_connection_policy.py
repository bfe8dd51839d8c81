"""Which database errors make the cluster drop its connection and reconnect, the keepalive options of
its connections, and the setting that sets them (``django_taskmq.policy.connections``, ``conf``)."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import psycopg
import pytest
from django.db.utils import DatabaseErrorWrapper
from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.conf import DEAD_CONNECTION_TIMEOUT, from_mapping
from django_taskmq.exceptions import ConfigError
from django_taskmq.policy.connections import (LINK_LOST, RECONNECT, SQLSTATES, disconnect, keepalive_options,
                                              sqlstate)


def wrapped(error: BaseException) -> BaseException:
    """``error`` as Django's PostgreSQL backend raises it (its own class, the driver's as the cause)."""
    try:
        # Django's wrapper reads the driver module and notes the error on the connection: no socket needed.
        with DatabaseErrorWrapper(SimpleNamespace(Database=psycopg, errors_occurred=False)):
            raise error
    except BaseException as exc:
        return exc
    raise AssertionError("not raised")


# -- classification --------------------------------------------------------------------------------

@pytest.mark.parametrize("code", ["25006", "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08P01"])
def test_failover_sqlstates_mean_reconnect(code):
    error = psycopg.errors.lookup(code)("from the server")
    assert disconnect(error)
    django_error = wrapped(error)
    assert type(django_error).__module__ == "django.db.utils"
    assert sqlstate(django_error) == code
    assert disconnect(django_error) == disconnect(error)


def test_read_only_says_the_server_is_no_longer_the_primary():
    error = wrapped(psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"))
    assert type(error).__name__ == "InternalError"  # not an OperationalError: the recorder must still retry
    assert "no longer the primary" in disconnect(error)


@pytest.mark.parametrize("code", ["22012", "23505", "40001", "40P01", "55P03", "57014", "42P01", "26000"])
def test_errors_of_the_statement_keep_the_connection(code):
    # division by zero, unique violation, serialization failure, deadlock, lock not available,
    # statement timeout (query_canceled), undefined table, prepared statement missing
    error = psycopg.errors.lookup(code)("from the server")
    assert disconnect(error) is None
    assert disconnect(wrapped(error)) is None


@pytest.mark.parametrize("error", [
    psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
    psycopg.OperationalError("the connection is closed"),
    psycopg.errors.ConnectionTimeout("connection timeout expired"),
    psycopg.InterfaceError("the connection is closed"),
    ConnectionResetError(104, "Connection reset by peer"),
    TimeoutError(110, "Connection timed out"),
], ids=repr)
def test_a_broken_link_without_sqlstate_means_reconnect(error):
    assert disconnect(error) == LINK_LOST
    assert disconnect(wrapped(error)) == LINK_LOST


@pytest.mark.parametrize("error", [
    sqlite3.OperationalError("database is locked"),
    ValueError("a bug"),
    KeyError("job"),
    psycopg.DataError("invalid input"),
], ids=repr)
def test_other_errors_keep_the_connection(error):
    assert disconnect(error) is None


def test_mysql_codes():
    MySQLError = type("OperationalError", (Exception,), {"__module__": "MySQLdb._exceptions"})
    assert disconnect(MySQLError(2006, "MySQL server has gone away")) == "the server has gone away"
    assert "no longer the primary" in disconnect(MySQLError(1290, "--read-only option"))
    assert disconnect(MySQLError(1062, "Duplicate entry")) is None


def test_a_cycle_of_causes_ends():
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert disconnect(a) is None


class Coded(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.sqlstate = code


codes = st.text(alphabet="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=5, max_size=5)


@given(codes)
def test_any_sqlstate_reconnects_exactly_for_class_08_and_the_failover_codes(code):
    expected = code.startswith("08") or code in SQLSTATES
    assert (disconnect(Coded(code)) is not None) == expected
    # psycopg2 names it pgcode; a wrapper with the code as its cause reads the same
    legacy = Exception("psycopg2")
    legacy.pgcode = code  # type: ignore[attr-defined]
    assert (disconnect(legacy) is not None) == expected
    outer = RuntimeError("wrapper")
    outer.__cause__ = Coded(code)
    assert (disconnect(outer) is not None) == expected


# -- keepalives ------------------------------------------------------------------------------------

def test_the_default_options_notice_a_dead_connection_within_30_seconds():
    options = keepalive_options(DEAD_CONNECTION_TIMEOUT)
    assert options == {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
                       "tcp_user_timeout": 30000}


@given(st.floats(min_value=6, max_value=86400))
def test_keepalives_give_up_within_the_timeout(timeout):
    options = keepalive_options(timeout)
    idle_silence = options["keepalives_idle"] + options["keepalives_count"] * options["keepalives_interval"]
    assert idle_silence <= timeout
    assert options["tcp_user_timeout"] <= timeout * 1000
    assert all(isinstance(v, int) and v >= 1 for v in options.values())


def test_none_leaves_the_operating_systems_defaults():
    assert keepalive_options(None) == {}


@given(st.integers(min_value=1, max_value=10**6))
def test_reconnect_pauses_are_short_and_bounded(failures):
    delay = RECONNECT.delay(failures)
    assert 0 < delay <= 3.0
    assert RECONNECT.delay(1, rand=lambda: 0.5) == pytest.approx(0.05)


# -- the setting -----------------------------------------------------------------------------------

def test_the_setting_defaults_to_30_seconds():
    assert from_mapping({}).dead_connection_timeout == 30.0
    assert from_mapping({"dead_connection_timeout": None}).dead_connection_timeout is None
    assert from_mapping({"dead_connection_timeout": 120}).dead_connection_timeout == 120


@pytest.mark.parametrize("value", [5, 0, -1, "30", True, float("inf"), float("nan")])
def test_a_wrong_timeout_names_the_setting(value):
    with pytest.raises(ConfigError, match=r"TASKMQ\['dead_connection_timeout'\]"):
        from_mapping({"dead_connection_timeout": value})
