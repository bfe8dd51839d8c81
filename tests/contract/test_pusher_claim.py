"""The pusher's claim, without a cluster: ``Pusher.claim()`` called in this process on each broker
(``broker`` is parametrised, see conftest.py).

It reserves what the sentinel's ``Want`` asks for and returns verified tickets in pick order. A
package that fails to verify or to unpickle never becomes a ticket: it is dead-lettered with the
reason at once (never unpickled when its signature is bad), and the good ones of the same claim
still go through. With a full buffer (``Want(0, floor)``) it claims only work above the floor, at
most ``workers``. It claims nothing from a paused queue. (The pusher's loop, ``serve``, is tested on
the memory broker in tests/unit/test_pusher_unit.py.)
"""

from __future__ import annotations

from django_taskmq.cluster.messages import Ticket, Want
from django_taskmq.cluster.pusher import Pusher
from django_taskmq.policy.states import JobState
from django_taskmq.envelope import BAD_SIGNATURE
from tests.contract import helpers
from tests.contract.helpers import forged, garbage, job, letters, put, signed, states


def pusher(broker, queues=("default",), workers: int | None = None) -> Pusher:
    return Pusher(broker, broker.settings, list(queues), "test-cluster", workers=workers)


def claim(broker, want: Want, workers: int | None = None) -> list[Ticket]:
    return pusher(broker, workers=workers).claim(want, False)


def test_good_packages_become_tickets_in_pick_order(broker):
    """Want(2): the two most urgent, unpacked; the package is not carried any further."""
    low = put(broker, 1, 2, func="tests.tasks.add", priority=0)
    high = put(broker, 3, 4, func="tests.tasks.add", priority=5)
    left = put(broker, 5, 6, func="tests.tasks.add", priority=-1)

    tickets = claim(broker, Want(2, None))

    assert [t.reservation.job_id for t in tickets] == [high, low]
    assert [t.message().envelope.args for t in tickets] == [(3, 4), (1, 2)]
    assert [t.reservation.payload for t in tickets] == ["", ""]
    assert job(broker, left).state == JobState.QUEUED


def test_bad_packages_are_dead_lettered_and_the_good_ones_of_the_claim_go_through(broker):
    """One claim meets a forged and a garbage package between good ones: two tickets, two dead letters."""
    first = put(broker, payload=signed(broker, 1, 2))
    bad_key = put(broker, payload=forged(broker))
    not_a_pickle = put(broker, payload=garbage(broker))
    last = put(broker, payload=signed(broker, 3, 4))

    tickets = claim(broker, Want(10, None))

    assert [t.reservation.job_id for t in tickets] == [first, last]
    assert [t.message().envelope.args for t in tickets] == [(1, 2), (3, 4)]
    assert states(broker, [first, bad_key, not_a_pickle, last]) == {
        first: JobState.RUNNING, last: JobState.RUNNING, bad_key: JobState.DEAD, not_a_pickle: JobState.DEAD}
    reasons = {x.job_id: x.reason for x in letters(broker)}
    assert reasons.keys() == {bad_key, not_a_pickle}
    assert reasons[bad_key] == BAD_SIGNATURE
    assert reasons[not_a_pickle].startswith("cannot unpickle")
    assert job(broker, bad_key).attempt == 0  # it never ran
    assert helpers.UNPICKLED == []  # the forged pickle was never loaded


def test_a_claim_of_only_bad_packages_returns_nothing_and_leaves_nothing_leased(broker):
    """Nothing is handed to the sentinel and no reservation is left to run out."""
    job_id = put(broker, payload=forged(broker))

    assert claim(broker, Want(5, None)) == []
    j = job(broker, job_id)
    assert (j.state, j.lease_until, j.deliveries) == (JobState.DEAD, None, 1)
    assert [x.deliveries for x in letters(broker)] == [1]
    assert claim(broker, Want(5, None)) == []  # buried, not redelivered


def test_a_full_buffer_claims_only_work_above_its_floor(broker):
    """Want(0, floor=3): only priorities above 3, most urgent first, at most ``workers`` a claim."""
    ids = {p: put(broker, p, priority=p) for p in (0, 3, 5, 9, 4)}

    assert [t.reservation.priority for t in claim(broker, Want(0, 3), workers=2)] == [9, 5]
    assert {p: job(broker, ids[p]).state for p in (0, 3, 4, 5, 9)} == {
        0: JobState.QUEUED, 3: JobState.QUEUED, 4: JobState.QUEUED, 5: JobState.RUNNING, 9: JobState.RUNNING}
    assert [t.reservation.priority for t in claim(broker, Want(0, 3), workers=2)] == [4]
    assert claim(broker, Want(0, 3), workers=2) == []


def test_a_full_buffer_without_a_floor_claims_nothing(broker):
    """Want(0, None): no room and nothing to compare with: no claim."""
    urgent = put(broker, priority=9)
    assert claim(broker, Want(0, None)) == []
    assert job(broker, urgent).state == JobState.QUEUED


def test_a_paused_queue_is_not_claimed_from_and_the_batch_says_so(broker):
    in_a = put(broker, queue="a")
    in_default = put(broker, 1, 2, func="tests.tasks.add")
    assert broker.pause_queue("a", by="test") is True
    assert broker.pause_queue("a") is False  # paused already
    assert broker.paused_queues() == frozenset({"a"})
    claimer = pusher(broker, queues=("a", "default"))
    assert [t.reservation.job_id for t in claimer.claim(Want(10, None), False)] == [in_default]
    assert claimer.paused == frozenset({"a"})
    assert job(broker, in_a).state == JobState.QUEUED
    assert broker.resume_queue("a") is True
    assert broker.resume_queue("a") is False
    claimer._pauses_read = float("-inf")  # the next read is due (once a second)
    assert [t.reservation.job_id for t in claimer.claim(Want(10, None), False)] == [in_a]
    assert claimer.paused == frozenset()
