"""The sentinel's stop procedure (``Sentinel.stop()``), run in this process: no child process, no
database (pytest-django refuses database access to these tests: none is marked ``django_db``).

The broker is the in-memory one. Stand-ins take the children's places: each worker is a real
``multiprocessing.Pipe()`` whose far end a :class:`FakeWorker` reads and answers, the pusher and the
monitor are stand-ins too. A stand-in acts when the sentinel looks whether it lives (``is_alive()``,
once per turn of the stop loop), so the order of what happened can be checked.

What a graceful stop must do: the pusher's last batch joins the waiting list; every waiting
(reserved, never started) task goes back to the broker without a delivery counted; an idle worker
gets its poison pill at once, a busy one only after it reported its outcome; the outcome reaches the
monitor before the end mark; the leases of running tasks are renewed meanwhile.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from collections.abc import Iterator

import pytest
from django.db import OperationalError

from django_taskmq.runtime import execution as ex
from django_taskmq.cluster.messages import END_OF_RESULTS, IDLE, STOP, Batch, Stop, Ticket, outcome_frame, recorded_frame
from django_taskmq.cluster.sentinel import Sentinel
from django_taskmq.cluster.slots import Running, Slot
from django_taskmq.conf import get_settings
from django_taskmq.envelope import Envelope
from django_taskmq.policy.states import JobState
from tests.fake_results import FakeResults
from tests.memory_broker import MemoryBroker


class FakeWorker:
    """A worker process stand-in behind a real pipe end; ``busy_for``: looks until it sends ``frame``."""

    def __init__(self, name: str, end, events: list, busy_for: int | None = None, frame: bytes = b"") -> None:
        self.name, self.end, self.events = name, end, events
        self.busy_for, self.frame = busy_for, frame
        self.pid = None
        self.exitcode: int | None = None
        self._never, self._write = os.pipe()  # its process sentinel: it never dies by itself

    @property
    def sentinel(self) -> int:
        return self._never

    def is_alive(self) -> bool:
        if self.exitcode is not None:
            return False
        if self.busy_for:  # like a worker with one thread, it reads its pipe only between tasks
            self.busy_for -= 1
            if self.busy_for == 0:
                self.end.send_bytes(self.frame)
                self.events.append((self.name, "outcome"))
            return True
        while self.end.poll(0):
            message = self.end.recv_bytes()
            self.events.append((self.name, "STOP" if message == STOP else "task"))
            if message == STOP:
                self.exitcode = 0
                return False
        return True

    def join(self, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        for fd in (self._never, self._write):
            os.close(fd)
        self.end.close()


class FakePusher:
    """The pusher stand-in: on :class:`Stop` it sends ``last`` (a batch claimed meanwhile), then exits."""

    def __init__(self, end, last: Batch) -> None:
        self.end, self.last = end, last
        self.pid = None
        self.exitcode: int | None = None
        self.stopped_by: object = None
        self._never, self._write = os.pipe()  # its process sentinel: never readable (its exit is simulated)

    @property
    def sentinel(self) -> int:
        return self._never

    def is_alive(self) -> bool:
        if self.exitcode is not None:
            return False
        if self.end.poll(0):
            self.stopped_by = self.end.recv()
            self.end.send(self.last)
            self.exitcode = 0
        return True  # its last batch is on its way; it is gone at the next look

    def join(self, timeout: float | None = None) -> None:
        pass


class FakeMonitor:
    """The monitor stand-in: alive until the end mark is on the result queue."""

    pid = None
    exitcode = None

    def __init__(self, results: FakeResults) -> None:
        self.results = results

    def is_alive(self) -> bool:
        return END_OF_RESULTS not in self.results.items

    def join(self, timeout: float | None = None) -> None:
        pass


class Cluster:
    """A never started sentinel on a memory broker, with stand-ins for its children."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.sentinel = Sentinel(get_settings(), broker, workers=2)
        self.events: list[tuple[str, str]] = []
        self.workers: list[FakeWorker] = []
        self.results = FakeResults()
        self.sentinel.results = self.results
        self.sentinel.monitor = FakeMonitor(self.results)
        self.sentinel.pusher_pipe, self.pusher_end = multiprocessing.Pipe()

    def reserve(self, *names: str) -> dict[str, Ticket]:
        """Enqueue and reserve (as this cluster) one job per name; return their tickets."""
        for name in names:
            self.broker.enqueue({"id": name, "payload": name})
        reservations = self.broker.reserve(["default"], len(names), 30, self.sentinel.owner)
        return {r.job_id: Ticket.of(ex.TaskMessage(r, Envelope(func="tests.tasks.noop"))) for r in reservations}

    def pusher_sends_at_stop(self, *tickets: Ticket) -> FakePusher:
        pusher = FakePusher(self.pusher_end, Batch(tickets))
        self.sentinel.pusher = pusher
        return pusher

    def add_worker(self, name: str, task: Ticket | None = None, busy_for: int | None = None,
                   frame: bytes = b"") -> Slot:
        parent, child = multiprocessing.Pipe()
        worker = FakeWorker(name, child, self.events, busy_for, frame)
        self.workers.append(worker)
        slot = Slot(len(self.sentinel.slots), worker, parent)
        if task is not None:  # it runs the task (arrived first): what the worker writes when it starts one
            slot.running[task.reservation.job_id] = Running(task, time.monotonic(), arrival=1)
            slot.sent = 1
            self.sentinel.memory.current[slot.index], self.sentinel.memory.since[slot.index] = 1, time.monotonic()
        self.sentinel.slots.append(slot)
        return slot

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        if isinstance(self.sentinel.pusher, FakePusher):
            os.close(self.sentinel.pusher._never)
            os.close(self.sentinel.pusher._write)
        for pipe in (self.sentinel.pusher_pipe, self.pusher_end):
            pipe.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(MemoryBroker(get_settings()))
    yield c
    c.close()


