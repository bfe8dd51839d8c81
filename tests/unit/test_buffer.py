"""The sentinel's dispatch buffer (``cluster.buffer.Buffer``) on the in-memory broker: no process, no
database (pytest-django refuses database access to these tests: none is marked ``django_db``).

Waiting tasks are ordered by priority (higher first), then by arrival; an idle worker gets the first
one; a failed send keeps the task; beyond the limit the least urgent go back to the broker
unstarted (a yield, the delivery not counted), except those that used up ``max_yields``.
"""

from __future__ import annotations

import pytest
from django.db import OperationalError

from django_taskmq.cluster.buffer import Buffer
from django_taskmq.cluster.messages import Ticket, Want
from django_taskmq.conf import from_mapping
from django_taskmq.policy.states import JobState
from tests.memory_broker import MemoryBroker

OWNER = "test-cluster"


class Failures:
    """The ``failed`` callback: records what failed."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, BaseException]] = []

    def __call__(self, what: str, exc: BaseException) -> None:
        self.calls.append((what, exc))


def make(limit: int = 50, workers: int = 2, max_yields: int = 100,
         broker_class: type[MemoryBroker] = MemoryBroker) -> tuple[Buffer, MemoryBroker, Failures]:
    broker = broker_class(from_mapping({"max_yields": max_yields}))
    failures = Failures()
    return Buffer(broker, limit, workers, failed=failures), broker, failures


def add(buffer: Buffer, tasks) -> int:
    """Add a batch and yield its overflow as the sentinel does (it runs ``yield_back`` in its
    bookkeeping thread, ``keep`` in its guard loop); return how many yielded."""
    yielded = 0
    leaving = buffer.add(tasks)
    while leaving:
        count, kept = buffer.yield_back(leaving)
        yielded += count
        leaving = buffer.keep(kept)
    return yielded


def reserve(broker: MemoryBroker, *names: str) -> dict[str, Ticket]:
    """Reserve one job per name (enqueued first unless it exists); a name ends with its priority ("b5", "f-3")."""
    known = broker.jobs(names)
    for name in names:
        if name in known:
            continue
        priority = int(name.lstrip("abcdefghijklmnopqrstuvwxyz"))
        broker.enqueue({"id": name, "priority": priority, "payload": name})
    reservations = broker.reserve(["default"], len(names), 300, OWNER)
    assert sorted(r.job_id for r in reservations) == sorted(names)
    return {r.job_id: Ticket(r, None, r.job_id.encode()) for r in reservations}


def waiting(buffer: Buffer) -> list[str]:
    return buffer.held()


def delivery(broker: MemoryBroker, name: str) -> tuple[JobState, int, int, bool]:
    """(state, deliveries, yields, holds a lease token)."""
    job = broker.job(name)
    return job.state, job.deliveries, job.yields, job.lease_token is not None


def test_waiting_tasks_are_ordered_by_priority_then_arrival():
    buffer, broker, _ = make()
    t = reserve(broker, "a0", "b5", "c0", "d9", "e5", "f-3")
    assert add(buffer, [t["a0"], t["b5"], t["c0"]]) == 0
    assert add(buffer, [t["d9"], t["e5"], t["f-3"]]) == 0
    assert waiting(buffer) == ["d9", "b5", "e5", "a0", "c0", "f-3"]
    assert len(buffer) == 6


def test_take_removes_the_most_urgent_tasks_first():
    """take(n) returns the head of the list and removes it; nothing waiting: nothing taken."""
    buffer, broker, _ = make()
    t = reserve(broker, "a0", "b5", "c0", "d9")
    add(buffer, [t["a0"], t["b5"]])
    add(buffer, [t["c0"], t["d9"]])
    assert buffer.most_urgent() == 9

    assert [task.reservation.job_id for task in buffer.take(3)] == ["d9", "b5", "a0"]
    assert [task.reservation.job_id for task in buffer.take(3)] == ["c0"]
    assert buffer.take(3) == [] and buffer.most_urgent() is None
    assert waiting(buffer) == []


def test_a_task_put_back_waits_behind_the_others_of_its_priority():
    """What could not be sent (or came back unstarted) waits again, behind its equals, still held."""
    buffer, broker, _ = make()
    t = reserve(broker, "u9", "a5", "b5", "n0")
    add(buffer, [t["a5"], t["u9"], t["b5"], t["n0"]])

    taken = buffer.take(2)
    assert [task.reservation.job_id for task in taken] == ["u9", "a5"]
    buffer.put_back(taken)
    assert waiting(buffer) == ["u9", "b5", "a5", "n0"]  # the only 9: still first; a5 behind b5
    assert delivery(broker, "a5") == (JobState.RUNNING, 1, 0, True)  # still held, nothing given back


def test_overflow_yields_the_least_urgent_back_to_the_broker():
    """Limit 2, five tasks in two batches: the 9 and the first-arrived 5 stay, three go back."""
    buffer, broker, failures = make(limit=2)
    t = reserve(broker, "a5", "b0", "c9", "d0", "e5")

    assert add(buffer, [t["a5"], t["b0"]]) == 0
    assert add(buffer, [t["c9"], t["d0"], t["e5"]]) == 3

    assert waiting(buffer) == ["c9", "a5"]
    assert {n: delivery(broker, n) for n in t} == {
        "c9": (JobState.RUNNING, 1, 0, True),
        "a5": (JobState.RUNNING, 1, 0, True),
        "e5": (JobState.QUEUED, 0, 1, False),
        "b0": (JobState.QUEUED, 0, 1, False),
        "d0": (JobState.QUEUED, 0, 1, False),
    }
    assert failures.calls == []
    # What went back is ready again, most urgent first.
    assert [r.job_id for r in broker.reserve(["default"], 10, 300, "another")] == ["e5", "b0", "d0"]


def test_a_job_at_max_yields_keeps_its_place_and_the_next_least_urgent_goes_instead():
    """max_yields=1: "old0" yielded once already; over the limit, "x0" (arrived later) goes back instead."""
    buffer, broker, _ = make(limit=1, max_yields=1)
    (old,) = reserve(broker, "old0").values()
    assert broker.yield_reservation(old.reservation) is True  # its one yield
    t = reserve(broker, "old0", "x0", "new5")

    assert add(buffer, [t["old0"], t["x0"], t["new5"]]) == 1

    assert waiting(buffer) == ["new5", "old0"]  # above the limit: old0 cannot yield again
    assert delivery(broker, "old0") == (JobState.RUNNING, 1, 1, True)
    assert delivery(broker, "x0") == (JobState.QUEUED, 0, 1, False)


def test_a_failed_yield_keeps_the_task_and_is_reported():
    class Away(MemoryBroker):
        def yield_reservation(self, reservation, delay=0):
            raise OperationalError("server closed the connection unexpectedly")

    buffer, broker, failures = make(limit=1, broker_class=Away)
    t = reserve(broker, "a0", "b9")

    assert add(buffer, [t["a0"], t["b9"]]) == 0

    assert waiting(buffer) == ["b9", "a0"]
    assert [(what, type(exc)) for what, exc in failures.calls] == [("yield of job a0", OperationalError)]
    assert delivery(broker, "a0") == (JobState.RUNNING, 1, 0, True)


@pytest.mark.parametrize("waiting_names, busy, want", [
    ((), 0, Want(6, None)),  # empty: fill it
    (("a9", "b5", "c-3", "d0"), 0, Want(2, None)),  # 4 waiting < 4 idle workers + 1: starving
    (("a9", "b5", "c-3", "d0"), 1, Want(0, -3)),  # enough for the idle workers, less than half free
    (("a9", "b5", "c0"), 4, Want(3, None)),  # all busy, but half free
    (("a9", "b5", "c-3", "d0", "e1", "f2"), 0, Want(0, -3)),  # full: only work above the lowest priority
])
def test_what_to_ask_the_pusher_for(waiting_names, busy, want):
    """Limit 6, 4 workers: room when starving (fewer waiting than idle workers + 1) or at least half
    free; else only work above the lowest waiting priority."""
    buffer, broker, _ = make(limit=6, workers=4)
    if waiting_names:
        t = reserve(broker, *waiting_names)
        add(buffer, [t[n] for n in waiting_names])
    assert buffer.want(busy) == want


def test_take_all_empties_the_list_and_the_reservations_go_back_without_a_delivery_counted():
    buffer, broker, _ = make()
    t = reserve(broker, "a0", "b5")
    add(buffer, t.values())

    assert broker.defer_many(buffer.take_all()) == 2

    assert waiting(buffer) == []
    assert delivery(broker, "a0") == (JobState.QUEUED, 0, 0, False)
    assert delivery(broker, "b5") == (JobState.QUEUED, 0, 0, False)


def test_the_waiting_tasks_of_paused_queues_go_back_uncounted():
    buffer, broker, _ = make()
    broker.enqueue({"id": "x0", "payload": "x", "queue": "a"})
    broker.enqueue({"id": "y0", "payload": "y", "queue": "default"})
    reservations = broker.reserve(["a", "default"], 2, 300, OWNER)
    add(buffer, [Ticket(r, None, r.job_id.encode()) for r in reservations])
    assert broker.defer_many(buffer.take_queues(frozenset({"a"}))) == 1
    assert waiting(buffer) == ["y0"]
    assert delivery(broker, "x0") == (JobState.QUEUED, 0, 0, False)  # back, its delivery given back
    assert buffer.take_queues(frozenset({"a"})) == []
