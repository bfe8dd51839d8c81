"""A worker with several threads is told to interrupt a task, or that it was cancelled, before a thread
has taken it: the frame right behind the task's (the sentinel's clock starts at the send; a busy or
slow worker may read both before a thread is free to start it). The word is kept for the task: it
never starts when interrupted, and it starts knowing it was cancelled. A coroutine interrupted
while its thread waits for its event loop to start is cancelled as it starts.

The worker's threads run in the test process, fed through a real pipe as the sentinel feeds them.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time

import pytest
from django.db import connections

from django_taskmq import async_task
from django_taskmq import execution as ex
from django_taskmq.cluster.messages import (STOP, TIMED_OUT, Ticket, cancel_frame, cancel_request_frame,
                                            read_outcome_frame, tasks_frame)
from django_taskmq.cluster.interrupts import Interrupts
from django_taskmq.cluster.worker import Pool
from django_taskmq.conf import get_settings
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db(transaction=True)  # the worker's threads have their own connections

TASKS = "tests.cluster.tasks_cluster"


@pytest.fixture
def run_log(tmp_path, monkeypatch):
    path = tmp_path / "run.log"
    monkeypatch.setenv("TASKMQ_RUN_LOG", str(path))
    return path


def serve_two_threads(broker, frames_after, pool_ready=None) -> tuple[str, bytes, bytes]:
    """Reserve the one ready job, send it to a worker with two threads immediately followed by
    ``frames_after(job_id)``, and return (job id, status byte, pickled outcome). ``pool_ready(pool,
    job_id)``, when given, runs after the worker started and before those frames are sent."""
    (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    ticket = Ticket.of(ex.unpack(reservation, get_settings().name))
    pipe, child = multiprocessing.Pipe()
    pool = Pool(0, child, get_settings(), threads=2)

    def serve() -> None:
        try:
            pool.serve()
        finally:
            connections.close_all()

    thread = threading.Thread(target=serve, daemon=True)
    # Without pool_ready, every frame is in the pipe before the worker reads the first.
    pipe.send_bytes(tasks_frame([ticket]))
    if pool_ready is not None:
        thread.start()
        pool_ready(pool, reservation.job_id)
    for frame in frames_after(reservation.job_id):
        pipe.send_bytes(frame)
    if pool_ready is None:
        thread.start()
    assert pipe.poll(15), "the worker said nothing: the word sent behind the task was lost"
    status, job_id, data = read_outcome_frame(pipe.recv_bytes())
    pipe.send_bytes(STOP)
    thread.join(15)
    assert not thread.is_alive()
    return job_id, status, data


@pytest.mark.parametrize("task", ["spin", "async_sleeper"])
def test_a_task_interrupted_before_a_thread_took_it_never_starts(broker, run_log, task):
    job_id = async_task(f"{TASKS}.{task}", 20, timeout=1)

    got_id, status, data = serve_two_threads(broker, lambda job_id: [cancel_frame(job_id)])

    outcome = pickle.loads(data)
    assert (got_id, status, outcome.status) == (job_id, TIMED_OUT, ex.TIMEOUT)
    assert "TaskTimeout: ran past its timeout of 1" in outcome.error
    assert read_run_log(run_log) == [], "it started"


def test_a_task_cancelled_before_a_thread_took_it_starts_knowing_it(broker, run_log):
    """The cancellation request lands before the coroutine runs: its asyncio task is cancelled as it
    starts, so it ends CANCELLED at once instead of sleeping until the sentinel interrupts it."""
    job_id = async_task(f"{TASKS}.async_sleeper", 20)

    got_id, _, data = serve_two_threads(broker, lambda job_id: [cancel_request_frame(job_id)])

    outcome = pickle.loads(data)
    assert (got_id, outcome.status) == (job_id, ex.CANCELLED)
    assert [tag for _, tag in read_run_log(run_log)] == [f"start:async-sleep {os.getpid()}"]


def test_a_coroutine_interrupted_before_its_event_loop_started_is_cancelled_as_it_starts(broker, run_log, monkeypatch):
    """The thread has taken the task and waits, blocked, for the event loop's thread, which is slow
    to start (a loaded machine, made so here): the exception raised in the thread cannot land while
    it waits, so the coroutine is cancelled as soon as it starts."""
    job_id = async_task(f"{TASKS}.async_sleeper", 20, timeout=1)
    coroutine_started = Interrupts._coroutine

    def slow_loop(self, entry, loop, task):
        time.sleep(1.0)
        coroutine_started(self, entry, loop, task)

    monkeypatch.setattr(Interrupts, "_coroutine", slow_loop)

    def taken(pool: Pool, job_id: str) -> None:
        deadline = time.monotonic() + 10
        while not getattr(pool.interrupts.holds(job_id), "thread", 0):
            assert time.monotonic() < deadline, "no thread took the task"
            time.sleep(0.01)

    got_id, status, data = serve_two_threads(broker, lambda job_id: [cancel_frame(job_id)], pool_ready=taken)

    outcome = pickle.loads(data)
    assert (got_id, status, outcome.status) == (job_id, TIMED_OUT, ex.TIMEOUT)
