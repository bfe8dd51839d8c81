"""The pusher's wake-up on MySQL/MariaDB: the server numbers each insert (``inserted``), the idle
pusher looks for a larger number. Real server; the producer is another connection in a thread."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest
from django.db import connection, connections

from django_taskmq import async_task
from django_taskmq.brokers.orm.mysql import NewestJobWaker as Waker
from django_taskmq.models import Job

pytestmark = [
    pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL's wake-up"),
    pytest.mark.django_db(transaction=True),
]


def enqueue_later(delay: float, **options) -> threading.Thread:
    """Enqueue a job from another thread (its own connection) ``delay`` seconds from now."""
    def enqueue() -> None:
        time.sleep(delay)
        try:
            async_task("tests.tasks.noop", **options)
        finally:
            connections.close_all()

    thread = threading.Thread(target=enqueue, daemon=True)
    thread.start()
    return thread


def test_a_job_enqueued_by_another_connection_wakes_the_waiting_pusher():
    waker = Waker(connection)
    waker.wait(0.01)  # the first look reads where the numbers stand
    producer = enqueue_later(0.05)
    started = time.monotonic()
    waker.wait(5.0)
    waited = time.monotonic() - started
    producer.join()
    assert waker.woken
    assert waited < 5.0


def test_a_new_job_whose_id_sorts_before_an_older_one_still_wakes_it():
    """A host whose clock is ahead made a job: its id sorts after every later id of the others,
    which must still wake the pusher (the server's numbering does not follow the ids)."""
    async_task("tests.tasks.noop")
    Job.objects.update(id="f" * 24)  # as if made by a host far ahead
    waker = Waker(connection)
    waker.wait(0.01)
    producer = enqueue_later(0.05)
    waker.wait(5.0)
    producer.join()
    assert waker.woken
    assert max(Job.objects.values_list("id", flat=True)) == "f" * 24


def test_nothing_inserted_means_a_whole_nap_and_no_wake():
    async_task("tests.tasks.noop")
    waker = Waker(connection)
    waker.wait(0.01)
    Job.objects.update(state="SUCCEEDED")  # changes, but no insert
    started = time.monotonic()
    waker.wait(0.3)
    assert not waker.woken
    assert time.monotonic() - started >= 0.29


def test_the_sentinel_speaking_ends_the_nap():
    waker = Waker(connection)
    waker.wait(0.01)
    pusher_end, sentinel_end = multiprocessing.Pipe()
    threading.Timer(0.05, lambda: sentinel_end.send("stop")).start()
    waker.wait(30.0, pusher_end)
    assert not waker.woken
    assert pusher_end.poll(0)  # it ended on the sentinel's word, which is left for the pusher to read