def state(broker: MemoryBroker, name: str) -> tuple[JobState, int, bool]:
    """(state, deliveries, holds a lease token)."""
    job = broker.job(name)
    return job.state, job.deliveries, job.lease_token is not None


def test_a_graceful_stop(cluster):
    """Two tasks wait, one arrives from the pusher during the stop, one runs (for three more turns)
    on one of two workers."""
    t = cluster.reserve("wait1", "wait2", "late", "run")
    outcome = ex.Outcome(t["run"].reservation, None, ex.SUCCESS, started_at=1.0, finished_at=2.0)
    cluster.sentinel.buffer.add([t["wait1"], t["wait2"]])
    pusher = cluster.pusher_sends_at_stop(t["late"])
    cluster.add_worker("idle")
    cluster.add_worker("busy", task=t["run"], busy_for=3, frame=outcome_frame(outcome))
    lease_before = cluster.broker.job("run").lease_until

    cluster.sentinel.stop()

    assert isinstance(pusher.stopped_by, Stop)
    # Unstarted reservations, also the one the pusher sent while stopping, went back uncounted.
    for name in ("wait1", "wait2", "late"):
        assert state(cluster.broker, name) == (JobState.QUEUED, 0, False), name
    assert len(cluster.sentinel.buffer) == 0
    # Both got their pill at once; the busy one read it after its task (it held nothing unstarted).
    assert cluster.events == [("idle", "STOP"), ("busy", "outcome"), ("busy", "STOP")]
    assert cluster.sentinel.slots == []
    # The outcome went to the monitor, unopened, before the end mark; nothing else was held then.
    assert cluster.results.items == [[pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL), IDLE], END_OF_RESULTS]
    assert state(cluster.broker, "run") == (JobState.RUNNING, 1, True)  # the monitor records it
    assert cluster.broker.job("run").lease_until > lease_before  # renewed while it ran
    counts = cluster.sentinel.counts
    assert (counts["succeeded"], counts["failed"], counts["crashes"]) == (1, 0, 0)
    # The heartbeat's per-queue outcome counts (the metrics' counters).
    report = cluster.sentinel.report().counts
    assert report["queues"] == {"default": {"succeeded": 1, "failed": 0, "timeouts": 0, "crashes": 0,
                                            "suspended": 0}}
    assert report["tasks"] == [] and report["running"] == 0
    assert cluster.sentinel.state == "stopped"
    assert cluster.broker.heartbeats[cluster.sentinel.owner]["state"] == "stopping"


def test_a_success_its_worker_recorded_is_counted_and_not_sent_to_the_monitor(cluster):
    t = cluster.reserve("run")
    cluster.add_worker("busy", task=t["run"], busy_for=1, frame=recorded_frame(t["run"].reservation.job_id))

    cluster.sentinel.stop()

    assert cluster.results.items == [END_OF_RESULTS]
    counts = cluster.sentinel.counts
    assert (counts["succeeded"], counts["failed"], counts["crashes"]) == (1, 0, 0)
    report = cluster.sentinel.report().counts
    assert report["queues"] == {"default": {"succeeded": 1, "failed": 0, "timeouts": 0, "crashes": 0,
                                            "suspended": 0}}


def test_when_the_broker_cannot_take_the_waiting_tasks_back_their_leases_will(cluster):
    """The give-back fails (the database is away): logged, the connection dropped, the list emptied
    all the same; the stop goes on."""
    def away(reservations):
        raise OperationalError("the database system is shutting down")

    cluster.broker.defer_many = away
    t = cluster.reserve("wait1")
    cluster.sentinel.buffer.add([t["wait1"]])
    cluster.pusher_sends_at_stop()
    cluster.add_worker("idle")

    cluster.sentinel.stop()

    assert len(cluster.sentinel.buffer) == 0
    assert state(cluster.broker, "wait1") == (JobState.RUNNING, 1, True)  # comes back when its lease runs out
    assert cluster.broker.closes == 1
    assert "returning 1 unstarted reservation(s)" in cluster.sentinel.upkeep.failures.last
    assert cluster.events == [("idle", "STOP")]
    assert cluster.results.items == [END_OF_RESULTS]


