"""Poison guard: a message whose deliveries would exceed ``max_deliveries`` goes to its queue's
dead-letter queue and its job becomes DEAD, whether its deliveries failed or its leases kept
running out (a crash loop).
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import async_task
from django_taskmq.models import DeadLetter, Job, State

pytestmark = pytest.mark.django_db

LONG = 300
SHORT = 0.2


def reserve(broker, lease=LONG, queues=("default",)):
    return broker.reserve(list(queues), limit=10, lease=lease, owner="t")


def test_failed_deliveries_up_to_max_deliveries_go_to_the_dlq(broker):
    """max_deliveries=3: two failed deliveries are redelivered; the third failure dead-letters it."""
    job_id = async_task("tests.tasks.fail", max_deliveries=3)
    for delivery in (1, 2):
        (r,) = reserve(broker)
        assert r.deliveries == delivery
        assert broker.nack(r, requeue=True, error=f"failure {delivery}") is True
        assert Job.objects.get(pk=job_id).state == State.RETRYING
    (r,) = reserve(broker)
    assert r.deliveries == 3
    broker.nack(r, requeue=True, error="failure 3")
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries) == (State.DEAD, 3)
    (letter,) = DeadLetter.objects.all()
    assert (letter.job_id, letter.queue, letter.deliveries) == (job_id, "default", 3)
    assert "max deliveries" in letter.reason
    assert reserve(broker) == []


def test_setting_max_deliveries_applies_when_the_call_gives_none(broker, taskmq_settings):
    """TASKMQ['max_deliveries'] is the default guard: 2 means the second failure dead-letters."""
    taskmq_settings(max_deliveries=2)
    from django_taskmq.brokers import get_broker

    broker = get_broker()
    job_id = async_task("tests.tasks.fail")
    (r,) = reserve(broker)
    broker.nack(r, error="one")
    assert Job.objects.get(pk=job_id).state == State.RETRYING
    (r,) = reserve(broker)
    broker.nack(r, error="two")
    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert DeadLetter.objects.filter(job_id=job_id).count() == 1


def test_nack_without_requeue_dead_letters_at_once(broker):
    """nack(requeue=False) sends the message straight to the DLQ on its first delivery."""
    job_id = async_task("tests.tasks.fail", queue="b")
    (r,) = reserve(broker, queues=["b"])
    broker.nack(r, requeue=False, error="bad input")
    assert Job.objects.get(pk=job_id).state == State.DEAD
    (letter,) = DeadLetter.objects.all()
    assert (letter.queue, letter.deliveries) == ("b", 1)


def test_crash_loop_goes_to_the_dlq_on_the_reserve_after_max_deliveries(broker):
    """Leases that keep running out count deliveries; the reserve after the last one dead-letters it.

    With max_deliveries=3 the message is delivered three times (each lease runs out, as when the
    worker crashes); the fourth reserve returns nothing and moves it to the DLQ with a reason
    naming max deliveries; the job is DEAD.
    """
    broker.reclaim_every = 0  # every reserve sweeps expired leases
    job_id = async_task("tests.tasks.crash", max_deliveries=3)
    deliveries = []
    for _ in range(3):
        (r,) = reserve(broker, lease=SHORT)
        deliveries.append(r.deliveries)
        time.sleep(SHORT + 0.15)  # the "worker" dies: the lease runs out
    assert deliveries == [1, 2, 3]
    assert reserve(broker) == []
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries) == (State.DEAD, 3)
    (letter,) = DeadLetter.objects.all()
    assert "max deliveries" in letter.reason
    assert (letter.job_id, letter.deliveries) == (job_id, 3)


def test_crash_loop_with_explicit_reclaim_sweeps(broker):
    """The same guard holds when reclaim_expired() runs separately from reserve()."""
    job_id = async_task("tests.tasks.crash", max_deliveries=2)
    for _ in range(2):
        (r,) = reserve(broker, lease=SHORT)
        time.sleep(SHORT + 0.15)
        assert broker.reclaim_expired() == 1
    assert reserve(broker) == []
    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert "max deliveries" in DeadLetter.objects.get(job_id=job_id).reason


def test_dead_lettered_message_does_not_block_the_queue(broker):
    """A poisoned head is buried and the messages behind it are reserved in the same call."""
    broker.reclaim_every = 0
    poison = async_task("tests.tasks.crash", max_deliveries=1)
    (r,) = reserve(broker, lease=SHORT)
    assert r.job_id == poison
    time.sleep(SHORT + 0.15)
    healthy = [async_task("tests.tasks.noop", i) for i in range(3)]
    got = reserve(broker)
    assert [x.job_id for x in got] == healthy
    assert Job.objects.get(pk=poison).state == State.DEAD


def test_retry_max_attempts_caps_deliveries(broker):
    """Retry(max_attempts=2) caps deliveries below max_deliveries: the second failure dead-letters."""
    from django_taskmq import Retry

    job_id = async_task("tests.tasks.fail", retry=Retry(max_attempts=2), max_deliveries=5)
    for _ in range(2):
        (r,) = reserve(broker)
        broker.nack(r, error="boom")
    assert Job.objects.get(pk=job_id).state == State.DEAD
