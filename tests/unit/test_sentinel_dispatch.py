"""The sentinel's waiting list and dispatch, without a cluster: a ``Sentinel`` that is never started,
driven through its guard loop's turn (``Sentinel.step()``) and real pipes (its pusher pipe and one
pipe per worker slot, whose far ends the tests write as the pusher and the workers would); no process
is spawned, and the broker is the in-memory one (tests/memory_broker.py) unless a test hands in another.

Waiting tasks are ordered by priority (higher first), then by arrival; each idle worker gets the
first waiting task; busy and retiring workers get nothing; a task whose send fails goes back.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Iterator

import pytest

from django_taskmq.runtime import execution as ex
from django_taskmq.brokers.base import Broker, Reservation
from django_taskmq.cluster.messages import (ALONE, IDLE, READY, STOP, TASKS, Batch, Ticket, outcome_frame, read_tasks_frame,
                                            recorded_frame)
from django_taskmq.cluster.sentinel import ClusterState, Sentinel
from django_taskmq.cluster.slots import INTERRUPT_GRACE, Slot
from django_taskmq.conf import get_settings
from tests.fake_results import FakeResults
from tests.memory_broker import MemoryBroker


def ticket(label: str, priority: int) -> Ticket:
    """A task the pusher would hand over; its blob (what a worker receives) is the label."""
    reservation = Reservation(label, "default", priority, 1, 0, f"token-{label}", "test-owner", 5)
    return Ticket(reservation, None, label.encode())


class StandIn:
    """A child process that is alive and never exits: its process sentinel is a pipe never written."""

    pid = None
    exitcode = None

    def __init__(self) -> None:
        self._read, self._write = os.pipe()

    @property
    def sentinel(self) -> int:
        return self._read

    def is_alive(self) -> bool:
        return True

    def join(self, timeout: float | None = None) -> None:
        return None

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


class Harness:
    """A running sentinel whose children are stand-ins: ``add_slot()`` adds a worker slot; ``push()``,
    ``ready()`` and ``finish()`` write what the pusher and the workers would, then take one turn of
    the guard loop; ``close()`` closes every pipe."""

    def __init__(self, broker: Broker | None = None, prefetch: int = 0, workers: int = 1, threads: int = 1) -> None:
        # A short guard interval: a turn in which nothing arrives waits that long.
        settings = dataclasses.replace(get_settings(), prefetch=prefetch, guard_interval=0.01)
        self.sentinel = Sentinel(settings, broker or MemoryBroker(settings), workers=workers, threads=threads)
        self.sentinel.pusher_pipe, self.pusher_end = multiprocessing.Pipe()
        self.stand_ins = [StandIn(), StandIn()]
        self.sentinel.pusher, self.sentinel.monitor = self.stand_ins
        self.sentinel.state = ClusterState.RUNNING
        self.worker_ends: list = []
        self.pills: list[int] = []  # the slots that got their poison pill, in order

    def add_slot(self, ready: bool = True) -> Slot:
        parent, child = multiprocessing.Pipe()
        stand_in = StandIn()
        self.stand_ins.append(stand_in)
        slot = Slot(len(self.sentinel.slots), stand_in, parent, ready=ready)
        self.sentinel.slots.append(slot)
        self.worker_ends.append(child)
        return slot

    def step(self) -> None:
        """One turn of the guard loop."""
        self.sentinel.step()

    def step_until(self, done: Callable[[], bool], what: str, turns: int = 200) -> None:
        """Turn the guard loop until ``done()``."""
        for _ in range(turns):
            if done():
                return
            self.step()
        assert done(), f"{what} after {turns} turns"

    def push(self, *tickets: Ticket) -> None:
        """The pusher sends one batch; the sentinel reads it in one turn."""
        self.pusher_end.send(Batch(tuple(tickets)))
        self.step()

    def ready(self, *slots: Slot) -> None:
        """Freshly spawned workers say they are ready; one turn."""
        for slot in slots:
            self.worker_ends[slot.index].send_bytes(READY)
        self.step()

    def finish(self, slot: Slot, *job_ids: str, recorded: bool = True) -> None:
        """The worker of ``slot`` reports its tasks ``job_ids`` ended (recorded by itself, or its
        outcome for the monitor); one turn."""
        for job_id in job_ids:
            running = slot.running[job_id]
            frame = recorded_frame(job_id) if recorded else outcome_frame(
                ex.Outcome(running.ticket.reservation, None, ex.SUCCESS, started_at=1.0, finished_at=2.0))
            self.worker_ends[slot.index].send_bytes(frame)
        self.step()

    def wants(self) -> list:
        """What the sentinel asked the pusher for since the last call."""
        got = []
        while self.pusher_end.poll(0):
            got.append(self.pusher_end.recv())
        return got

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
                frame = end.recv_bytes()
                if frame == STOP:
                    self.pills.append(self.worker_ends.index(end))
                else:
                    frames.append(frame)
            assert len(frames) <= 1, "a worker got more than one message in one dispatch"
            got.append([blob.decode() for frame in frames for blob in read_tasks_frame(frame)])
        return got

    def close(self) -> None:
        for pipe in [self.sentinel.pusher_pipe, self.pusher_end, *self.worker_ends,
                     *(s.pipe for s in self.sentinel.slots)]:
            if pipe is not None:
                pipe.close()
        for stand_in in self.stand_ins:
            stand_in.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(workers=5)  # room in the shared memory for the slots a test adds
    yield h
    h.close()


def test_waiting_tasks_are_ordered_by_priority_then_arrival(harness):
    """Two batches: the waiting list holds the higher priorities first, equal ones in arrival order."""
    harness.push(ticket("a0", 0), ticket("b5", 5), ticket("c0", 0))
    harness.push(ticket("d9", 9), ticket("e5", 5), ticket("f-3", -3))
    assert harness.waiting() == ["d9", "b5", "e5", "a0", "c0", "f-3"]


def test_each_idle_worker_gets_the_most_urgent_waiting_task(harness):
    """Five workers become ready while six tasks wait: they get them in priority-then-arrival order."""
    slots = [harness.add_slot(ready=False) for _ in range(5)]
    harness.push(ticket("a0", 0), ticket("b5", 5), ticket("c0", 0))
    harness.push(ticket("d9", 9), ticket("e5", 5), ticket("f-3", -3))
    assert harness.received() == [None] * 5  # not ready yet

    harness.ready(*slots)

    assert harness.received() == ["d9", "b5", "e5", "a0", "c0"]
    assert [list(s.running) for s in slots] == [["d9"], ["b5"], ["e5"], ["a0"], ["c0"]]
    assert harness.waiting() == ["f-3"]


def test_a_later_urgent_task_overtakes_waiting_ones(harness):
    """A task that arrives after others but with a higher priority is dispatched first."""
    slot = harness.add_slot(ready=False)
    harness.push(ticket("n1", 0), ticket("n2", 0))
    harness.push(ticket("urgent", 7))

    harness.ready(slot)

    assert harness.received() == ["urgent"]
    assert harness.waiting() == ["n1", "n2"]


def test_busy_and_retiring_workers_get_nothing_and_the_rest_keeps_its_order(harness):
    """Only idle, non-retiring workers are fed; what is left waits in order for the next free worker."""
    busy, retiring, idle1, idle2 = (harness.add_slot(ready=False) for _ in range(4))
    harness.ready(busy)
    harness.push(ticket("running", 9))
    assert list(busy.running) == ["running"]
    retiring.retiring = True
    harness.push(ticket("x1", 1), ticket("y3", 3), ticket("z3", 3), ticket("w2", 2))
    harness.received()

    harness.ready(retiring, idle1, idle2)

    assert harness.received() == [None, None, "y3", "z3"]
    assert harness.pills == [1]  # the retiring worker gets its poison pill instead
    assert (list(busy.running), retiring.running) == (["running"], {})
    assert harness.waiting() == ["w2", "x1"]

    harness.finish(busy, "running")  # its outcome arrived
    assert harness.received() == ["w2", None, None, None]
    assert harness.waiting() == ["x1"]
    assert harness.sentinel.counts["succeeded"] == 1


def test_a_task_whose_send_fails_goes_back_and_reaches_the_next_idle_worker(harness):
    """A worker whose pipe broke gets no task; the task is not lost but given to the next idle worker."""
    broken, healthy = harness.add_slot(), harness.add_slot()
    harness.worker_ends[0].close()  # the worker's end is gone: sending to it fails
    harness.worker_ends[0] = None
    harness.push(ticket("urgent", 9), ticket("normal", 0))

    assert broken.running == {}
    assert list(healthy.running) == ["urgent"]
    assert harness.received() == [None, "urgent"]
    assert harness.waiting() == ["normal"]


def test_with_threads_each_worker_gets_tasks_until_its_threads_are_full_one_per_round():
    """3 threads, 2 workers, 7 waiting: the most urgent go out alternately, 6 in all; one waits."""
    h = Harness(workers=2, threads=3)
    try:
        first, second = h.add_slot(ready=False), h.add_slot(ready=False)
        h.push(*(ticket(f"t{i}", 9 - i) for i in range(7)))

        h.ready(first, second)

        assert list(first.running) == ["t0", "t2", "t4"] and list(second.running) == ["t1", "t3", "t5"]
        assert h.waiting() == ["t6"]
        assert h.batches() == [["t0", "t2", "t4"], ["t1", "t3", "t5"]]
    finally:
        h.close()


def test_a_worker_not_ready_yet_gets_nothing():
    h = Harness(workers=2, threads=2)
    try:
        spawning, ready = h.add_slot(ready=False), h.add_slot()
        h.push(ticket("a", 0), ticket("b", 0), ticket("c", 0))

        assert (list(spawning.running), list(ready.running), h.waiting()) == ([], ["a", "b"], ["c"])
        h.ready(spawning)
        assert (list(spawning.running), h.waiting()) == (["c"], [])
    finally:
        h.close()


def test_with_threads_a_task_past_its_timeout_is_cancelled_then_its_worker_is_marked_stuck():
    """The worker is asked to interrupt the task (a cancel frame naming it); a task still running
    INTERRUPT_GRACE seconds later makes the worker take no more work while its other task runs on."""
    import time

    from django_taskmq.cluster.messages import cancel_frame

    h = Harness(threads=4)
    try:
        slot = h.add_slot()
        late = Ticket(ticket("late", 0).reservation, 1.0, b"late")
        h.push(late, ticket("fine", 0))
        h.batches()
        slot.running["late"].started = slot.running["fine"].started = time.monotonic() - 1.5  # as if sent then

        h.step_until(lambda: h.worker_ends[0].poll(0), "a cancel frame")
        assert h.worker_ends[0].recv_bytes() == cancel_frame("late")
        assert slot.running["late"].cancelled is not None and not slot.stuck
        for _ in range(3):
            h.step()
        assert not h.worker_ends[0].poll(0) and not slot.stuck  # asked once; still within the grace

        slot.running["late"].cancelled -= INTERRUPT_GRACE + 0.1  # as if asked that long ago
        h.step_until(lambda: slot.stuck, "the worker marked stuck")
        assert set(slot.running) == {"late", "fine"}  # "fine" has no timeout: it runs on
        h.push(ticket("new", 0))
        assert h.waiting() == ["new"]
    finally:
        h.close()


def test_urgent_looks_are_paced_but_a_want_with_room_goes_at_once(harness, monkeypatch):
    """With the list more than half full the sentinel only asks for work above its lowest priority,
    at most every URGENT_CHECK; once half of it is free it asks for room at once, without waiting
    for that pace (the pusher answers a look for urgent work at once)."""
    from django_taskmq.cluster import sentinel as sentinel_module
    from django_taskmq.cluster.messages import Want

    monkeypatch.setattr(sentinel_module, "URGENT_CHECK", 60.0)  # no second look within this test
    s = harness.sentinel
    harness.add_slot(ready=False)
    limit = s.buffer.limit
    harness.push(*(ticket(f"t{i}", 0) for i in range(limit - 1)))

    # Asked for room while the list was empty; then, full, only for urgent work.
    assert harness.wants() == [Want(limit, None), Want(0, 0)]
    harness.push()  # the pusher found none
    assert harness.wants() == []  # paced: not again at once
    s.buffer.take(limit // 2)  # half of the list left for the workers
    harness.step()
    (want,) = harness.wants()
    assert want.room >= limit // 2


def test_a_worker_that_has_started_nothing_yet_is_not_in_a_long_task():
    """With prefetch, ``since`` is 0 until a worker starts its first task: a fresh worker holding
    tasks it has not started must not look like one stuck in a long task (its tasks would be taken
    back and it would be sent no more)."""
    import time

    h = Harness(prefetch=4, workers=2)
    try:
        a, b = h.add_slot(ready=False), h.add_slot(ready=False)
        s = h.sentinel
        h.push(*(ticket(f"t{i}", 0) for i in range(3)))
        h.ready(a, b)
        assert sorted(a.running) == ["t0", "t2"] and sorted(b.running) == ["t1"]
        h.batches()
        h.finish(b, "t1")  # b is done and idle, nothing waits: a steal would be due if a ran long
        assert sorted(a.running) == ["t0", "t2"] and s.counts["steals"] == 0
        h.push(ticket("t3", 0))  # a has room for more behind what it has not started
        assert sorted(a.running) == ["t0", "t2", "t3"] and h.batches() == [["t3"], []]
        h.step()
        # Once a has started t0 (arrival 1) and run it past STEAL_AFTER, what it holds behind goes
        # to the idle worker.
        s.memory.current[a.index], s.memory.since[a.index] = 1, time.monotonic() - 1.0
        h.step()
        assert sorted(a.running) == ["t0"] and s.counts["steals"] == 2
        assert sorted(b.running) == ["t2", "t3"] and h.batches() == [[], ["t2", "t3"]]
        h.push(ticket("t4", 0))  # nothing more is held behind a's long task
        assert sorted(a.running) == ["t0"] and "t4" in b.running
    finally:
        h.close()


def test_an_urgent_task_overtakes_what_a_full_worker_holds_once():
    """With prefetch, a full worker holding only less urgent tasks is sent one more urgent task (one
    over its room), once; one as urgent as what it holds waits."""
    h = Harness(prefetch=2)
    try:
        slot = h.add_slot()
        h.push(ticket("n0", 0), ticket("n1", 0), ticket("n2", 0))
        assert sorted(slot.running) == ["n0", "n1", "n2"] and h.batches() == [["n0", "n1", "n2"]]
        h.push(ticket("same", 0), ticket("urgent", 9), ticket("urgent2", 9))
        assert h.batches() == [["urgent"]]
        assert h.waiting() == ["urgent2", "same"]
        h.step()  # urgent2 is not more urgent than all the worker holds now
        assert h.batches() == [[]] and h.waiting() == ["urgent2", "same"]
    finally:
        h.close()


def frames(harness: Harness) -> list[bytes]:
    """The raw frames each worker slot got since the last call, in slot order."""
    return [end.recv_bytes() if end.poll(0) else b"" for end in harness.worker_ends]


def test_the_one_task_of_an_idle_cluster_is_sent_alone(harness):
    """Marked ALONE, its worker may record it: nothing else waits here or runs in a worker."""
    harness.add_slot(), harness.add_slot()
    harness.push(ticket("only", 0))
    assert [f[:1] for f in frames(harness)] == [ALONE, b""]


def test_tasks_of_a_busy_cluster_are_not_sent_alone(harness):
    """Two at once, or one while another runs: the monitor records them in batches."""
    first, second = harness.add_slot(), harness.add_slot()
    harness.push(ticket("a", 0), ticket("b", 0))
    assert [f[:1] for f in frames(harness)] == [TASKS, TASKS]
    harness.finish(second, "b")  # "b" ended, "a" still runs
    assert list(first.running) == ["a"]
    harness.push(ticket("c", 0))
    assert [f[:1] for f in frames(harness)] == [b"", TASKS]


def test_outcomes_say_idle_only_when_nothing_else_waits_or_runs(harness):
    """The monitor records a list ending with IDLE at once (no more outcomes are coming); while a
    task runs or waits here, it gathers on."""
    harness.sentinel.results = results = FakeResults()
    first, second = harness.add_slot(), harness.add_slot()
    harness.push(ticket("a", 0), ticket("b", 0), ticket("c", 0))  # a and b run, c waits
    harness.finish(first, "a", recorded=False)  # c runs
    harness.finish(second, "b", recorded=False)
    harness.finish(first, "c", recorded=False)
    assert [[pickle_id(o) for o in part] for part in results.items] == [["a"], ["b"], ["c", IDLE]]


def pickle_id(outcome: bytes) -> str | bytes:
    """The job id of a pickled outcome (IDLE as it is)."""
    import pickle

    return outcome if outcome == IDLE else pickle.loads(outcome).reservation.job_id


# -- leases the sentinel cannot renew ----------------------------------------------------------------

def _database_fails(h: Harness, for_seconds: float) -> None:
    """The sentinel's database operations fail, and its last renewal that worked is ``for_seconds`` old."""
    from django.db import OperationalError

    h.sentinel.upkeep.failures.failed("lease renewal", OperationalError("server closed the connection unexpectedly"))
    h.sentinel.upkeep.renewed_at -= for_seconds


