"""A worker with several threads is told to interrupt a task, or that it was cancelled, before a thread
has taken it (the sentinel's clock starts at the send; a busy or slow worker may read the word
before a thread is free to start the task). The word is kept for the task: it never starts when
interrupted, and it starts knowing it was cancelled. A coroutine interrupted while its thread waits
for its event loop to start is cancelled as it starts.

The worker's threads run in the test process, fed through a real pipe as the sentinel feeds them.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connections

from django_taskmq import async_task
from django_taskmq.runtime import execution as ex
from django_taskmq.cluster.interrupts import Interrupts
from django_taskmq.cluster.messages import (STOP, TIMED_OUT, Ticket, cancel_frame, cancel_request_frame,
                                            read_outcome_frame, tasks_frame)
from django_taskmq.cluster.worker import Pool
from django_taskmq.conf import get_settings
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db(transaction=True)  # the worker's threads have their own connections

TASKS = "tests.cluster.tasks_cluster"


def wait_until(done: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, f"waited 10 s for {what}"
        time.sleep(0.01)


class Worker:
    """A worker with two threads serving in a thread of the test process, fed through a pipe."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.pipe, child = multiprocessing.Pipe()
        self.pool = Pool(0, child, get_settings(), threads=2)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.pool.serve()
        finally:
            connections.close_all()

    def send(self, *job_ids: str) -> None:
        """Reserve ``job_ids`` (the only ready jobs) and send them in one tasks frame."""
        reservations = self.broker.reserve(["default"], len(job_ids), 30, "owner-a")
        assert sorted(r.job_id for r in reservations) == sorted(job_ids)
        self.pipe.send_bytes(tasks_frame([Ticket.of(ex.unpack(r, get_settings().name)) for r in reservations]))

    def outcomes(self, count: int) -> dict[str, tuple[bytes, ex.Outcome]]:
        """The next ``count`` outcomes: job id -> (status byte, outcome)."""
        got = {}
        for _ in range(count):
            assert self.pipe.poll(15), "the worker said nothing"
            status, job_id, data = read_outcome_frame(self.pipe.recv_bytes())
            got[job_id] = (status, pickle.loads(data))
        return got

    def stop(self) -> None:
        self.pipe.send_bytes(STOP)
        self.thread.join(15)
        assert not self.thread.is_alive()


@pytest.fixture
def run_log(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "run.log"
    monkeypatch.setenv("TASKMQ_RUN_LOG", str(path))
    return path


@pytest.fixture
def busy(broker, run_log, tmp_path) -> Iterator[tuple[Worker, Path]]:
    """A worker both of whose threads run a task held by a gate (a file): what it is sent now waits
    for a thread until the test opens the gate."""
    gate = tmp_path / "gate"
    holders = [async_task(f"{TASKS}.gated", f"holder{i}", str(gate)) for i in range(2)]
    worker = Worker(broker)
    worker.send(*holders)
    wait_until(lambda: len(read_run_log(run_log)) == 2, "both threads to start a held task")
    yield worker, gate
    gate.touch()
    worker.stop()


def started(run_log: Path, job_id: str) -> list[str]:
    return [tag.split()[0] for logged, tag in read_run_log(run_log) if logged == job_id]


@pytest.mark.parametrize("task", ["spin", "async_sleeper"])
def test_a_task_interrupted_before_a_thread_took_it_never_starts(busy, run_log, task):
    worker, gate = busy
    job_id = async_task(f"{TASKS}.{task}", 20, timeout=1)
    worker.send(job_id)
    worker.pipe.send_bytes(cancel_frame(job_id))
    wait_until(lambda: getattr(worker.pool.interrupts.holds(job_id), "interrupted", False), "the word to arrive")

    gate.touch()
    outcomes = worker.outcomes(3)

    status, outcome = outcomes[job_id]
    assert (status, outcome.status) == (TIMED_OUT, ex.TIMEOUT)
    assert "TaskTimeout: ran past its timeout of 1" in outcome.error
    assert started(run_log, job_id) == [], "it started"


def test_a_task_cancelled_before_a_thread_took_it_starts_knowing_it(busy, run_log):
    """The cancellation request came before the coroutine ran: its asyncio task is cancelled as it
    starts, so it ends CANCELLED at once instead of sleeping until the sentinel interrupts it."""
    worker, gate = busy
    job_id = async_task(f"{TASKS}.async_sleeper", 20)
    worker.send(job_id)
    worker.pipe.send_bytes(cancel_request_frame(job_id))
    wait_until(lambda: getattr(worker.pool.interrupts.holds(job_id), "cancel_requested", False),
               "the word to arrive")

    gate.touch()
    outcomes = worker.outcomes(3)

    assert outcomes[job_id][1].status == ex.CANCELLED
    assert started(run_log, job_id) == ["start:async-sleep"]


def test_a_coroutine_interrupted_before_its_event_loop_started_is_cancelled_as_it_starts(broker, run_log, monkeypatch):
    """The thread has handed the coroutine over and waits for the event loop's thread, which is slow
    to start it (a loaded machine, made so here): nothing is raised in the waiting thread (landing
    while it starts the loop's thread, it would leave the coroutine running there); the coroutine is
    cancelled as soon as it starts, and the thread reports it once it has ended."""
    coroutine_started = Interrupts._coroutine

    def slow_loop(self, entry, loop, task):
        time.sleep(1.0)
        coroutine_started(self, entry, loop, task)

    monkeypatch.setattr(Interrupts, "_coroutine", slow_loop)
    job_id = async_task(f"{TASKS}.async_sleeper", 20, timeout=1)
    worker = Worker(broker)
    worker.send(job_id)
    wait_until(lambda: getattr(worker.pool.interrupts.holds(job_id), "coroutine", False), "the hand-over")
    worker.pipe.send_bytes(cancel_frame(job_id))

    (status, outcome), = worker.outcomes(1).values()
    logged = started(run_log, job_id)  # before the outcome: the coroutine has ended, not orphaned
    worker.stop()

    assert (status, outcome.status) == (TIMED_OUT, ex.TIMEOUT)
    assert logged == ["start:async-sleep"]
