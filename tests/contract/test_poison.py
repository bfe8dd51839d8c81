"""Poison guard: a message whose deliveries would exceed ``max_deliveries`` goes to its queue's
dead-letter queue and its job becomes DEAD, whether its deliveries failed or its leases kept
running out (a crash loop).

Every test runs on each broker (``broker`` is parametrised, see conftest.py).
"""

from __future__ import annotations

import time

from django_taskmq import Retry
from django_taskmq.policy.states import JobState
from tests.contract.helpers import job, letters, put

LONG = 300
SHORT = 0.2


def reserve(broker, lease=LONG, queues=("default",)):
    return broker.reserve(list(queues), limit=10, lease=lease, owner="t")


def test_failed_deliveries_up_to_max_deliveries_go_to_the_dlq(broker):
    """max_deliveries=3: two failed deliveries are redelivered; the third failure dead-letters it."""
    job_id = put(broker, func="tests.tasks.fail", max_deliveries=3)
    for delivery in (1, 2):
        (r,) = reserve(broker)
        assert r.deliveries == delivery
        assert broker.settle(r, requeue=True, error=f"failure {delivery}") == JobState.RETRYING
        assert job(broker, job_id).state == JobState.RETRYING
    (r,) = reserve(broker)
    assert r.deliveries == 3
    broker.settle(r, requeue=True, error="failure 3")
    j = job(broker, job_id)
    assert (j.state, j.deliveries) == (JobState.DEAD, 3)
    (letter,) = letters(broker)
    assert (letter.job_id, letter.queue, letter.deliveries, letter.error) == (job_id, "default", 3, "failure 3")
    assert letter.reason == "max deliveries exceeded: failed 3 times"
    assert reserve(broker) == []


def test_settle_says_retrying_then_dead(broker):
    """settle() answers the job's new state, and None for the holder's repeated call."""
    put(broker, max_deliveries=2)
    (r,) = reserve(broker)
    assert broker.settle(r, error="boom") == JobState.RETRYING
    assert broker.settle(r, error="boom") is None
    (r,) = reserve(broker)
    assert broker.settle(r, error="boom") == JobState.DEAD
    assert [(x.reason, x.error) for x in letters(broker)] == [("max deliveries exceeded: failed 2 times", "boom")]


def test_setting_max_deliveries_applies_when_the_call_gives_none(reconfigure):
    """TASKMQ['max_deliveries'] is the default guard: 2 means the second failure dead-letters."""
    broker = reconfigure(max_deliveries=2)
    job_id = put(broker, func="tests.tasks.fail")
    (r,) = reserve(broker)
    broker.settle(r, error="one")
    assert job(broker, job_id).state == JobState.RETRYING
    (r,) = reserve(broker)
    broker.settle(r, error="two")
    assert job(broker, job_id).state == JobState.DEAD
    assert [x.job_id for x in letters(broker)] == [job_id]


def test_nack_without_requeue_dead_letters_at_once(broker):
    """nack(requeue=False) sends the message straight to the DLQ on its first delivery."""
    job_id = put(broker, func="tests.tasks.fail", queue="b")
    (r,) = reserve(broker, queues=["b"])
    broker.settle(r, requeue=False, error="bad input")
    assert job(broker, job_id).state == JobState.DEAD
    (letter,) = letters(broker)
    assert (letter.queue, letter.deliveries, letter.reason) == ("b", 1, "bad input")


def test_crash_loop_goes_to_the_dlq_on_the_reserve_after_max_deliveries(broker):
    """Leases that keep running out count deliveries; the reserve after the last one dead-letters it.

    With max_deliveries=3 the message is delivered three times (each lease runs out, as when the
    worker crashes); the fourth reserve returns nothing and moves it to the DLQ with a reason
    naming max deliveries; the job is DEAD and keeps the last error, which its letter carries.
    """
    broker.reclaim_every = 0  # every reserve sweeps expired leases
    job_id = put(broker, func="tests.tasks.crash", max_deliveries=3)
    deliveries = []
    for _ in range(3):
        (r,) = reserve(broker, lease=SHORT)
        deliveries.append(r.deliveries)
        time.sleep(SHORT + 0.15)  # the "worker" dies: the lease runs out
    assert deliveries == [1, 2, 3]
    assert reserve(broker) == []
    j = job(broker, job_id)
    assert (j.state, j.deliveries, j.attempt, j.error) == (JobState.DEAD, 3, 0, "lease expired")
    (letter,) = letters(broker)
    assert letter.reason == "max deliveries exceeded: delivered 3 times without an ack"
    assert (letter.job_id, letter.deliveries, letter.error) == (job_id, 3, "lease expired")


def test_crash_loop_with_explicit_reclaim_sweeps(broker):
    """The same guard holds when reclaim_expired() runs separately from reserve()."""
    job_id = put(broker, func="tests.tasks.crash", max_deliveries=2)
    for _ in range(2):
        assert [r.job_id for r in reserve(broker, lease=SHORT)] == [job_id]
        time.sleep(SHORT + 0.15)
        assert broker.reclaim_expired() == 1
    assert reserve(broker) == []
    assert job(broker, job_id).state == JobState.DEAD
    assert "max deliveries" in letters(broker)[0].reason


def test_dead_lettered_message_does_not_block_the_queue(broker):
    """A poisoned head is buried and the messages behind it are reserved in the same call."""
    broker.reclaim_every = 0
    poison = put(broker, func="tests.tasks.crash", max_deliveries=1)
    (r,) = reserve(broker, lease=SHORT)
    assert r.job_id == poison
    time.sleep(SHORT + 0.15)
    healthy = [put(broker, i) for i in range(3)]
    got = reserve(broker)
    assert [x.job_id for x in got] == healthy
    assert job(broker, poison).state == JobState.DEAD


def test_reserve_job_does_not_deliver_a_message_past_its_deliveries(broker):
    """reserve_job (sync mode's claim of one given job) takes a ready one, never one whose deliveries
    are used up, nor one that is not ready."""
    broker.reclaim_every = float("inf")
    used = put(broker, max_deliveries=1)
    assert [r.job_id for r in reserve(broker, lease=SHORT)] == [used]
    time.sleep(SHORT + 0.15)
    assert broker.reclaim_expired() == 1
    assert broker.reserve_job(used, LONG, "sync") is None
    fresh = put(broker)
    got = broker.reserve_job(fresh, LONG, "sync")
    assert (got.job_id, got.deliveries, got.owner) == (fresh, 1, "sync")
    assert broker.reserve_job(fresh, LONG, "sync") is None  # held now
    assert broker.reserve_job("no-such-job", LONG, "sync") is None


def test_retry_max_attempts_caps_deliveries(broker):
    """Retry(max_attempts=2) caps deliveries below max_deliveries: the second failure dead-letters."""
    job_id = put(broker, func="tests.tasks.fail", retry=Retry(max_attempts=2), max_deliveries=5)
    for _ in range(2):
        (r,) = reserve(broker)
        broker.settle(r, error="boom")
    assert job(broker, job_id).state == JobState.DEAD