@pytest.fixture
def no_cancel_checks(monkeypatch):
    """The sentinel's look for cancellations, a database operation that works, would end the
    simulated outage: none within these tests."""
    from django_taskmq.cluster import stopping as stopping_module

    monkeypatch.setattr(stopping_module, "CANCEL_CHECK_EVERY", 3600.0)


def test_leases_in_doubt_start_nothing_then_what_waited_is_given_back_unstarted(no_cancel_checks):
    from tests.unit.test_buffer import delivery, reserve

    h = Harness(broker=None)
    broker = h.sentinel.broker
    lease = h.sentinel.settings.lease
    try:
        slot = h.add_slot(ready=False)  # the worker is still starting
        tickets = reserve(broker, "a0", "b0", "c0")
        h.push(*tickets.values())
        _database_fails(h, lease * 0.4)  # one renewal failed: still held
        h.step()
        assert not h.sentinel.paused
        _database_fails(h, lease * 0.2)  # half a lease without a renewal: in doubt
        h.step()
        h.wants()
        h.ready(slot)
        assert h.sentinel.paused
        assert h.received() == [None], "nothing starts while the leases are in doubt"
        assert h.wants() == [], "nothing is claimed"
        assert h.waiting() == ["a0", "b0", "c0"]

        _database_fails(h, lease)  # a whole lease: what waits may be someone else's now
        h.step()
        assert h.sentinel.leases_lost and h.waiting() == ["a0", "b0", "c0"]
        # The database answers again (a renewal worked): the waiting tasks go back, undelivered.
        h.sentinel.upkeep.failures.succeeded()
        h.step()
        assert not h.sentinel.paused and h.waiting() == []
        assert h.received() == [None]
        for name in ("a0", "b0", "c0"):
            state, deliveries, _, leased = delivery(broker, name)
            assert (state.value, deliveries, leased) == ("QUEUED", 0, False)
    finally:
        h.close()


def test_a_short_outage_pauses_and_resumes_without_giving_back(no_cancel_checks):
    from tests.unit.test_buffer import reserve

    h = Harness()
    lease = h.sentinel.settings.lease
    try:
        slot = h.add_slot(ready=False)
        h.push(*reserve(h.sentinel.broker, "a0").values())
        _database_fails(h, lease * 0.6)
        h.ready(slot)
        assert h.sentinel.paused and not h.sentinel.leases_lost
        assert h.received() == [None]
        h.sentinel.upkeep.failures.succeeded()
        h.step()
        assert h.received() == ["a0"]
    finally:
        h.close()
