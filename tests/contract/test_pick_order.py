"""Scheme D pick order: strict priority across bands, weighted fairness by ``served/weight``
inside a band (ties by queue name), FIFO inside one queue and priority.

Test settings weigh queue "a" 1 and queue "b" 2. Every test runs on each broker (``broker`` is
parametrised, see conftest.py) but the one about two ORM broker objects on one database.
"""

from __future__ import annotations

import pytest

from tests.contract.helpers import put

LEASE = 300


def fill(broker, queue: str, n: int, priority: int = 0) -> dict[str, str]:
    """Enqueue ``n`` jobs in ``queue``; return job id -> label ``f"{queue}{i}"`` (``i`` in enqueue order)."""
    return {put(broker, i, queue=queue, priority=priority): f"{queue}{i}" for i in range(n)}


def labels(reservations, names: dict[str, str]) -> list[str]:
    return [names[r.job_id] for r in reservations]


EXPECTED_AB = ["a0", "b0", "b1", "a1", "b2", "b3"]


def test_weighted_order_within_one_reserve_call(broker):
    """One reserve(limit=6) over a (weight 1) and b (weight 2) returns a0, b0, b1, a1, b2, b3."""
    names = {**fill(broker, "a", 4), **fill(broker, "b", 4)}
    got = broker.reserve(["a", "b"], limit=6, lease=LEASE, owner="t")
    assert labels(got, names) == EXPECTED_AB


def test_weighted_order_across_reserve_calls(broker):
    """Six reserve(limit=1) calls give the same order as one call: ``served`` persists between calls."""
    names = {**fill(broker, "a", 4), **fill(broker, "b", 4)}
    got = [r for _ in range(6) for r in broker.reserve(["a", "b"], limit=1, lease=LEASE, owner="t")]
    assert labels(got, names) == EXPECTED_AB


def test_weighted_order_with_mixed_batch_sizes(broker):
    """Batches of 2, 1 and 3 together still give a0, b0, b1, a1, b2, b3."""
    names = {**fill(broker, "a", 4), **fill(broker, "b", 4)}
    got = []
    for limit in (2, 1, 3):
        got += broker.reserve(["a", "b"], limit=limit, lease=LEASE, owner="t")
    assert labels(got, names) == EXPECTED_AB


def test_orm_fairness_is_shared_between_broker_instances(orm_broker):
    """ORM only: two brokers on one database (two processes' views) reserving in turn produce the
    single-broker order."""
    from django_taskmq.brokers.orm import OrmBroker
    from django_taskmq.conf import get_settings

    broker = orm_broker
    names = {**fill(broker, "a", 4), **fill(broker, "b", 4)}
    other = OrmBroker(get_settings(), "default")
    got = []
    for i in range(6):
        got += (broker if i % 2 == 0 else other).reserve(["a", "b"], limit=1, lease=LEASE, owner=f"p{i % 2}")
    assert labels(got, names) == EXPECTED_AB


def test_tie_on_served_over_weight_goes_to_the_queue_name_first(reconfigure):
    """With equal weights the queues alternate, starting with the name that sorts first."""
    broker = reconfigure(queues={"default": {"weight": 1}, "x": {"weight": 1}, "y": {"weight": 1}})
    names = {**fill(broker, "y", 3), **fill(broker, "x", 3)}  # y enqueued first: enqueue order must not matter
    got = broker.reserve(["x", "y"], limit=6, lease=LEASE, owner="t")
    assert labels(got, names) == ["x0", "y0", "x1", "y1", "x2", "y2"]


def test_strict_priority_across_bands(broker):
    """Every ready message of a higher priority goes before any lower one, whatever the weights."""
    names = {**fill(broker, "b", 3, priority=0), **fill(broker, "a", 3, priority=5)}
    names.update({put(broker, queue="b", priority=9): "b-crit"})
    names.update({put(broker, queue="b", priority=-5): "b-low"})
    got = broker.reserve(["a", "b"], limit=8, lease=LEASE, owner="t")
    assert labels(got, names) == ["b-crit", "a0", "a1", "a2", "b0", "b1", "b2", "b-low"]


