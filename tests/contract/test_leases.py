"""Leases: a reservation is owned for ``lease`` seconds; one that runs out is reclaimed and
redelivered with ``deliveries + 1``, and the old holder's writes are refused (fenced by the token).
``defer`` and ``yield_reservation`` hand a message back without counting a delivery.

Every test runs on each broker (``broker`` is parametrised, see conftest.py).
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import LeaseLost
from django_taskmq.policy.states import JobState
from tests.contract.helpers import ack, job, letters, put

SHORT = 0.2  # seconds: a lease that runs out during the test
LONG = 300
# What a fenced write must leave as it was (every field both brokers' state records keep).
FIELDS = ("state", "deliveries", "yields", "attempt", "error", "lease_owner", "lease_token", "lease_until",
          "visible_at", "queue", "priority")


def expire_leases() -> None:
    """Wait until a lease of SHORT seconds taken before this call has run out."""
    time.sleep(SHORT + 0.15)


def snapshot(broker, job_id: str) -> dict:
    j = job(broker, job_id)
    return {f: getattr(j, f) for f in FIELDS}


def reserve_one(broker, lease=LONG, owner="t"):
    got = broker.reserve(["default"], limit=1, lease=lease, owner=owner)
    assert len(got) == 1
    return got[0]


def test_reclaim_expired_redelivers_with_one_more_delivery(broker):
    """reclaim_expired() puts a message whose lease ran out back; the next reserve counts delivery 2."""
    job_id = put(broker)
    first = reserve_one(broker, lease=SHORT, owner="old")
    expire_leases()
    assert broker.reclaim_expired() == 1
    assert job(broker, job_id).state in (JobState.QUEUED, JobState.RETRYING)
    second = reserve_one(broker, owner="new")
    assert (second.job_id, first.deliveries, second.deliveries) == (job_id, 1, 2)
    assert second.token != first.token
    assert job(broker, job_id).deliveries == 2


def test_reclaim_leaves_live_leases_alone(broker):
    """reclaim_expired() takes back only leases that ran out."""
    put(broker)
    live = reserve_one(broker, lease=LONG)
    assert broker.reclaim_expired() == 0
    assert job(broker, live.job_id).state == JobState.RUNNING
    ack(broker, live)


def test_reserve_itself_reclaims_expired_leases(broker):
    """reserve() reclaims leases that ran out before it claims: no separate sweep is needed."""
    broker.reclaim_every = 0  # sweep on every reserve, not at most once a second
    job_id = put(broker)
    reserve_one(broker, lease=SHORT, owner="old")
    expire_leases()
    again = reserve_one(broker, owner="new")
    assert (again.job_id, again.deliveries) == (job_id, 2)


def test_unexpired_lease_is_not_handed_out_twice(broker):
    """While a lease holds, the message is not reserved again."""
    put(broker)
    reserve_one(broker, lease=LONG)
    broker.reclaim_every = 0
    assert broker.reserve(["default"], limit=5, lease=LONG, owner="other") == []


def test_old_holder_ack_after_reclaim_raises_lease_lost_and_changes_nothing(broker):
    """The old holder's ack raises LeaseLost and leaves the new delivery untouched."""
    job_id = put(broker, 1, 2, func="tests.tasks.add")
    old = reserve_one(broker, lease=SHORT, owner="old")
    expire_leases()
    broker.reclaim_expired()
    new = reserve_one(broker, owner="new")
    before = snapshot(broker, job_id)
    with pytest.raises(LeaseLost):
        ack(broker, old, result=3)
    assert snapshot(broker, job_id) == before
    ack(broker, new, result=3)
    assert job(broker, job_id).state == JobState.SUCCEEDED


def test_old_holder_ack_before_redelivery_raises_lease_lost(broker):
    """After a reclaim and before anyone reserves again, the old holder's ack is refused too."""
    job_id = put(broker)
    old = reserve_one(broker, lease=SHORT)
    expire_leases()
    broker.reclaim_expired()
    state = job(broker, job_id).state
    with pytest.raises(LeaseLost):
        ack(broker, old)
    assert job(broker, job_id).state == state != JobState.SUCCEEDED


def stolen_reservation(broker):
    """Return (job id, the old holder's reservation, the job's fields) after a reclaim and a new claim."""
    job_id = put(broker)
    old = reserve_one(broker, lease=SHORT, owner="old")
    expire_leases()
    broker.reclaim_expired()
    reserve_one(broker, owner="new")
    return job_id, old, snapshot(broker, job_id)


