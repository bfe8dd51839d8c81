"""The dispatch rules (django_taskmq/cluster/dispatch.py), pure: the round robin that deals waiting
tasks to the workers with room, the room of a worker, the long-task rule, the overtake and the
choice of the workers whose prefetched tasks are taken back. The sentinel's use of them, through
its guard loop, is in test_sentinel_dispatch.py.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.brokers.base import Reservation
from django_taskmq.cluster.dispatch import STEAL_AFTER, Load, Rules, deal, round_robin, urgency
from django_taskmq.cluster.messages import Ticket


def ticket(label: str, priority: int) -> Ticket:
    reservation = Reservation(label, "default", priority, 1, 0, f"token-{label}", "test-owner", 5)
    return Ticket(reservation, None, label.encode())


def waiting(priorities: list[int]) -> list[Ticket]:
    """Distinct tasks, most urgent first (as the buffer hands them over)."""
    return sorted((ticket(f"t{i}", p) for i, p in enumerate(priorities)), key=urgency)


def ids(tickets: list[Ticket]) -> list[str]:
    return [t.reservation.job_id for t in tickets]


tasks = st.lists(st.integers(-5, 5), max_size=40).map(waiting)
rooms = st.lists(st.integers(0, 6), max_size=8)


@given(tasks, rooms)
def test_the_round_robin_loses_nothing_and_fills_no_worker_beyond_its_room(tickets, room):
    plan, left = round_robin(tickets, room)
    dealt = [t for share in plan for t in share]
    assert Counter(ids(dealt + left)) == Counter(ids(tickets)), "each task dealt or left, once"
    assert all(len(share) <= r for share, r in zip(plan, room))
    assert not left or all(len(share) == r for share, r in zip(plan, room)), "left over only when all are full"
    for share in plan:  # each share keeps the order of urgency
        assert share == [t for t in tickets if t in share]


@given(tasks, rooms)
def test_the_round_robin_gives_the_most_urgent_to_distinct_workers_first(tickets, room):
    plan, _ = round_robin(tickets, room)
    place = {t.reservation.job_id: i for i, share in enumerate(plan) for t in share}
    first = ids(tickets)[:sum(1 for r in room if r > 0)]
    assert len({place[job_id] for job_id in first}) == len(first)
    # Round after round: a task goes in round k (its place's k-th) only once every place with room
    # for k has got its task of round k - 1.
    rounds = {t.reservation.job_id: k for share in plan for k, t in enumerate(share)}
    dealt = [job_id for job_id in ids(tickets) if job_id in rounds]
    assert [rounds[j] for j in dealt] == sorted(rounds[j] for j in dealt)


def test_the_round_robin_deals_one_at_a_time_in_turn():
    plan, left = round_robin(waiting([9, 8, 7, 6, 5, 4, 3]), [3, 1, 2])
    assert [ids(share) for share in plan] == [["t0", "t3", "t5"], ["t1"], ["t2", "t4"]]
    assert ids(left) == ["t6"]


@given(tasks, rooms, st.sets(st.integers(0, 7)))
def test_a_worker_whose_send_fails_is_left_out_and_nothing_is_lost(tickets, room, broken):
    handed: dict[int, list[Ticket]] = {}

    def hand(place: int, share: list[Ticket]) -> bool:
        assert place not in handed, "one message per worker"
        if place in broken:
            return False
        handed[place] = share
        return True

    left = deal(tickets, room, hand)
    assert not set(handed) & broken
    assert all(len(share) <= room[place] for place, share in handed.items())
    dealt = [t for share in handed.values() for t in share]
    assert Counter(ids(dealt + left)) == Counter(ids(tickets))
    assert [urgency(t) for t in left] == sorted(urgency(t) for t in left), "what is left stays most urgent first"


def test_the_share_of_a_broken_worker_goes_to_the_ones_after_it():
    handed = {}
    left = deal(waiting([9, 8, 7]), [1, 1, 1], lambda place, share: place != 0 and not handed.update({place: ids(share)}))
    assert handed == {1: ["t0"], 2: ["t1"]} and ids(left) == ["t2"]


def test_room_is_the_depth_less_what_a_worker_holds_and_nothing_behind_a_long_task():
    no_prefetch, prefetch = Rules(threads=1, depth=1), Rules(threads=1, depth=5)
    assert (no_prefetch.prefetch, prefetch.prefetch) == (False, True)
    assert [prefetch.room(held, long_task=False) for held in (0, 2, 5)] == [5, 3, 0]
    assert [prefetch.room(held, long_task=True) for held in (0, 1, 3)] == [1, 0, -2]
    assert no_prefetch.room(0, long_task=True) == 1 and no_prefetch.room(1, long_task=False) == 0
    assert Rules(threads=4, depth=4).room(1, long_task=True) == 3  # threads: no prefetch, long or not


def test_a_long_task_has_run_steal_after_seconds():
    rules = Rules(threads=1, depth=5)
    assert not rules.long_task(0.0)
    assert not rules.long_task(STEAL_AFTER / 2)
    assert rules.long_task(STEAL_AFTER) and rules.long_task(60.0)


def test_only_a_task_more_urgent_than_all_a_full_worker_holds_overtakes():
    rules = Rules(threads=1, depth=5)
    assert rules.overtakes(9, [0, 5])
    assert not rules.overtakes(5, [0, 5]) and not rules.overtakes(9, [])
    assert not Rules(threads=1, depth=1).overtakes(9, [0]), "without prefetch a worker holds only what it runs"


def test_prefetched_tasks_are_taken_back_from_long_tasks_only_for_an_idle_worker_and_when_none_waits():
    rules = Rules(threads=1, depth=5)
    idle = Load(0, False, True)
    behind_long, behind_short, long_alone = Load(3, True, False), Load(3, False, False), Load(1, True, False)
    assert rules.steal_from([behind_long, idle, behind_short, long_alone, behind_long], waiting=False) == [0, 4]
    assert rules.steal_from([behind_long, idle], waiting=True) == [], "the idle worker gets what waits instead"
    assert rules.steal_from([behind_long, Load(0, False, False)], waiting=False) == [], "no idle worker"
    assert Rules(threads=1, depth=1).steal_from([behind_long, idle], waiting=False) == [], "no prefetch"
