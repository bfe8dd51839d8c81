"""The sentinel's waiting list and dispatch, without a cluster: a ``Sentinel`` that is never started,
fed through real pipes (its pusher pipe and one pipe per worker slot); no process is spawned, and
the broker is the in-memory one (tests/memory_broker.py) unless a test hands in another.

Waiting tasks are ordered by priority (higher first), then by arrival; each idle worker gets the
first waiting task; busy and retiring workers get nothing; a task whose send fails goes back.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
from collections.abc import Iterator

import pytest

from django_taskmq.brokers.base import Broker, Reservation
from django_taskmq.cluster.messages import ALONE, IDLE, TASKS, Batch, Ticket, read_tasks_frame
from django_taskmq.cluster.sentinel import Running, Sentinel, Slot
from django_taskmq.conf import get_settings
from tests.fake_results import FakeResults
from tests.memory_broker import MemoryBroker


def ticket(label: str, priority: int) -> Ticket:
    """A task the pusher would hand over; its blob (what a worker receives) is the label."""
    reservation = Reservation(label, "default", priority, 1, 0, f"token-{label}", "test-owner", 5)
    return Ticket(reservation, None, label.encode())


class Harness:
    """A sentinel with a pusher pipe and ``add_slot()`` for worker slots; ``close()`` closes every pipe."""

    def __init__(self, broker: Broker | None = None, prefetch: int = 0, workers: int = 1) -> None:
        settings = dataclasses.replace(get_settings(), prefetch=prefetch)
        self.sentinel = Sentinel(settings, broker or MemoryBroker(settings), workers=workers)
        self.sentinel.pusher_pipe, self.pusher_end = multiprocessing.Pipe()
        self.worker_ends: list = []

    def add_slot(self) -> Slot:
        # The sentinel's own process stands in for the worker: alive, and nothing is spawned.
        parent, child = multiprocessing.Pipe()
        slot = Slot(len(self.sentinel.slots), multiprocessing.current_process(), parent)
        self.sentinel.slots.append(slot)
        self.worker_ends.append(child)
        return slot

    def threads(self, threads: int) -> None:
        """Give each worker ``threads`` threads (and so no prefetch)."""
        self.sentinel.threads = self.sentinel.depth = threads

    def push(self, *tickets: Ticket) -> None:
        """The pusher sends one batch; the sentinel reads it."""
        self.pusher_end.send(Batch(tuple(tickets)))
        self.sentinel._from_pusher()

    def waiting(self) -> list[str]:
        return [w.task.reservation.job_id for w in self.sentinel.buffer.waiting]

    def received(self) -> list[str | None]:
        """What each worker slot got since the last call (None: nothing), in slot order; one task
        per slot (see ``batches`` for more)."""
        got = []
        for batch in self.batches():
            assert len(batch) <= 1, f"a worker got more than one task in one dispatch: {batch}"
            got.append(batch[0] if batch else None)
        return got

    def batches(self) -> list[list[str]]:
        """The tasks each worker slot got since the last call, in slot order (one message each)."""
        got = []
        for end in self.worker_ends:
            frames = []
            while end is not None and end.poll(0):
                frames.append(end.recv_bytes())
            assert len(frames) <= 1, "a worker got more than one message in one dispatch"
            got.append([blob.decode() for frame in frames for blob in read_tasks_frame(frame)])
        return got

    def close(self) -> None:
        for pipe in [self.sentinel.pusher_pipe, self.pusher_end, *self.worker_ends,
                     *(s.pipe for s in self.sentinel.slots)]:
            if pipe is not None:
                pipe.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


def test_waiting_tasks_are_ordered_by_priority_then_arrival(harness):
    """Two batches: the waiting list holds the higher priorities first, equal ones in arrival order."""
    harness.push(ticket("a0", 0), ticket("b5", 5), ticket("c0", 0))
    harness.push(ticket("d9", 9), ticket("e5", 5), ticket("f-3", -3))
    assert harness.waiting() == ["d9", "b5", "e5", "a0", "c0", "f-3"]


def test_each_idle_worker_gets_the_most_urgent_waiting_task(harness):
    """Five idle workers and six waiting tasks: the workers get them in priority-then-arrival order."""
    slots = [harness.add_slot() for _ in range(5)]
    harness.push(ticket("a0", 0), ticket("b5", 5), ticket("c0", 0))
    harness.push(ticket("d9", 9), ticket("e5", 5), ticket("f-3", -3))

    harness.sentinel._dispatch()

    assert harness.received() == ["d9", "b5", "e5", "a0", "c0"]
    assert [list(s.running) for s in slots] == [["d9"], ["b5"], ["e5"], ["a0"], ["c0"]]
    assert harness.waiting() == ["f-3"]


def test_a_later_urgent_task_overtakes_waiting_ones(harness):
    """A task that arrives after others but with a higher priority is dispatched first."""
    harness.add_slot()
    harness.push(ticket("n1", 0), ticket("n2", 0))
    harness.push(ticket("urgent", 7))

    harness.sentinel._dispatch()

    assert harness.received() == ["urgent"]
    assert harness.waiting() == ["n1", "n2"]


def test_busy_and_retiring_workers_get_nothing_and_the_rest_keeps_its_order(harness):
    """Only idle, non-retiring workers are fed; what is left waits in order for the next free worker."""
    busy, retiring, idle1, idle2 = (harness.add_slot() for _ in range(4))
    busy.running["running"] = Running(ticket("running", 0), 0.0)
    retiring.retiring = True
    harness.push(ticket("x1", 1), ticket("y3", 3), ticket("z3", 3), ticket("w2", 2))

    harness.sentinel._dispatch()

    assert harness.received() == [None, None, "y3", "z3"]
    assert (list(busy.running), retiring.running) == (["running"], {})
    assert harness.waiting() == ["w2", "x1"]

    busy.running.clear()  # its outcome arrived
    harness.sentinel._dispatch()
    assert harness.received() == ["w2", None, None, None]
    assert harness.waiting() == ["x1"]


def test_a_task_whose_send_fails_goes_back_and_reaches_the_next_idle_worker(harness):
    """A worker whose pipe broke gets no task; the task is not lost but given to the next idle worker."""
    broken, healthy = harness.add_slot(), harness.add_slot()
    harness.worker_ends[0].close()  # the worker's end is gone: sending to it fails
    harness.worker_ends[0] = None
    harness.push(ticket("urgent", 9), ticket("normal", 0))

    harness.sentinel._dispatch()

    assert broken.running == {}
    assert list(healthy.running) == ["urgent"]
    assert harness.received() == [None, "urgent"]
    assert harness.waiting() == ["normal"]


def test_with_threads_each_worker_gets_tasks_until_its_threads_are_full_one_per_round(harness):
    """3 threads, 2 workers, 7 waiting: the most urgent go out alternately, 6 in all; one waits."""
    harness.threads(3)
    first, second = harness.add_slot(), harness.add_slot()
    harness.push(*(ticket(f"t{i}", 9 - i) for i in range(7)))

    harness.sentinel._dispatch()

    assert list(first.running) == ["t0", "t2", "t4"] and list(second.running) == ["t1", "t3", "t5"]
    assert harness.waiting() == ["t6"]
    assert harness.batches() == [["t0", "t2", "t4"], ["t1", "t3", "t5"]]


def test_a_worker_not_ready_yet_gets_nothing(harness):
    harness.threads(2)
    spawning, ready = harness.add_slot(), harness.add_slot()
    spawning.ready = False
    harness.push(ticket("a", 0), ticket("b", 0), ticket("c", 0))

    harness.sentinel._dispatch()

    assert (list(spawning.running), list(ready.running), harness.waiting()) == ([], ["a", "b"], ["c"])


def test_with_threads_a_task_past_its_timeout_is_cancelled_then_its_worker_is_marked_stuck(harness):
    """The worker is asked to interrupt the task (a cancel frame naming it); a task still running
    CANCEL_GRACE seconds later makes the worker take no more work while its other task runs on."""
    from django_taskmq.cluster import sentinel as sentinel_module
    from django_taskmq.cluster.messages import cancel_frame

    harness.threads(4)
    slot = harness.add_slot()
    late = Ticket(ticket("late", 0).reservation, 1.0, b"late")
    now = 1000.0
    slot.running["late"] = Running(late, started=now - 1.5)
    slot.running["fine"] = Running(ticket("fine", 0), started=now - 1.5)

    harness.sentinel._enforce_timeouts(slot, now)
    assert harness.worker_ends[0].recv_bytes() == cancel_frame("late")
    assert slot.running["late"].cancelled == now and not slot.stuck

    harness.sentinel._enforce_timeouts(slot, now + sentinel_module.CANCEL_GRACE / 2)
    assert not harness.worker_ends[0].poll(0) and not slot.stuck  # asked once; still within the grace

    harness.sentinel._enforce_timeouts(slot, now + sentinel_module.CANCEL_GRACE + 0.1)
    assert slot.stuck and set(slot.running) == {"late", "fine"}  # "fine" has no timeout: it runs on
    harness.push(ticket("new", 0))
    harness.sentinel._dispatch()
    assert harness.waiting() == ["new"]


def test_urgent_looks_are_paced_but_a_want_with_room_goes_at_once(harness, monkeypatch):
    """With the list more than half full the sentinel only asks for work above its lowest priority,
    at most every URGENT_CHECK; once half of it is free it asks for room at once, without waiting
    for that pace (the pusher answers a look for urgent work at once)."""
    from django_taskmq.cluster import sentinel as sentinel_module
    from django_taskmq.cluster.messages import Want

    monkeypatch.setattr(sentinel_module, "URGENT_CHECK", 60.0)  # no second look within this test
    s = harness.sentinel
    s.state, s.pusher = "running", multiprocessing.current_process()  # stands in for a live pusher
    harness.add_slot()
    limit = s.buffer.limit
    harness.push(*(ticket(f"t{i}", 0) for i in range(limit - 1)))

    def asked() -> Want | None:
        s._ask_pusher()
        return harness.pusher_end.recv() if harness.pusher_end.poll(0) else None

    assert asked() == Want(0, 0)  # full: only urgent work
    harness.push()  # the pusher found none
    assert asked() is None  # paced: not again at once
    s.buffer.take(limit // 2)  # half of the list left for the workers
    want = asked()
    assert want is not None and want.room >= limit // 2


def test_a_worker_that_has_started_nothing_yet_is_not_in_a_long_task():
    """With prefetch, ``since`` is 0 until a worker starts its first task: a fresh worker holding
    tasks it has not started must not look like one stuck in a long task (its tasks would be taken
    back and it would be sent no more)."""
    import time

    h = Harness(prefetch=4, workers=2)
    try:
        a, b = h.add_slot(), h.add_slot()
        s = h.sentinel
        s.state = "running"
        h.push(*(ticket(f"t{i}", 0) for i in range(3)))
        s._dispatch()
        assert sorted(a.running) == ["t0", "t2"] and sorted(b.running) == ["t1"]
        b.running.clear()  # b is done and idle, nothing waits: a steal would be due if a ran long
        s._steal()
        assert sorted(a.running) == ["t0", "t2"] and s.counts["steals"] == 0
        assert s._room(a, time.monotonic()) == s.depth - 2
        # Once a has started t0 (arrival 1) and run it past STEAL_AFTER, t2 goes to the idle worker.
        s.current[a.index], s.since[a.index] = 1, time.monotonic() - 1.0
        assert s._room(a, time.monotonic()) <= 0  # nothing more to hold behind it
        s._steal()
        assert sorted(a.running) == ["t0"] and s.counts["steals"] == 1
        assert h.waiting() == ["t2"]
    finally:
        h.close()


def frames(harness: Harness) -> list[bytes]:
    """The raw frames each worker slot got since the last call, in slot order."""
    return [end.recv_bytes() if end.poll(0) else b"" for end in harness.worker_ends]


def test_the_one_task_of_an_idle_cluster_is_sent_alone(harness):
    """Marked ALONE, its worker may record it: nothing else waits here or runs in a worker."""
    harness.add_slot(), harness.add_slot()
    harness.push(ticket("only", 0))
    harness.sentinel._dispatch()
    assert [f[:1] for f in frames(harness)] == [ALONE, b""]


def test_tasks_of_a_busy_cluster_are_not_sent_alone(harness):
    """Two at once, or one while another runs: the monitor records them in batches."""
    harness.add_slot(), harness.add_slot()
    harness.push(ticket("a", 0), ticket("b", 0))
    harness.sentinel._dispatch()
    assert [f[:1] for f in frames(harness)] == [TASKS, TASKS]
    del harness.sentinel.slots[1].running["b"]  # "b" ended, "a" still runs
    harness.push(ticket("c", 0))
    harness.sentinel._dispatch()
    assert [f[:1] for f in frames(harness)] == [b"", TASKS]


def test_outcomes_say_idle_only_when_nothing_else_waits_or_runs(harness):
    """The monitor records a list ending with IDLE at once (no more outcomes are coming); while a
    task runs or waits here, it gathers on."""
    harness.sentinel.results = results = FakeResults()
    harness.add_slot(), harness.add_slot()
    harness.push(ticket("a", 0), ticket("b", 0), ticket("c", 0))
    harness.sentinel._dispatch()  # a and b run, c waits
    harness.sentinel.outbox = [b"outcome of a"]
    del harness.sentinel.slots[0].running["a"]
    harness.sentinel._flush()
    harness.sentinel._dispatch()  # c runs
    harness.sentinel.outbox = [b"outcome of b"]
    del harness.sentinel.slots[1].running["b"]
    harness.sentinel._flush()
    harness.sentinel.outbox = [b"outcome of c"]
    harness.sentinel.slots[0].running.clear()
    harness.sentinel._flush()
    assert results.items == [[b"outcome of a"], [b"outcome of b"], [b"outcome of c", IDLE]]


# -- leases the sentinel cannot renew ----------------------------------------------------------------

def _database_fails(h: Harness, for_seconds: float) -> None:
    """The sentinel's database operations fail, and its last renewal that worked is ``for_seconds`` old."""
    from django.db import OperationalError

    h.sentinel.upkeep.failures.failed("lease renewal", OperationalError("server closed the connection unexpectedly"))
    h.sentinel.upkeep.renewed_at -= for_seconds