def test_old_holder_nack_after_reclaim_raises_lease_lost_and_changes_nothing(broker):
    """The old holder's nack (requeue or not) raises LeaseLost and changes nothing."""
    job_id, old, before = stolen_reservation(broker)
    with pytest.raises(LeaseLost):
        broker.settle(old, requeue=True, error="late failure")
    with pytest.raises(LeaseLost):
        broker.settle(old, requeue=False, error="late failure")
    assert snapshot(broker, job_id) == before
    assert letters(broker) == []


def test_old_holder_defer_yield_extend_and_dead_letter_raise_lease_lost(broker):
    """Every write that ends or changes a delivery is fenced: defer, yield, dead_letter, fail and
    end_cancelled; the old holder's renewal renews nothing."""
    job_id, old, before = stolen_reservation(broker)
    for write in (lambda: broker.defer(old), lambda: broker.yield_reservation(old),
                  lambda: broker.dead_letter(old, "late"),
                  lambda: broker.fail(old, "late"), lambda: broker.end_cancelled(old, "late")):
        with pytest.raises(LeaseLost):
            write()
    assert broker.extend_leases("old", [job_id], 60) == 0
    assert snapshot(broker, job_id) == before
    assert letters(broker) == []


def test_second_ack_by_the_holder_is_a_no_op(broker):
    """A repeated ack by the same holder raises nothing and keeps the first result."""
    job_id = put(broker, 1, 2, func="tests.tasks.add")
    r = reserve_one(broker)
    ack(broker, r, result=3)
    ack(broker, r, result=99)
    j = job(broker, job_id)
    assert (j.state, j.result) == (JobState.SUCCEEDED, 3)


def test_extend_lease_keeps_the_message_from_being_reclaimed(broker):
    """A renewed lease outlives its original length: the reclaim sweep leaves it alone."""
    job_id = put(broker)
    r = reserve_one(broker, lease=SHORT)
    assert broker.extend_leases("t", [job_id], LONG) == 1
    expire_leases()
    assert broker.reclaim_expired() == 0
    ack(broker, r)
    assert job(broker, job_id).state == JobState.SUCCEEDED


def test_defer_does_not_count_a_delivery(broker):
    """defer() puts the message back; the next reservation is still delivery 1."""
    job_id = put(broker)
    for _ in range(3):
        r = reserve_one(broker)
        assert r.deliveries == 1
        assert broker.defer(r) is True
    assert job(broker, job_id).deliveries == 0
    assert reserve_one(broker).deliveries == 1


def test_defer_with_delay_hides_the_message(broker):
    """defer(delay) makes the message invisible until the delay passed."""
    put(broker)
    broker.defer(reserve_one(broker), delay=LONG)
    assert broker.reserve(["default"], limit=1, lease=LONG, owner="t") == []


def test_yield_does_not_count_a_delivery_but_counts_a_yield(broker):
    """yield_reservation() hands the message back: deliveries unchanged, yields + 1."""
    job_id = put(broker)
    r = reserve_one(broker)
    assert broker.yield_reservation(r) is True
    again = reserve_one(broker)
    assert (again.deliveries, again.yields) == (1, 1)
    j = job(broker, job_id)
    assert (j.deliveries, j.yields) == (1, 1)


def test_yield_returns_false_once_max_yields_is_reached(reconfigure):
    """After max_yields yields, yield_reservation returns False and the holder keeps the message."""
    broker = reconfigure(max_yields=2)
    job_id = put(broker)
    results = []
    for _ in range(3):
        r = reserve_one(broker)
        results.append(broker.yield_reservation(r))
    assert results == [True, True, False]
    j = job(broker, job_id)
    assert (j.state, j.yields, j.deliveries, j.lease_token) == (JobState.RUNNING, 2, 1, r.token)
    ack(broker, r)


def test_nack_with_delay_hides_the_redelivery(broker):
    """nack(delay) counts the failed delivery and hides the message until the delay passed."""
    job_id = put(broker)
    broker.settle(reserve_one(broker), delay=LONG, error="later")
    assert broker.reserve(["default"], limit=1, lease=LONG, owner="t") == []
    j = job(broker, job_id)
    assert (j.state, j.deliveries, j.error) == (JobState.RETRYING, 1, "later")


