"""The pusher's loop (``cluster.pusher.Pusher``) on the in-memory broker: no process, no database
(pytest-django refuses database access to these tests: none is marked ``django_db``).

A claim the broker fails answers None, drops the connection and logs the failure; ``serve`` looks
before it takes the write lock after a short claim, sweeps expired leases after handing over a
batch, and in burst mode answers its first empty claim at once. What one claim takes (pick order,
bad packages dead-lettered, the floor of a full buffer, paused queues) is part of the broker
contract: tests/contract/test_pusher_claim.py, on every broker.
"""

from __future__ import annotations

import time

import pytest
from django.db import OperationalError

from django_taskmq.cluster.messages import Want
from django_taskmq.cluster.pusher import Pusher
from django_taskmq.conf import get_settings
from tests.contract.helpers import signed
from tests.memory_broker import MemoryBroker


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker(get_settings())


def enqueue(broker: MemoryBroker, job_id: str) -> str:
    return broker.enqueue({"id": job_id, "payload": signed(broker)})


def test_a_failed_claim_answers_none_and_drops_the_connection(broker):
    def away(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    broker.reserve = away
    enqueue(broker, "job")
    pusher = Pusher(broker, get_settings(), ["default"], "test-cluster")

    assert pusher.claim_safely(Want(5, None), False) is None
    assert broker.closes == 1
    assert pusher.failures.failing and "claim" in pusher.failures.last

    del broker.reserve  # the database is back
    assert [t.reservation.job_id for t in pusher.claim_safely(Want(5, None), False)] == ["job"]
    assert not pusher.failures.failing


def test_the_warm_up_reads_the_paused_queues_and_a_failure_there_is_only_logged(broker):
    """Before its first want the pusher connects and reads the paused queues; with the database
    away it logs that and drops the connection, and the first claim tries again."""
    broker.pause_queue("a", by="test")
    pusher = Pusher(broker, get_settings(), ["a", "default"], "test-cluster")
    pusher.warm_up()
    assert pusher.paused == frozenset({"a"})
    assert broker.closes == 0

    def away(*args, **kwargs):
        raise OperationalError("could not connect to server")

    broker.paused_queues = away
    cold = Pusher(broker, get_settings(), ["a", "default"], "test-cluster")
    cold.warm_up()  # does not raise
    assert broker.closes == 1
    assert cold.failures.failing and "connect" in cold.failures.last
    del broker.paused_queues  # the database is back
    enqueue(broker, "job")
    assert [t.reservation.job_id for t in cold.claim_safely(Want(5, None), False)] == ["job"]
    assert cold.paused == frozenset({"a"}) and not cold.failures.failing


class NoWait:
    """A waker that returns at once, as if the poll interval had passed with no news."""

    woken = False

    def __init__(self, hears_every_insert: bool = False) -> None:
        self.waits = 0
        self.hears = hears_every_insert
        self.news_at_wait: set[int] = set()  # the waits (1, 2, ...) that end woken

    def wait(self, timeout, pipe=None) -> None:
        self.waits += 1
        self.woken = self.waits in self.news_at_wait

    def hears_every_insert(self) -> bool:
        return self.hears


def test_after_a_claim_that_found_less_than_its_room_the_next_looks_before_taking_the_lock(broker):
    """An idle cluster: one job arrives, is claimed; the next ask finds nothing ready with a read,
    without a claim (a write transaction, which on SQLite would make the worker's ack wait)."""
    import multiprocessing
    import threading

    from django_taskmq.cluster.messages import Batch, Stop

    calls: list[str] = []
    reserve, has_ready = broker.reserve, broker.has_ready
    broker.reserve = lambda *a, **k: calls.append("reserve") or reserve(*a, **k)
    broker.has_ready = lambda *a, **k: calls.append("look") or has_ready(*a, **k)
    enqueue(broker, "job")
    sentinel_end, pusher_end = multiprocessing.Pipe()
    waker = NoWait()
    serving = threading.Thread(target=Pusher(broker, get_settings(), ["default"], "test-cluster").serve,
                               args=(pusher_end, waker), daemon=True)
    serving.start()

    sentinel_end.send(Want(5, None))
    assert sentinel_end.poll(10)
    assert [t.reservation.job_id for t in sentinel_end.recv().tasks] == ["job"]
    sentinel_end.send(Want(4, None))
    assert sentinel_end.poll(10)
    assert sentinel_end.recv() == Batch((), drained=True)
    sentinel_end.send(Stop())
    serving.join(10)

    assert calls == ["reserve", "look", "look"]  # the look after the nap too
    assert waker.waits == 1


def test_a_pusher_whose_waker_hears_every_insert_waits_without_looking_after_a_claim_that_emptied_the_queues(broker):
    """On PostgreSQL with LISTEN every insert ends the wait: after a claim that found less than its
    room the pusher goes straight to the wait, without the read the test above shows (a statement
    that competed with the task just handed out); woken, it claims without looking first."""
    import multiprocessing
    import threading

    from django_taskmq.cluster.messages import Batch, Stop

    calls: list[str] = []
    reserve, has_ready = broker.reserve, broker.has_ready
    broker.reserve = lambda *a, **k: calls.append("reserve") or reserve(*a, **k)
    broker.has_ready = lambda *a, **k: calls.append("look") or has_ready(*a, **k)
    enqueue(broker, "first")
    sentinel_end, pusher_end = multiprocessing.Pipe()
    waker = NoWait(hears_every_insert=True)
    waker.news_at_wait = {2}
    serving = threading.Thread(target=Pusher(broker, get_settings(), ["default"], "test-cluster").serve,
                               args=(pusher_end, waker), daemon=True)
    serving.start()

    def ask(room: int) -> Batch:
        sentinel_end.send(Want(room, None))
        assert sentinel_end.poll(10)
        return sentinel_end.recv()

    assert [t.reservation.job_id for t in ask(5).tasks] == ["first"]
    assert ask(4) == Batch((), drained=True)  # waited (no news), then looked: nothing
    assert calls == ["reserve", "look"] and waker.waits == 1
    enqueue(broker, "second")  # its commit wakes the next wait
    assert [t.reservation.job_id for t in ask(4).tasks] == ["second"]
    sentinel_end.send(Stop())
    serving.join(10)
    assert calls == ["reserve", "look", "reserve"]  # woken: claimed without a look
    assert waker.waits == 2


def test_the_pusher_sweeps_expired_leases_after_handing_over_a_batch(broker):
    """Its own claims do no upkeep (``reclaim_every`` infinite, as in the pusher process): what a
    dead cluster held comes back in the sweep after a batch, for the next claim."""
    import multiprocessing
    import threading

    from django_taskmq.cluster.messages import Stop

    enqueue(broker, "job")
    assert [r.job_id for r in broker.reserve(["default"], 1, 0.05, "dead-cluster")] == ["job"]
    time.sleep(0.1)  # its lease runs out
    broker.reclaim_every = float("inf")
    sentinel_end, pusher_end = multiprocessing.Pipe()
    serving = threading.Thread(target=Pusher(broker, get_settings(), ["default"], "test-cluster").serve,
                               args=(pusher_end, NoWait()), daemon=True)
    serving.start()
    got = []
    for _ in range(2):
        sentinel_end.send(Want(5, None))
        assert sentinel_end.poll(10)
        got.append([t.reservation.job_id for t in sentinel_end.recv().tasks])
    sentinel_end.send(Stop())
    serving.join(10)
    assert got == [[], ["job"]]


def test_a_burst_pusher_says_drained_at_once_then_naps_if_asked_again(broker):
    """In burst mode the first empty claim is answered without a nap (the sentinel ends the burst on
    it); asked again, nothing having arrived, the pusher naps before answering, as without burst."""
    import multiprocessing
    import threading

    from django_taskmq.cluster.messages import Stop

    enqueue(broker, "job")
    sentinel_end, pusher_end = multiprocessing.Pipe()
    waker = NoWait()
    serving = threading.Thread(target=Pusher(broker, get_settings(), ["default"], "test-cluster", burst=True).serve,
                               args=(pusher_end, waker), daemon=True)
    serving.start()
    answers, naps = [], []
    for _ in range(3):
        sentinel_end.send(Want(5, None))
        assert sentinel_end.poll(10)
        answers.append(sentinel_end.recv())
        naps.append(waker.waits)
    sentinel_end.send(Stop())
    serving.join(10)
    assert [[t.reservation.job_id for t in a.tasks] for a in answers] == [["job"], [], []]
    assert [a.drained for a in answers] == [False, True, True]
    assert naps == [0, 0, 1]
