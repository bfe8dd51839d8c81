"""The test broker (tests/memory_broker.py) keeps the parts of the Broker contract the cluster's unit
tests rely on: leases fenced by tokens, a delivery per reservation, the poison guard, yields up to
``max_yields``, give-backs that are not deliveries, savepoint-like ``atomic()``. No database."""

from __future__ import annotations

import pytest

from django_taskmq.brokers.base import Ack
from django_taskmq.conf import from_mapping
from django_taskmq.exceptions import LeaseLost
from django_taskmq.policy.states import JobState
from tests.memory_broker import MemoryBroker


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker(from_mapping({"max_yields": 1, "max_deliveries": 2}))


def test_reserve_in_priority_then_arrival_order_counting_a_delivery(broker):
    for job_id, priority in (("a", 0), ("b", 5), ("c", 0), ("d", 5)):
        broker.enqueue({"id": job_id, "priority": priority})
    reserved = broker.reserve(["default"], 3, 30, "me")
    assert [(r.job_id, r.deliveries) for r in reserved] == [("b", 1), ("d", 1), ("a", 1)]
    assert broker.reserve(["default"], 3, 30, "me", above=0) == []
    assert not broker.has_ready(["default"], above=0) and broker.has_ready(["default"])


def test_a_lost_lease_fences_the_old_holder(broker):
    broker.enqueue({"id": "a"})
    (old,) = broker.reserve(["default"], 1, -1, "me")  # its lease ran out already
    assert broker.reclaim_expired() == 1
    (new,) = broker.reserve(["default"], 1, 30, "other")
    with pytest.raises(LeaseLost):
        broker.ack(old)
    assert broker.ack_many([Ack(old), Ack(new)]) == [old]
    assert broker.job("a").state == JobState.SUCCEEDED
    assert broker.ack(new) is False  # the holder's repeated ack: a no-op


def test_the_poison_guard_buries_a_message_past_max_deliveries(broker):
    broker.enqueue({"id": "a"})
    (r,) = broker.reserve(["default"], 1, 30, "me")
    assert broker.settle(r, error="boom") == JobState.RETRYING
    (r,) = broker.reserve(["default"], 1, 30, "me")
    assert broker.settle(r, error="boom") == JobState.DEAD
    assert [(x.job_id, x.reason) for x in broker.dead_letters()] == [("a", "max deliveries exceeded: failed 2 times")]


def test_give_backs_are_not_deliveries_and_yields_stop_at_max_yields(broker):
    broker.enqueue({"id": "a"})
    (r,) = broker.reserve(["default"], 1, 30, "me")
    assert broker.yield_reservation(r) is True
    (r,) = broker.reserve(["default"], 1, 30, "me")
    assert (r.deliveries, r.yields) == (1, 1)
    assert broker.yield_reservation(r) is False  # max_yields = 1: it keeps its reservation
    assert broker.defer_many([r]) == 1
    job = broker.job("a")
    assert (job.state, job.deliveries, job.lease_token) == (JobState.QUEUED, 0, None)


def test_atomic_rolls_back_a_failed_inner_block_only(broker):
    broker.enqueue({"id": "a"})
    broker.enqueue({"id": "b"})
    ra, rb = broker.reserve(["default"], 2, 30, "me")
    with broker.atomic():
        broker.ack(ra)
        with pytest.raises(RuntimeError), broker.atomic():
            broker.ack(rb)
            raise RuntimeError
    assert (broker.job("a").state, broker.job("b").state) == (JobState.SUCCEEDED, JobState.RUNNING)
    assert broker.transactions == 1
