"""The rate-limited failure log of the cluster's components (``django_taskmq.brokers.outage.FailureLog``).

A fake clock drives it: no process, no database, no waiting.
"""

from __future__ import annotations

import logging

import pytest
from django.db import OperationalError

from django_taskmq.brokers.outage import FailureLog, cause


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(caplog, clock) -> FailureLog:
    caplog.set_level(logging.INFO, logger="tests.failure_log")
    return FailureLog("pusher", logging.getLogger("tests.failure_log"), every=5.0, clock=clock)


def refused() -> OperationalError:
    return OperationalError('connection failed: connection to server at "127.0.0.1", port 5999 failed: '
                            "Connection refused\n\tIs the server running on that host?")


def test_first_failure_is_one_line_without_traceback(log, caplog):
    line = log.failed("claim", refused())
    assert line == ('pusher: claim: OperationalError: connection failed: connection to server at "127.0.0.1", '
                    "port 5999 failed: Connection refused; retrying (logging at most every 5 s)")
    assert [r.getMessage() for r in caplog.records] == [line]
    assert caplog.records[0].exc_info is None
    assert caplog.records[0].levelno == logging.WARNING
    assert log.failing and log.failures == 1


def test_a_database_error_gets_its_traceback_at_debug(log, caplog):
    caplog.set_level(logging.DEBUG, logger="tests.failure_log")
    log.failed("claim", refused())
    assert caplog.records[0].exc_info is not None


def test_an_error_that_is_not_the_databases_shows_its_traceback_once(log, caplog, clock):
    log.failed("claim", KeyError("bug"))
    clock.now += 10
    log.failed("claim", KeyError("bug"))
    assert caplog.records[0].exc_info is not None
    assert caplog.records[1].exc_info is None


def test_then_at_most_one_line_per_interval_with_the_count(log, caplog, clock):
    log.failed("claim", refused())
    lines = []
    for _ in range(100):  # one failure every 0.1 s for 10 s
        clock.now += 0.1
        lines.append(log.failed("claim", refused()))
    logged = [line for line in lines if line is not None]
    assert len(logged) == 2  # at 5 s and at 10 s
    assert logged[0].startswith("pusher: still failing, 50 failure(s) in the last 5 s (51 in 5 s); last: the same error")
    assert logged[1].startswith("pusher: still failing, 50 failure(s) in the last 5 s (101 in 10 s)")
    assert len(caplog.records) == 3
    assert log.failures == 101


def test_a_new_error_is_named_in_the_count_line(log, clock):
    log.failed("claim", refused())
    clock.now += 6
    line = log.failed("heartbeat", OperationalError("database is locked"))
    assert line.endswith("last: heartbeat: OperationalError: database is locked")


def test_recovery_is_one_line_with_the_count_and_resets(log, caplog, clock):
    log.failed("claim", refused())
    for _ in range(7):
        clock.now += 1
        log.failed("claim", refused())
    clock.now += 2.4
    assert log.down_for() == pytest.approx(9.4)
    assert log.succeeded() == "pusher: database is back after 8 failure(s) in 9 s"
    assert not log.failing and log.down_for() == 0.0 and log.failures == 0
    # Further successes say nothing; the next failure, once the rate allows, starts a new outage
    # with a full line.
    assert log.succeeded() is None
    clock.now += 5
    assert log.failed("claim", refused()).startswith("pusher: claim: OperationalError")
    assert log.failures == 1


def test_a_reconnect_storm_is_summarised_not_logged_per_reconnect(log, caplog, clock):
    """Sessions ended twice a second for 30 s (pg_terminate_backend): the first outage is told, and
    its end; the outages after it are not, one by one; the first success once the rate allows says
    how many there were. At most one line per interval, plus the first outage's end."""
    for _ in range(60):
        log.failed("claim", refused())
        clock.now += 0.25
        log.succeeded()
        clock.now += 0.25
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("pusher: claim: OperationalError") and lines[1].startswith("pusher: database is back")
    assert len(lines) <= 2 + 30 / 5, lines
    assert lines[-1] == "pusher: database is back after 10 outage(s), 10 failure(s) in 5 s", lines
    clock.now += 10  # the storm is over: the next success tells the outages since the last line
    assert log.succeeded() == "pusher: database is back after 9 outage(s), 9 failure(s) in 4 s"
    assert log.succeeded() is None and not log.failing


def test_successes_without_failures_log_nothing(log, caplog):
    for _ in range(5):
        assert log.succeeded() is None
    assert caplog.records == []


def test_recovery_from_errors_that_are_not_the_databases(log):
    log.failed("tick", ValueError("bad schedule"))
    assert log.succeeded() == "pusher: working again after 1 failure(s) in 0 s"


def test_cause_is_the_first_line_of_the_error():
    assert cause(refused(), kind=False) == ('connection failed: connection to server at "127.0.0.1", port 5999 '
                                            "failed: Connection refused")
    assert cause(OSError()) == "OSError"
    assert len(cause(OperationalError("x" * 5000))) == 300


def test_a_lost_connection_says_why_and_what_goes_on_meanwhile(caplog, clock):
    import psycopg

    caplog.set_level(logging.INFO, logger="tests.failure_log")
    log = FailureLog("pusher", logging.getLogger("tests.failure_log"), every=5.0, clock=clock,
                     meanwhile="no new work is claimed meanwhile")
    try:
        raise OperationalError("terminating connection due to administrator command") \
            from psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    except OperationalError as exc:
        line = log.failed("claim", exc)
    assert line == ("pusher: claim: OperationalError: terminating connection due to administrator command; "
                    "the server ended the session (shutdown, or pg_terminate_backend): reconnecting; "
                    "no new work is claimed meanwhile (logging at most every 5 s)")
    assert caplog.records[0].exc_info is None
