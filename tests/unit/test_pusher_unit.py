"""The pusher's claim (``cluster.pusher.Pusher``) on the in-memory broker: no process, no database
(pytest-django refuses database access to these tests: none is marked ``django_db``).

It reserves what the sentinel's ``Want`` asks for and returns verified tickets in pick order. A
package that fails to verify or to unpickle never becomes a ticket: it is dead-lettered with the
reason (never unpickled when its signature is bad), and the good ones of the same claim go through.
With a full buffer (``Want(0, floor)``) it claims only work above the floor, at most ``workers``.
A claim the broker fails answers None, drops the connection and logs the failure.
"""

from __future__ import annotations

import pickle
import time

import pytest
from django.core import signing as django_signing
from django.db import OperationalError

from django_taskmq.cluster.messages import Ticket, Want
from django_taskmq.cluster.pusher import Pusher
from django_taskmq.conf import get_settings
from django_taskmq.envelope import Envelope
from django_taskmq.policy.states import JobState
from django_taskmq.signing import sign, sign_bytes
from tests.memory_broker import MemoryBroker

UNPICKLED: list[str] = []


def _unpickled(tag: str) -> None:
    UNPICKLED.append(tag)


class RunsOnUnpickle:
    """Unpickling this appends to UNPICKLED: proof that a package was loaded."""

    def __reduce__(self):
        return _unpickled, ("unpickled",)


@pytest.fixture
def broker() -> MemoryBroker:
    UNPICKLED.clear()
    return MemoryBroker(get_settings())


def enqueue(broker: MemoryBroker, job_id: str, *args, priority: int = 0, payload: str | None = None) -> str:
    if payload is None:
        payload = sign(Envelope(func="tests.tasks.add", args=args), get_settings().name)
    return broker.enqueue({"id": job_id, "priority": priority, "payload": payload})


def forged() -> str:
    """A package whose pickle runs code, signed with a key the cluster does not know."""
    body = django_signing.b64_encode(b"p" + pickle.dumps(RunsOnUnpickle())).decode()
    return django_signing.Signer(key="attacker-key", salt=f"django_taskmq.{get_settings().name}").sign(body)


def garbage() -> str:
    """Validly signed bytes that are not a pickle."""
    return sign_bytes(b"this is not a pickle", get_settings().name)


def claim(broker: MemoryBroker, want: Want, workers: int | None = None) -> list[Ticket]:
    return Pusher(broker, get_settings(), ["default"], "test-cluster", workers=workers).claim(want, False)


def test_good_packages_become_tickets_in_pick_order(broker):
    enqueue(broker, "low", 1, 2, priority=0)
    enqueue(broker, "high", 3, 4, priority=5)
    enqueue(broker, "left", 5, 6, priority=-1)

    tickets = claim(broker, Want(2, None))

    assert [t.reservation.job_id for t in tickets] == ["high", "low"]
    assert [t.message().envelope.args for t in tickets] == [(3, 4), (1, 2)]
    assert [t.reservation.payload for t in tickets] == ["", ""]  # not carried any further
    assert broker.job("left").state == JobState.QUEUED


def test_bad_packages_are_dead_lettered_and_the_good_ones_of_the_claim_go_through(broker):
    enqueue(broker, "first", 1, 2)
    enqueue(broker, "forged", payload=forged())
    enqueue(broker, "garbage", payload=garbage())
    enqueue(broker, "last", 3, 4)

    tickets = claim(broker, Want(10, None))

    assert [t.reservation.job_id for t in tickets] == ["first", "last"]
    assert {n: broker.job(n).state for n in ("first", "forged", "garbage", "last")} == {
        "first": JobState.RUNNING, "forged": JobState.DEAD, "garbage": JobState.DEAD, "last": JobState.RUNNING}
    reasons = {x.job_id: x.reason for x in broker.dead_letters()}
    assert reasons.keys() == {"forged", "garbage"}
    assert reasons["forged"] == "bad signature"
    assert reasons["garbage"].startswith("cannot unpickle")
    assert UNPICKLED == []  # the forged pickle was never loaded


def test_a_claim_of_only_bad_packages_returns_nothing_and_leaves_nothing_leased(broker):
    enqueue(broker, "forged", payload=forged())

    assert claim(broker, Want(5, None)) == []
    job = broker.job("forged")
    assert (job.state, job.lease_until, job.deliveries) == (JobState.DEAD, None, 1)
    assert claim(broker, Want(5, None)) == []  # buried, not redelivered


def test_a_full_buffer_claims_only_work_above_its_floor(broker):
    """Want(0, floor=3): only priorities above 3, most urgent first, at most ``workers`` a claim."""
    for p in (0, 3, 5, 9, 4):
        enqueue(broker, f"p{p}", priority=p)

    assert [t.reservation.priority for t in claim(broker, Want(0, 3), workers=2)] == [9, 5]
    assert {p: broker.job(f"p{p}").state for p in (0, 3, 4)} == {p: JobState.QUEUED for p in (0, 3, 4)}
    assert [t.reservation.priority for t in claim(broker, Want(0, 3), workers=2)] == [4]
    assert claim(broker, Want(0, 3), workers=2) == []


def test_a_full_buffer_without_a_floor_claims_nothing(broker):
    enqueue(broker, "urgent", priority=9)
    assert claim(broker, Want(0, None)) == []
    assert broker.job("urgent").state == JobState.QUEUED


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


class NoWait:
    """A waker that returns at once, as if the poll interval had passed with no news."""

    woken = False

    def __init__(self) -> None:
        self.waits = 0

    def wait(self, timeout, pipe=None) -> None:
        self.waits += 1


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

    from django_taskmq.cluster.messages import Batch, Stop

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


def test_a_paused_queue_is_not_claimed_from_and_the_batch_says_so(broker):
    broker.enqueue({"id": "in-a", "queue": "a", "payload": sign(Envelope(func="tests.tasks.add"), get_settings().name)})
    enqueue(broker, "in-default", 1, 2)
    broker.pause_queue("a")
    pusher = Pusher(broker, get_settings(), ["a", "default"], "test-cluster")
    assert [t.reservation.job_id for t in pusher.claim(Want(10, None), False)] == ["in-default"]
    assert pusher.paused == frozenset({"a"})
    broker.resume_queue("a")
    pusher._pauses_read = float("-inf")  # the next read is due (once a second)
    assert [t.reservation.job_id for t in pusher.claim(Want(10, None), False)] == ["in-a"]
    assert pusher.paused == frozenset()
