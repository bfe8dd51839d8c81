"""The sentinel's side of ``cancel()``, without a cluster: a never-started ``Sentinel`` with real
pipes for its worker slots (tests/unit/test_sentinel_dispatch.py's harness), workers with several
threads (a worker with one thread is signalled instead, see tests/cluster/test_cancel.py).

A cancelled task that waits ends CANCELLED without running; a running one is asked once, and
interrupted once ``cancel_grace`` has passed; the request reaches only the worker that runs it.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator

import pytest

from django_taskmq import execution as ex
from django_taskmq.brokers.base import Reservation
from django_taskmq.cluster.messages import CANCEL, CANCEL_REQUEST, Ticket, cancel_frame, cancel_request_frame
from django_taskmq.cluster.sentinel import Running
from django_taskmq.envelope import Envelope

from .test_sentinel_dispatch import Harness


def task(label: str, priority: int = 0) -> Ticket:
    reservation = Reservation(label, "default", priority, 1, 0, f"token-{label}", "test-owner", 5)
    return Ticket.of(ex.TaskMessage(reservation, Envelope(func="tests.tasks.noop", options={"hook": "h.k"})))


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(workers=2)
    h.threads(2)
    yield h
    h.close()


def frames(end) -> list[bytes]:
    got = []
    while end.poll(0):
        got.append(end.recv_bytes())
    return got


def test_a_waiting_task_ends_cancelled_without_running(harness):
    harness.add_slot()
    harness.push(task("busy", 9), task("busy2", 9), task("waits"))
    harness.sentinel._dispatch()
    frames(harness.worker_ends[0])
    assert harness.waiting() == ["waits"]

    harness.sentinel._cancel("waits", time.monotonic())

    assert harness.waiting() == []
    (outcome,) = [pickle.loads(o) for o in harness.sentinel.outbox]
    assert (outcome.reservation.job_id, outcome.status, outcome.started_at) == ("waits", ex.CANCELLED, 0.0)
    assert outcome.envelope.options["hook"] == "h.k"  # its hook runs: the recorder reads it from here
    assert frames(harness.worker_ends[0]) == [], "the workers hear nothing of it"


def test_a_running_task_is_asked_once_then_interrupted_after_the_grace(harness):
    harness.add_slot()
    other = harness.add_slot()
    harness.push(task("target", 9), task("other-worker", 9), task("sibling"))  # dealt: slot 0, 1, 0
    harness.sentinel._dispatch()
    for end in harness.worker_ends:
        frames(end)
    slot = next(s for s in harness.sentinel.slots if "target" in s.running)
    end = harness.worker_ends[harness.sentinel.slots.index(slot)]
    grace = harness.sentinel.settings.cancel_grace
    asked = time.monotonic()

    harness.sentinel._cancel("target", asked)
    harness.sentinel._cancel("target", asked + 0.5)  # seen again at the next check: asked only once

    assert frames(end) == [cancel_request_frame("target")]
    assert frames(harness.worker_ends[harness.sentinel.slots.index(other)]) == []
    assert slot.running["target"].cancel_requested == asked
    assert not slot.running["target"].cancel_due(asked + grace, grace)

    harness.sentinel._enforce_timeouts(slot, asked + grace + 0.01)
    assert frames(end) == [cancel_frame("target")], "interrupted like a task past its timeout, once"
    harness.sentinel._enforce_timeouts(slot, asked + grace + 0.02)
    assert frames(end) == []
    assert slot.running["sibling"].cancel_requested is None and not slot.stuck, "its sibling runs on"
    assert other.running["other-worker"].cancel_requested is None


def test_cancel_frames_do_not_share_a_prefix():
    """The worker tells the two apart by prefix (worker.Pool.serve)."""
    assert not CANCEL.startswith(CANCEL_REQUEST) and not CANCEL_REQUEST.startswith(CANCEL)


def test_cancel_due_only_after_the_grace():
    r = Running(task("t"), started=0.0)
    assert not r.cancel_due(100.0, 5.0)
    r.cancel_requested = 10.0
    assert not r.cancel_due(15.0, 5.0) and r.cancel_due(15.01, 5.0)
