"""An interruption aimed at a task's thread lands in that thread, whatever the task is doing: here
it starts threads, one after another, when the interruption comes.

On Python 3.11, without ``guard_thread_starts``, this loop interrupted after 0 to 2 ms put the
interruption in the thread being started in 10 rounds of 48 (a scratch run): the new thread dies
before it says it started and the task's thread waits for it for ever. Real threads, the worker's own
``Interrupts``; no process, no database.
"""

from __future__ import annotations

import random
import sys
import threading
import time

import pytest

from django_taskmq.runtime import execution as ex
from django_taskmq.cluster.interrupts import Interrupts, Running, guard_thread_starts
from django_taskmq.exceptions import JobCancelled, TaskTimeout

ROUNDS = 30


def run_task(interrupts: Interrupts, job_id: str, seen: dict) -> None:
    """A task that starts and joins threads until it is interrupted; ``seen`` says how it ended."""
    try:
        with interrupts.running(Running(job_id, threading.get_ident())):
            seen["running"].set()
            while True:
                child = threading.Thread(target=lambda: None)
                child.start()
                child.join()
    except (TaskTimeout, JobCancelled) as exc:
        seen["raised"] = type(exc)


@pytest.fixture
def unraisable(monkeypatch) -> list:
    """Exceptions nobody could catch: one raised in a new thread before it runs its target."""
    caught: list = []
    monkeypatch.setattr(sys, "unraisablehook", caught.append)
    return caught


@pytest.mark.parametrize("cancelled", [False, True], ids=["timeout", "cancelled"])
def test_an_interruption_of_a_task_starting_threads_lands_in_the_task(unraisable, cancelled):
    guard_thread_starts()
    interrupts = Interrupts()
    rng = random.Random(7)
    for round_ in range(ROUNDS):
        job_id = f"job-{round_}"
        seen = {"running": threading.Event(), "raised": None}
        task = threading.Thread(target=run_task, args=(interrupts, job_id, seen), daemon=True)
        task.start()
        assert seen["running"].wait(10)
        time.sleep(rng.uniform(0, 0.002))  # somewhere in a thread's start, or between two
        if cancelled:
            assert interrupts.request(job_id)
        assert interrupts.interrupt(job_id)
        task.join(10)

        assert not task.is_alive(), f"round {round_}: the task's thread hangs"
        assert seen["raised"] is (JobCancelled if cancelled else TaskTimeout)
    assert unraisable == []  # no new thread died of an interruption meant for its parent


def test_threads_started_outside_a_task_are_not_held(unraisable):
    """The guard only looks: a thread started by no task starts as it would."""
    guard_thread_starts()
    ran = threading.Event()
    thread = threading.Thread(target=ran.set)
    thread.start()
    thread.join(10)
    assert ran.is_set() and unraisable == []


def test_a_stop_that_comes_as_a_coroutine_has_ended_changes_nothing():
    """The coroutine has ended and its event loop is closed; its thread is still in the task (its
    outcome is being made) when the timeout or a cancellation comes: nothing is left to cancel, and
    the worker's reading thread, which delivers it, carries on."""
    interrupts = Interrupts()
    entry = Running("job", threading.get_ident())

    async def coroutine() -> int:
        return 1

    with interrupts.running(entry):
        assert ex.run_coroutine(coroutine()) == 1
        assert entry.loop is not None and entry.loop.is_closed()
        assert interrupts.request("job")
        assert interrupts.interrupt("job")
    assert entry.interrupted and entry.cancel_requested
