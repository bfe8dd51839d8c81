"""Durable tasks through the broker (``steps``, ``save_step``, ``finish_step``, ``take_signal``,
``suspend``, ``send_signal``, ``suspended`` and the sweep that wakes): every write fenced by the
lease, a step stored once, a suspension that gives the delivery back and holds nothing, signals kept
until a wait takes them, in order, and steps and signals that go with their job.

Each test runs on each broker (see conftest.py) and reads back only through the broker's methods.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq.brokers.base import Ack, StepRecord
from django_taskmq.exceptions import ConfigError, LeaseLost
from django_taskmq.policy.states import JobState
from tests.contract.helpers import delivery, put

LONG = 300
FAR = 3600.0


def running(broker, queue: str = "reports") -> tuple[str, object]:
    """A job of ``queue``, reserved: (its id, the reservation)."""
    job_id = put(broker, queue=queue)
    (reservation,) = broker.reserve([queue], 1, LONG, "t")
    return job_id, reservation


def test_steps_are_stored_once_in_order_and_read_back(broker):
    job_id, r = running(broker)
    broker.save_step(r, StepRecord("one", "step", "d1", "r1"))
    broker.save_step(r, StepRecord("#sleep:1", "sleep", wake_at=FAR, done=False))
    broker.save_step(r, StepRecord("two", "step", "d2", "r2"))
    with pytest.raises(Exception):  # noqa: B017 (the ORM's IntegrityError, the memory broker's ValueError)
        broker.save_step(r, StepRecord("one", "step", "other", "changed"))
    broker.finish_step(r, "#sleep:1")
    assert broker.steps(job_id) == [StepRecord("one", "step", "d1", "r1"),
                                    StepRecord("#sleep:1", "sleep", wake_at=FAR, done=True),
                                    StepRecord("two", "step", "d2", "r2")]
    assert broker.steps("no-such-job") == []


def test_a_superseded_run_writes_nothing(broker):
    job_id, r = running(broker)
    broker.expire_leases(["t"])
    time.sleep(0.01)
    assert broker.reclaim_expired() == 1  # its lease ran out: another run may hold it now
    for write in (lambda: broker.save_step(r, StepRecord("one", "step", "d", "r")),
                  lambda: broker.finish_step(r, "one"),
                  lambda: broker.take_signal(r, "#wait:go:1", "go")):
        with pytest.raises(LeaseLost):
            write()
    assert broker.suspend(r, time.time() + FAR) is None
    assert broker.steps(job_id) == []


def test_a_suspension_gives_the_delivery_back_holds_nothing_and_a_cancel_ends_it_at_once(broker):
    job_id, r = running(broker)
    broker.save_step(r, StepRecord("#sleep:1", "sleep", wake_at=time.time() + FAR, done=False))
    assert broker.suspend(r, time.time() + FAR) == JobState.SUSPENDED
    assert delivery(broker, job_id) == (JobState.SUSPENDED, 0, 0, False)  # no delivery counted, no lease
    assert broker.suspended() == {"sleep": 1, "wait": 0}
    broker.reclaim_expired()  # the sweep: not due
    assert broker.reserve(["reports"], 1, LONG, "t") == []
    assert broker.cancel([job_id]) == 1
    assert delivery(broker, job_id)[0] == JobState.CANCELLED
    assert broker.suspended() == {"sleep": 0, "wait": 0}


def test_the_sweep_wakes_a_sleep_shortly_before_its_time_and_the_claim_keeps_the_time(broker):
    job_id, r = running(broker)
    wake = time.time() + 4.5
    assert broker.suspend(r, wake) == JobState.SUSPENDED
    broker.reclaim_expired()
    assert delivery(broker, job_id)[0] == JobState.SUSPENDED  # more than WAKE_AHEAD (3 s) away
    time.sleep(max(0.0, wake - 3.0 - time.time()) + 0.3)
    broker.reclaim_expired()
    assert delivery(broker, job_id)[0] == JobState.QUEUED  # claimable from its wake time
    assert broker.reserve(["reports"], 1, LONG, "t") == []
    time.sleep(max(0.0, wake - time.time()) + 0.1)
    (again,) = broker.reserve(["reports"], 1, LONG, "t")
    assert again.job_id == job_id and delivery(broker, job_id) == (JobState.RUNNING, 1, 0, True)


def test_a_sleep_shorter_than_the_sweep_is_queued_for_later(broker):
    job_id, r = running(broker)
    wake = time.time() + 0.5
    assert broker.suspend(r, wake) == JobState.QUEUED
    assert delivery(broker, job_id) == (JobState.QUEUED, 0, 0, False)
    assert broker.reserve(["reports"], 1, LONG, "t") == []
    time.sleep(max(0.0, wake - time.time()) + 0.1)
    assert [x.job_id for x in broker.reserve(["reports"], 1, LONG, "t")] == [job_id]


def test_a_signal_wakes_its_waiting_job_and_is_taken_once_in_order(broker):
    job_id, r = running(broker)
    broker.save_step(r, StepRecord("#wait:go:1", "wait", signal="go", done=False))
    assert broker.suspend(r, None, "go") == JobState.SUSPENDED
    assert broker.suspended() == {"sleep": 0, "wait": 1}
    assert broker.send_signal(job_id, "other", "x") is False  # not what it waits for: kept
    assert broker.send_signal(job_id, "go", "first") is True
    assert broker.send_signal(job_id, "go", "second") is False  # awake already: kept
    (r2,) = broker.reserve(["reports"], 1, LONG, "t")
    assert broker.take_signal(r2, "#wait:go:1", "go") == (True, "first")
    assert broker.take_signal(r2, "#wait:go:2", "go") == (True, "second")  # reached before its wait: stored
    assert broker.take_signal(r2, "#wait:go:3", "go") == (False, None)
    assert broker.steps(job_id) == [StepRecord("#wait:go:1", "wait", result="first", signal="go"),
                                    StepRecord("#wait:go:2", "wait", result="second", signal="go")]


def test_a_suspension_after_its_signal_came_is_given_back_visible_now(broker):
    job_id, r = running(broker)
    assert broker.send_signal(job_id, "go", "early") is False  # it runs: kept
    assert broker.suspend(r, None, "go") == JobState.QUEUED
    assert [x.job_id for x in broker.reserve(["reports"], 1, LONG, "t")] == [job_id]


def test_a_suspension_of_a_job_whose_cancel_was_requested_ends_it_cancelled(broker):
    job_id, r = running(broker)
    assert broker.request_cancel([job_id]) == 1
    assert broker.suspend(r, time.time() + FAR) == JobState.CANCELLED
    assert delivery(broker, job_id)[0] == JobState.CANCELLED


def test_send_signal_refuses_unknown_and_finished_jobs(broker):
    with pytest.raises(ConfigError, match="no job"):
        broker.send_signal("no-such-job", "go", None)
    job_id, r = running(broker)
    assert broker.ack_many([Ack(r)]) == []
    with pytest.raises(ConfigError, match="has ended"):
        broker.send_signal(job_id, "go", None)


def test_steps_and_signals_go_with_their_job(broker):
    job_id, r = running(broker)
    broker.save_step(r, StepRecord("one", "step", "d", "r"))
    broker.send_signal(job_id, "go", "kept")
    assert broker.ack_many([Ack(r)]) == []
    assert broker.delete_finished(JobState.SUCCEEDED.value, time.time() + 1) == 1
    assert broker.steps(job_id) == []
