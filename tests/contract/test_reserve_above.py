"""``reserve(..., above=p)``: the claim a cluster with a full buffer makes for urgent work.

It reserves only ready messages whose priority is strictly greater than ``p`` (``above=0`` is a
floor, not "no floor"), in pick order, in every queue asked for, never more than ``limit``, and
never a delayed one; ``has_ready(above=p)`` answers the same question without reserving.

Every test runs on each broker (``broker`` is parametrised, see conftest.py).
"""

from __future__ import annotations

from django_taskmq.policy.states import JobState
from tests.contract.helpers import jobs, put

LEASE = 300


def fill(broker, *priorities: int, queue: str = "default") -> dict[str, str]:
    """Enqueue one job per priority, in the order given; return job id -> label ``f"{queue}@{p}"``."""
    return {put(broker, p, queue=queue, priority=p): f"{queue}@{p}" for p in priorities}


def reserve(broker, above, queues=("default",), limit=10):
    return broker.reserve(list(queues), limit, LEASE, "t", above=above)


def test_only_strictly_higher_priorities_are_reserved(broker):
    """above=5 takes 9 and 6, not 5 or lower; what it leaves is untouched (QUEUED, no delivery)."""
    names = fill(broker, -9, 0, 4, 5, 6, 9)
    got = reserve(broker, above=5)
    assert [names[r.job_id] for r in got] == ["default@9", "default@6"]
    left = [j for i, j in jobs(broker, names).items() if i not in {r.job_id for r in got}]
    assert sorted((j.priority, j.state, j.deliveries) for j in left) == [
        (-9, JobState.QUEUED, 0), (0, JobState.QUEUED, 0), (4, JobState.QUEUED, 0), (5, JobState.QUEUED, 0),
    ]


def test_above_zero_is_a_floor_not_no_floor(broker):
    """above=0 leaves priority 0 and the negative ones; above=-9 takes all but -9."""
    names = fill(broker, -9, -1, 0, 1, 2)
    assert [names[r.job_id] for r in reserve(broker, above=0)] == ["default@2", "default@1"]
    assert [names[r.job_id] for r in reserve(broker, above=-9)] == ["default@0", "default@-1"]
    assert reserve(broker, above=-9) == []
    assert [names[r.job_id] for r in reserve(broker, above=None)] == ["default@-9"]


def test_nothing_above_the_floor_reserves_nothing(broker):
    """Only work at or below the floor: an empty claim, every message still ready."""
    names = fill(broker, 0, 3, 3)
    assert reserve(broker, above=3) == []
    assert {j.state for j in jobs(broker, names).values()} == {JobState.QUEUED}


def test_every_queue_is_filtered_and_pick_order_holds(broker):
    """Across queues a and b, above=2 takes a@9, b@5, a@3 in that order; 2 and below stay."""
    names = {**fill(broker, 9, 1, 3, queue="a"), **fill(broker, 2, 5, 0, queue="b")}
    got = reserve(broker, above=2, queues=("a", "b"))
    assert [names[r.job_id] for r in got] == ["a@9", "b@5", "a@3"]


def test_limit_bounds_a_claim_above_a_floor(broker):
    """limit=1 takes the most urgent message above the floor only."""
    names = fill(broker, 4, 8, 6)
    assert [names[r.job_id] for r in reserve(broker, above=0, limit=1)] == ["default@8"]


def test_a_delayed_urgent_message_is_not_reserved_early(broker):
    """The floor does not bypass visibility: a delayed priority-9 message waits for its time."""
    put(broker, priority=9, delay=60)
    assert reserve(broker, above=0) == []


def test_has_ready_above_agrees_with_the_claim(broker):
    """has_ready(above=p) is True exactly when a message above p is ready."""
    fill(broker, 0, 5)
    assert broker.has_ready(["default"], above=5) is False
    assert broker.has_ready(["default"], above=4) is True
    assert broker.has_ready(["default"]) is True
    put(broker, priority=9, delay=60)
    assert broker.has_ready(["default"], above=5) is False
