"""The pusher's wake-up on SQLite: inotify on the database's WAL, then looks for the commit.

Real database file, real inotify, a writer in another thread with its own connection.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time

import pytest
from django.db import connection

from django_taskmq import async_task
from django_taskmq.brokers.orm.sqlite import DataVersionWaker as Waker

pytestmark = [pytest.mark.sqlite_only, pytest.mark.django_db(transaction=True)]


def commit_later(delay: float) -> threading.Thread:
    """Insert a row with a connection of its own ``delay`` seconds from now (a producer's enqueue)."""
    def write() -> None:
        time.sleep(delay)
        other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=20)
        try:
            other.execute("INSERT INTO django_taskmq_queuestate (queue, served) VALUES ('woken', 0)")
        finally:
            other.close()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_commit_by_another_process_wakes_the_waiting_pusher_at_once():
    async_task("tests.tasks.noop")  # the WAL exists
    waker = Waker(connection)
    waker.wait(0.01)  # the first wait reads the version and opens the watch
    writer = commit_later(0.05)
    started = time.monotonic()
    waker.wait(5.0)
    waited = time.monotonic() - started
    writer.join()
    assert waker.woken
    assert 0.04 <= waited < 1.0


def test_nothing_written_means_a_whole_nap_and_no_wake():
    waker = Waker(connection)
    waker.wait(0.01)
    started = time.monotonic()
    waker.wait(0.2)
    assert not waker.woken
    assert time.monotonic() - started >= 0.19


def test_the_sentinel_speaking_ends_the_nap():
    waker = Waker(connection)
    waker.wait(0.01)
    pusher_end, sentinel_end = multiprocessing.Pipe()
    threading.Timer(0.05, lambda: sentinel_end.send("stop")).start()
    started = time.monotonic()
    waker.wait(5.0, pusher_end)
    assert not waker.woken
    assert time.monotonic() - started < 1.0