def test_extend_leases_renews_only_the_named_jobs_of_one_owner(broker):
    """extend_leases(owner, ids) renews just those held leases; others, and other owners', run out."""
    broker.reclaim_every = float("inf")  # only the explicit sweep below reclaims
    mine = [put(broker, i) for i in range(3)]
    got_mine = broker.reserve(["default"], limit=3, lease=SHORT, owner="mine")
    theirs = put(broker)
    broker.reserve(["default"], limit=1, lease=SHORT, owner="theirs")
    assert broker.extend_leases("mine", [*mine[:2], theirs], LONG) == 2
    expire_leases()
    assert broker.reclaim_expired() == 2
    assert job(broker, theirs).state == JobState.RETRYING
    assert job(broker, mine[2]).state == JobState.RETRYING
    assert {job(broker, i).state for i in mine[:2]} == {JobState.RUNNING}
    for r in got_mine:
        if r.job_id in mine[:2]:
            ack(broker, r)


def held_and_lost(broker):
    """Three jobs: two reserved and held, one whose lease ran out and was reclaimed."""
    ids = [put(broker, i) for i in range(3)]
    held = broker.reserve(["default"], limit=2, lease=LONG, owner="t")
    lost = broker.reserve(["default"], limit=1, lease=SHORT, owner="t")
    expire_leases()
    broker.reclaim_expired()
    return ids, held, lost


def test_defer_many_puts_unstarted_reservations_back_without_a_delivery(broker):
    """defer_many (a graceful stop) hands back held reservations uncounted and skips lost ones."""
    ids, held, lost = held_and_lost(broker)
    assert broker.defer_many(held + lost) == 2
    assert {(job(broker, i).state, job(broker, i).deliveries) for i in ids[:2]} == {(JobState.QUEUED, 0)}
    assert job(broker, ids[2]).deliveries == 1  # the reclaimed one keeps its counted delivery


def test_return_interrupted_gives_back_delivery_and_attempt_visible_at_once_and_skips_lost_ones(broker):
    """return_interrupted (a stop's stop_timeout) is defer_many that says why: QUEUED, visible now, uncounted."""
    ids, held, lost = held_and_lost(broker)
    assert broker.return_interrupted(held + lost, "interrupted by shutdown") == 2
    for i in ids[:2]:
        j = job(broker, i)
        assert (j.state, j.deliveries, j.attempt, j.lease_owner, j.lease_token, j.error) == (
            JobState.QUEUED, 0, 0, None, None, "interrupted by shutdown")
        assert j.visible_at <= time.time()
    lost_job = job(broker, ids[2])
    assert (lost_job.deliveries, lost_job.error) == (1, "lease expired")  # the lost one is left alone
    again = broker.reserve(["default"], limit=3, lease=LONG, owner="u")
    assert sorted(r.job_id for r in again) == sorted(ids) and {r.deliveries for r in again if r.job_id in ids[:2]} == {1}


def test_atomic_rolls_back_a_failed_inner_block_only(broker):
    """atomic() blocks nest: an inner block that raises undoes its own writes, the outer ones stay."""
    put(broker, 0)
    put(broker, 1)
    ra, rb = broker.reserve(["default"], 2, LONG, "t")
    with broker.atomic(write=True):
        ack(broker, ra)
        with pytest.raises(RuntimeError), broker.atomic(write=True):
            ack(broker, rb)
            raise RuntimeError("roll back")
    assert (job(broker, ra.job_id).state, job(broker, rb.job_id).state) == (JobState.SUCCEEDED, JobState.RUNNING)
    ack(broker, rb)  # its lease still holds


def test_progress_is_stored_only_under_the_holders_lease(broker):
    """report_progress stores the holder's report; the old holder's is dropped (False), not raised."""
    job_id = put(broker)
    old = reserve_one(broker, lease=SHORT, owner="old")
    expire_leases()
    broker.reclaim_expired()
    new = reserve_one(broker, owner="new")
    assert broker.report_progress(old, {"done": 1, "total": 9}) is False
    assert job(broker, job_id).progress_report is None
    assert broker.report_progress(new, {"done": 2, "total": 9}) is True
    assert job(broker, job_id).progress_report == {"done": 2, "total": 9}
    ack(broker, new)
    assert broker.report_progress(new, {"done": 3, "total": 9}) is False
    assert job(broker, job_id).progress_report == {"done": 2, "total": 9}
