"""Batch forms: ``ack_many`` records many successes in one call and reports the lost leases;
``enqueue_many`` stores many jobs at once and keeps FIFO order.

The tests taking ``broker`` run on each broker (see conftest.py); the ``orm_broker`` ones are the
ORM broker's own (the public API, SQL statements counted).
"""

from __future__ import annotations

import time

from django_taskmq.brokers import Ack
from django_taskmq.policy.states import JobState
from tests.contract.helpers import ack, jobs, put_many, states

LONG = 300
SHORT = 0.2


def test_ack_many_marks_every_held_reservation_succeeded(broker):
    """ack_many on held reservations: all SUCCEEDED with their results, nothing reported lost."""
    ids = put_many(broker, [(i, i) for i in range(30)], func="tests.tasks.add")
    got = broker.reserve(["default"], limit=30, lease=LONG, owner="t")
    assert broker.ack_many([Ack(r, result=ids.index(r.job_id) * 2) for r in got]) == []
    found = jobs(broker, ids)
    assert {j.state for j in found.values()} == {JobState.SUCCEEDED}
    assert [found[i].result for i in ids] == [2 * n for n in range(30)]


def test_ack_many_reports_lost_leases_and_records_only_the_held_ones(broker):
    """Reservations whose lease ran out and were reclaimed are returned and left as they are."""
    held_ids = put_many(broker, [(i,) for i in range(8)])
    held = broker.reserve(["default"], limit=8, lease=LONG, owner="t")
    lost_ids = put_many(broker, [(i,) for i in range(2)])
    lost = broker.reserve(["default"], limit=2, lease=SHORT, owner="t")
    assert [r.job_id for r in lost] == lost_ids
    time.sleep(SHORT + 0.15)
    assert broker.reclaim_expired() == 2

    reported = broker.ack_many(Ack(r) for r in held + lost)

    assert sorted(r.job_id for r in reported) == sorted(lost_ids)
    assert set(states(broker, held_ids).values()) == {JobState.SUCCEEDED}
    assert set(states(broker, lost_ids).values()) == {JobState.RETRYING}


def test_ack_many_does_not_report_a_repeated_ack_by_the_holder_as_lost(broker):
    """Acknowledging again what the same holder already acknowledged is not a lost lease."""
    ids = put_many(broker, [(i,) for i in range(3)])
    got = broker.reserve(["default"], limit=3, lease=LONG, owner="t")
    ack(broker, got[0])
    assert broker.ack_many(Ack(r) for r in got) == []
    assert set(states(broker, ids).values()) == {JobState.SUCCEEDED}


def test_enqueue_many_stores_5000_jobs_in_fifo_order(broker):
    """enqueue_many of 5000 jobs: all stored, ids returned in order, reserved back in that order."""
    ids = put_many(broker, [(i,) for i in range(5000)])
    assert len(ids) == len(set(ids)) == 5000
    assert [(s["ready"], s["delayed"]) for s in broker.stats()] == [(5000, 0)]
    got = []
    while batch := broker.reserve(["default"], limit=500, lease=LONG, owner="t"):
        got += [r.job_id for r in batch]
    assert got == ids


def test_enqueue_many_applies_options_to_every_job(orm_broker):
    """ORM only (the public API): options given to enqueue_many (queue, priority) apply to each job;
    arguments stay per call."""
    from django_taskmq import enqueue_many, result
    from django_taskmq.api import run_sync
    from django_taskmq.models import Job

    ids = enqueue_many("tests.tasks.echo", [(1,), {"args": (2,), "kwargs": {"x": 3}}], queue="b", priority=4)
    assert set(Job.objects.values_list("queue", "priority")) == {("b", 4)}
    for job_id in ids:
        run_sync(job_id)
    assert [result(i) for i in ids] == [((1,), {}), ((2,), {"x": 3})]


def count_queries(func) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        func()
    return len(ctx.captured_queries)


def test_reserve_and_ack_many_cost_no_statement_per_job(orm_broker):
    """ORM only: a claim of 200 and its batch ack issue as many statements as a claim of 2 (no
    per-job loops)."""
    broker = orm_broker
    put_many(broker, [(i,) for i in range(202)])
    broker.reclaim_every = 0  # every reserve sweeps: both claims do the same upkeep
    broker.reserve(["default"], limit=1, lease=LONG, owner="warm-up")  # first-use set-up out of the way
    small, large = [], []
    small_q = count_queries(lambda: small.extend(broker.reserve(["default"], limit=2, lease=LONG, owner="t")))
    large_q = count_queries(lambda: large.extend(broker.reserve(["default"], limit=199, lease=LONG, owner="t")))
    assert (len(small), len(large)) == (2, 199)
    assert large_q == small_q
    assert count_queries(lambda: broker.ack_many(Ack(r) for r in large)) == \
        count_queries(lambda: broker.ack_many(Ack(r) for r in small))