def test_the_heartbeat_tells_what_each_busy_worker_runs(cluster):
    """``counts["tasks"]``: worker index, job id, queue and seconds running (qmonitor shows them)."""
    import time

    t = cluster.reserve("run")
    cluster.add_worker("idle")
    busy = cluster.add_worker("busy", task=t["run"])
    cluster.sentinel.memory.since[busy.index] = time.monotonic() - 2.0
    counts = cluster.sentinel.report().counts
    ((index, job_id, queue, seconds),) = counts["tasks"]
    assert (index, job_id, queue, counts["running"]) == (busy.index, "run", "default", 1)
    assert 2.0 <= seconds < 60


def test_an_error_in_the_sentinel_kills_its_processes_instead_of_leaving_them_waiting(cluster, monkeypatch):
    """A bug raising in the guard loop: the children are killed (Python's exit would otherwise wait
    for them for ever) and the error propagates."""
    import signal as signal_module

    killed: list[bool] = []

    def bug() -> None:
        raise RuntimeError("a bug in the guard loop")

    monkeypatch.setattr(cluster.sentinel, "spawn_all", lambda: None)
    monkeypatch.setattr(cluster.sentinel, "kill_all", lambda: killed.append(True))
    monkeypatch.setattr(cluster.sentinel, "step", bug)
    handlers = signal_module.getsignal(signal_module.SIGTERM), signal_module.getsignal(signal_module.SIGINT)
    try:
        with pytest.raises(RuntimeError, match="a bug in the guard loop"):
            cluster.sentinel.start()
    finally:
        signal_module.signal(signal_module.SIGTERM, handlers[0])
        signal_module.signal(signal_module.SIGINT, handlers[1])
    assert killed == [True]


KILLED_WITH_A_FULL_RESULT_QUEUE = """
from django_taskmq.cluster.result_pipe import ResultPipe
from django_taskmq.cluster.sentinel import Sentinel
from django_taskmq.conf import get_settings
from tests.memory_broker import MemoryBroker

sentinel = Sentinel(get_settings(), MemoryBroker(get_settings()), workers=1)
sentinel.results = ResultPipe()  # its reader stays open here: a monitor that stopped reading
for _ in range(200):  # far more than a pipe holds
    sentinel.results.put([b"x" * 10_000])
print("pending", sentinel.results.pending > 0)
sentinel.kill_all()
print("killed")
"""


@pytest.mark.slow
def test_a_killed_cluster_exits_with_outcomes_left_in_a_full_result_queue():
    """After the hard kill (a second signal, a burst that gives up) the monitor is gone and the
    outcomes still waiting for it cannot be written: putting them never blocked the sentinel, and
    its process exits all the same."""
    from tests.conftest import finish, start_script

    assert finish(start_script(KILLED_WITH_A_FULL_RESULT_QUEUE), timeout=30).split() == ["pending", "True", "killed"]


def _wait_to_be_killed(*args) -> None:
    """A child's target standing in for the pusher and the workers: it waits until it is killed."""
    time.sleep(60)


def test_a_spawn_that_fails_half_way_kills_the_children_already_forked(monkeypatch):
    """The monitor (forked last) cannot be spawned: the pusher and the workers forked before it are
    killed and the error propagates, instead of Python's exit waiting for them for ever."""
    import signal as signal_module

    from django_taskmq.cluster import pusher, sentinel as sentinel_module, worker

    def no_fork(self) -> None:
        raise OSError("fork failed: cannot allocate memory")

    monkeypatch.setattr(pusher, "run", _wait_to_be_killed)
    monkeypatch.setattr(worker, "run", _wait_to_be_killed)
    monkeypatch.setattr(sentinel_module.Sentinel, "_spawn_monitor", no_fork)
    sentinel = Sentinel(get_settings(), MemoryBroker(get_settings()), workers=2)
    handlers = signal_module.getsignal(signal_module.SIGTERM), signal_module.getsignal(signal_module.SIGINT)
    try:
        with pytest.raises(OSError, match="fork failed"):
            sentinel.start()
    finally:
        signal_module.signal(signal_module.SIGTERM, handlers[0])
        signal_module.signal(signal_module.SIGINT, handlers[1])
    children = [sentinel.pusher, *(slot.process for slot in sentinel.slots)]
    assert len(children) == 3 and all(child.pid for child in children)
    assert not any(child.is_alive() for child in children)