def test_leases_in_doubt_start_nothing_then_what_waited_is_given_back_unstarted():
    from tests.unit.test_buffer import delivery, reserve

    h = Harness(broker=None)
    broker = h.sentinel.broker
    lease = h.sentinel.settings.lease
    try:
        h.add_slot()
        tickets = reserve(broker, "a0", "b0", "c0")
        h.push(*tickets.values())
        _database_fails(h, lease * 0.4)  # one renewal failed: still held
        h.sentinel._mind_leases()
        assert not h.sentinel.paused
        h.sentinel.slots[0].running["x"] = Running(ticket("x", 0), 0.0)  # the worker is busy
        _database_fails(h, lease * 0.2)  # half a lease without a renewal: in doubt
        h.sentinel._mind_leases()
        h.sentinel.slots[0].running.clear()
        h.sentinel._dispatch()
        h.sentinel._ask_pusher()
        assert h.sentinel.paused
        assert h.received() == [None], "nothing starts while the leases are in doubt"
        assert not h.pusher_end.poll(0), "nothing is claimed"
        assert h.waiting() == ["a0", "b0", "c0"]

        _database_fails(h, lease)  # a whole lease: what waits may be someone else's now
        h.sentinel._mind_leases()
        assert h.sentinel.leases_lost and h.waiting() == ["a0", "b0", "c0"]
        # The database answers again (a renewal worked): the waiting tasks go back, undelivered.
        h.sentinel.upkeep.failures.succeeded()
        h.sentinel._mind_leases()
        h.sentinel._dispatch()
        assert not h.sentinel.paused and h.waiting() == []
        assert h.received() == [None]
        for name in ("a0", "b0", "c0"):
            state, deliveries, _, leased = delivery(broker, name)
            assert (state.value, deliveries, leased) == ("QUEUED", 0, False)
    finally:
        h.close()


def test_a_short_outage_pauses_and_resumes_without_giving_back():
    from tests.unit.test_buffer import reserve

    h = Harness()
    lease = h.sentinel.settings.lease
    try:
        h.add_slot()
        h.push(*reserve(h.sentinel.broker, "a0").values())
        _database_fails(h, lease * 0.6)
        h.sentinel._mind_leases()
        assert h.sentinel.paused and not h.sentinel.leases_lost
        h.sentinel.upkeep.failures.succeeded()
        h.sentinel._mind_leases()
        h.sentinel._dispatch()
        assert h.received() == ["a0"]
    finally:
        h.close()
