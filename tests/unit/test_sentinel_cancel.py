"""The sentinel's side of ``cancel()``, without a cluster: a never-started ``Sentinel`` with real
pipes for its worker slots, driven by turns of its guard loop (tests/unit/test_sentinel_dispatch.py's
harness), on the in-memory broker where the cancellations are requested; workers with several
threads (a worker with one thread is signalled instead, see tests/cluster/test_cancel.py).

A cancelled task that waits ends CANCELLED without running; a running one is asked once, and
interrupted once ``cancel_grace`` has passed; the request reaches only the worker that runs it.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest

from django_taskmq.runtime import execution as ex
from django_taskmq.brokers.base import Reservation
from django_taskmq.cluster.messages import CANCEL, CANCEL_REQUEST, Ticket, cancel_frame, cancel_request_frame
from django_taskmq.cluster.slots import Running
from django_taskmq.envelope import Envelope
from tests.fake_results import FakeResults

from .test_sentinel_dispatch import Harness


def reserve(harness: Harness, *specs: tuple[str, int]) -> list[Ticket]:
    """Enqueue and reserve one job per (name, priority) in the harness's broker: the tasks the pusher
    would hand over, in that order."""
    broker = harness.sentinel.broker
    for name, priority in specs:
        broker.enqueue({"id": name, "priority": priority, "payload": name})
    reservations = {r.job_id: r for r in broker.reserve(["default"], len(specs), 300, "test-owner")}
    return [Ticket.of(ex.TaskMessage(reservations[name], Envelope(func="tests.tasks.noop", options={"hook": "h.k"})))
            for name, _ in specs]


@pytest.fixture
def harness(monkeypatch) -> Iterator[Harness]:
    from django_taskmq.cluster import stopping as stopping_module

    monkeypatch.setattr(stopping_module, "CANCEL_CHECK_EVERY", 0.0)  # a look for cancellations every turn
    h = Harness(workers=2, threads=2)
    h.sentinel.results = FakeResults()
    yield h
    h.close()


def frames(end) -> list[bytes]:
    got = []
    while end.poll(0):
        got.append(end.recv_bytes())
    return got


def test_a_waiting_task_ends_cancelled_without_running(harness):
    harness.add_slot()
    harness.push(*reserve(harness, ("busy", 9), ("busy2", 9), ("waits", 0)))
    frames(harness.worker_ends[0])
    assert harness.waiting() == ["waits"]

    harness.sentinel.broker.request_cancel(["waits"])
    harness.step()

    assert harness.waiting() == []
    (outcome,) = [pickle.loads(o) for part in harness.sentinel.results.items for o in part]
    assert (outcome.reservation.job_id, outcome.status, outcome.started_at) == ("waits", ex.CANCELLED, 0.0)
    assert outcome.envelope.options["hook"] == "h.k"  # its hook runs: the recorder reads it from here
    assert frames(harness.worker_ends[0]) == [], "the workers hear nothing of it"


def test_a_running_task_is_asked_once_then_interrupted_after_the_grace(harness):
    harness.add_slot()
    other = harness.add_slot()
    harness.push(*reserve(harness, ("target", 9), ("other-worker", 9), ("sibling", 0)))  # dealt: slot 0, 1, 0
    for end in harness.worker_ends:
        frames(end)
    slot = next(s for s in harness.sentinel.slots if "target" in s.running)
    end = harness.worker_ends[harness.sentinel.slots.index(slot)]
    grace = harness.sentinel.settings.cancel_grace

    harness.sentinel.broker.request_cancel(["target"])
    harness.step()
    asked = slot.running["target"].cancel_requested
    harness.step()  # seen again at the next check: asked only once

    assert frames(end) == [cancel_request_frame("target")]
    assert frames(harness.worker_ends[harness.sentinel.slots.index(other)]) == []
    assert asked is not None and slot.running["target"].cancel_requested == asked
    assert not slot.running["target"].cancel_due(asked + grace, grace)

    slot.running["target"].cancel_requested = asked - grace - 0.01  # as if asked that long ago
    harness.step_until(lambda: end.poll(0), "the task interrupted")
    assert frames(end) == [cancel_frame("target")], "interrupted like a task past its timeout, once"
    for _ in range(3):
        harness.step()
    assert frames(end) == []
    assert slot.running["sibling"].cancel_requested is None and not slot.stuck, "its sibling runs on"
    assert other.running["other-worker"].cancel_requested is None


def test_cancel_frames_do_not_share_a_prefix():
    """The worker tells the two apart by prefix (worker.Pool.serve)."""
    assert not CANCEL.startswith(CANCEL_REQUEST) and not CANCEL_REQUEST.startswith(CANCEL)


def test_cancel_due_only_after_the_grace():
    r = Running(Ticket(Reservation("t", "default", 0, 1, 0, "token-t", "test-owner", 5), None, b"t"), started=0.0)
    assert not r.cancel_due(100.0, 5.0)
    r.cancel_requested = 10.0
    assert not r.cancel_due(15.0, 5.0) and r.cancel_due(15.01, 5.0)