def test_strict_priority_across_calls(broker):
    """A high-priority message enqueued between calls is reserved next, before older normal ones."""
    names = fill(broker, "a", 3)
    first = broker.reserve(["a", "b"], limit=1, lease=LEASE, owner="t")
    urgent = put(broker, queue="b", priority=5)
    second = broker.reserve(["a", "b"], limit=1, lease=LEASE, owner="t")
    assert labels(first, names) == ["a0"]
    assert [r.job_id for r in second] == [urgent]


def test_fifo_inside_queue_and_priority(broker):
    """Inside one queue and priority messages come out in enqueue order, across batches."""
    ids = [put(broker, i, queue="a") for i in range(60)]
    got = []
    while batch := broker.reserve(["a"], limit=7, lease=LEASE, owner="t"):
        got += [r.job_id for r in batch]
    assert got == ids


def test_fifo_inside_each_band_of_one_queue(broker):
    """Priorities interleaved in one queue come out by band, each band in enqueue order."""
    priorities = [0, 5, 0, -3, 5, 0, -3, 5]
    ids = [put(broker, i, queue="a", priority=p) for i, p in enumerate(priorities)]
    got = [r.job_id for r in broker.reserve(["a"], limit=10, lease=LEASE, owner="t")]
    expected = [ids[i] for p in (5, 0, -3) for i, q in enumerate(priorities) if q == p]
    assert got == expected


def test_reservation_carries_queue_and_priority(broker):
    """A reservation names its job, queue and priority, with one delivery counted."""
    job_id = put(broker, queue="b", priority=4)
    (r,) = broker.reserve(["a", "b"], limit=5, lease=LEASE, owner="t")
    assert (r.job_id, r.queue, r.priority, r.deliveries, r.yields) == (job_id, "b", 4, 1, 0)


def test_only_the_given_queues_are_reserved(broker):
    """reserve() takes messages only from the queues it is given."""
    fill(broker, "a", 2)
    b_ids = list(fill(broker, "b", 2))
    got = broker.reserve(["b"], limit=10, lease=LEASE, owner="t")
    assert [r.job_id for r in got] == b_ids


def test_newly_busy_queue_does_not_starve_the_others(broker):
    """A queue idle while another was served 100 times does not take 100 turns in a row on waking.

    b is served 100 times while a has nothing ready; then a gets 20 messages. The next picks
    follow the weights (a:b = 1:2) instead of a draining its backlog of unused turns.
    """
    fill(broker, "b", 130)
    served_b = 0
    while served_b < 100:
        served_b += len(broker.reserve(["a", "b"], limit=10, lease=LEASE, owner="t"))
    names = fill(broker, "a", 20)
    got = broker.reserve(["a", "b"], limit=12, lease=LEASE, owner="t")
    picked = ["a" if r.job_id in names else "b" for r in got]
    assert len(picked) == 12
    # Weighted round robin gives a one turn in three: 4 of 12 (the lift may round a turn either way).
    assert 3 <= picked.count("a") <= 5, picked
    longest_a_run = max(len(run) for run in "".join(picked).split("b"))
    assert longest_a_run <= 1, picked


def test_fairness_survives_a_rolled_back_reserve(broker):
    """A reserve inside an ``atomic()`` block that rolls back does not switch fairness off afterwards.

    The rolled-back reserve also rolls back the per-queue ``served`` counters it created; later
    reserves by the same broker must still keep the counters.
    """
    names = {**fill(broker, "a", 4), **fill(broker, "b", 4)}
    with pytest.raises(RuntimeError), broker.atomic(write=True):
        broker.reserve(["a", "b"], limit=1, lease=LEASE, owner="t")
        raise RuntimeError("roll back")
    got = [r for _ in range(6) for r in broker.reserve(["a", "b"], limit=1, lease=LEASE, owner="t")]
    assert labels(got, names) == EXPECTED_AB
