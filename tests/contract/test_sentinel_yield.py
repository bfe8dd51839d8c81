"""The sentinel yields its overflow back to the broker, without a cluster: a ``Sentinel`` that is
never started gets real reservations through its real pusher pipe (see tests/unit/test_sentinel_dispatch.py).

When more tasks wait than ``limit``, the least urgent ones (lowest priority, latest arrival) are
handed back unstarted: QUEUED again, the delivery not counted, one more yield. A task that has
yielded ``max_yields`` times keeps its place instead, so nothing starves.

Every test runs on each broker (``broker`` is parametrised, see conftest.py).
"""

from __future__ import annotations

import pytest

from django_taskmq.runtime import execution as ex
from django_taskmq.cluster.messages import Ticket
from django_taskmq.policy.states import JobState
from tests.contract.helpers import delivery, put
from tests.unit.test_sentinel_dispatch import Harness

LEASE = 300


def enqueue(broker, **priorities: int) -> dict[str, str]:
    """Enqueue one job per name, in the order given; return name -> job id."""
    return {name: put(broker, name, priority=p) for name, p in priorities.items()}


def tickets(broker, ids: dict[str, str]) -> dict[str, Ticket]:
    """Reserve every ready job as the pusher does (verified, unpickled); return name -> ticket."""
    names = {job_id: name for name, job_id in ids.items()}
    reservations = broker.reserve(["default"], 100, LEASE, "test-cluster")
    assert sorted(r.job_id for r in reservations) == sorted(ids.values())
    return {names[r.job_id]: Ticket.of(ex.unpack(r, broker.settings.name)) for r in reservations}


def rows(broker, ids: dict[str, str]) -> dict[str, tuple]:
    """name -> (state, deliveries, yields, holds a lease token)."""
    return {name: delivery(broker, i) for name, i in ids.items()}


@pytest.fixture
def sentinel_with_limit(reconfigure):
    """Return ``make(limit, **settings)``: a harness whose sentinel holds at most ``limit`` waiting tasks."""
    made = []

    def make(limit: int, **changes) -> Harness:
        harness = Harness(reconfigure(queue_limit=limit, **changes))  # the broker of the changed settings
        assert harness.sentinel.limit == limit
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()


def test_overflow_yields_the_lowest_priority_latest_arrivals(sentinel_with_limit):
    """Limit 2, five tasks in two batches: the first 9 and the first-arrived 5 stay, three go back."""
    harness = sentinel_with_limit(2)
    broker = harness.sentinel.broker  # on the changed settings
    ids = enqueue(broker, a5=5, b0=0, c9=9, d0=0, e5=5)
    t = tickets(broker, ids)

    harness.push(t["a5"], t["b0"])
    assert harness.waiting() == [ids["a5"], ids["b0"]]
    harness.push(t["c9"], t["d0"], t["e5"])

    assert harness.waiting() == [ids["c9"], ids["a5"]]
    assert harness.sentinel.counts["yields"] == 3
    assert rows(broker, ids) == {
        "c9": (JobState.RUNNING, 1, 0, True),
        "a5": (JobState.RUNNING, 1, 0, True),
        "e5": (JobState.QUEUED, 0, 1, False),
        "b0": (JobState.QUEUED, 0, 1, False),
        "d0": (JobState.QUEUED, 0, 1, False),
    }
    # What went back is ready again, most urgent first.
    again = broker.reserve(["default"], 10, LEASE, "another-cluster")
    assert [r.job_id for r in again] == [ids["e5"], ids["b0"], ids["d0"]]


def test_no_overflow_no_yield(sentinel_with_limit):
    """Within the limit nothing is handed back."""
    harness = sentinel_with_limit(3)
    broker = harness.sentinel.broker  # on the changed settings
    ids = enqueue(broker, a0=0, b9=9, c5=5)
    t = tickets(broker, ids)
    harness.push(t["a0"], t["b9"], t["c5"])
    assert harness.waiting() == [ids["b9"], ids["c5"], ids["a0"]]
    assert harness.sentinel.counts["yields"] == 0
    assert {state for state, *_ in rows(broker, ids).values()} == {JobState.RUNNING}


def test_a_task_that_used_up_its_yields_keeps_its_place(sentinel_with_limit):
    """max_yields=1: a task that yielded once is not handed back again; the list may exceed the limit."""
    harness = sentinel_with_limit(1, max_yields=1)
    broker = harness.sentinel.broker  # on the changed settings
    ids = enqueue(broker, old0=0)
    (r,) = broker.reserve(["default"], 1, LEASE, "test-cluster")
    assert broker.yield_reservation(r) is True  # its one yield
    ids.update(enqueue(broker, new5=5))
    t = tickets(broker, ids)

    harness.push(t["old0"], t["new5"])

    assert harness.waiting() == [ids["new5"], ids["old0"]]
    assert harness.sentinel.counts["yields"] == 0
    assert rows(broker, ids) == {"old0": (JobState.RUNNING, 1, 1, True), "new5": (JobState.RUNNING, 1, 0, True)}
