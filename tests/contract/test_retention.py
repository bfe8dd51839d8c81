"""Retention through the broker: ``delete_finished`` deletes only jobs of the given final state that
finished before the cut-off, oldest first, at most ``batch``, with their dead letters; unfinished
jobs never. ``hold_chore``: one owner at a time, taken over once the holder's time ran out.

The tests taking ``broker`` run on each broker (see conftest.py): jobs end through the broker's
own methods, now, a little apart, with the cut-off between them. The ``orm_broker`` one reads the
chore's row.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq.brokers.base import Ack
from django_taskmq.policy.states import JobState
from tests.contract.helpers import jobs, letters, put, recorded, sqlite_plan

HOUR = 3600.0
LONG = 300
APART = 0.05  # seconds between two ends the cut-off must tell apart


def end(broker, state: JobState) -> str:
    """A job that ends in ``state`` now; then a short wait, so the next one ends later."""
    job_id = put(broker, queue="a")
    if state == JobState.CANCELLED:
        assert broker.cancel([job_id]) == 1
    elif state == JobState.EXPIRED:
        job_id = put(broker, queue="b", expires_at=time.time() + APART)
        time.sleep(APART * 2)
        assert broker.reserve(["b"], 1, LONG, "t") == []
    else:
        (r,) = broker.reserve(["a"], 1, LONG, "t")
        if state == JobState.SUCCEEDED:
            assert broker.ack_many([Ack(r)]) == []
        elif state == JobState.FAILED:
            assert broker.fail(r, "it failed")
        else:
            assert broker.dead_letter(r, "max deliveries exceeded: failed 5 times", error="boom")
    assert JobState(jobs(broker, [job_id])[job_id].state) == state
    time.sleep(APART)
    return job_id


def cut_off() -> float:
    """Now, between the ends before and after it."""
    at = time.time()
    time.sleep(APART)
    return at


def test_delete_finished_takes_the_old_jobs_of_one_state_only(broker):
    old_dead = [end(broker, JobState.DEAD) for _ in range(3)]
    old_failed = end(broker, JobState.FAILED)
    cutoff = cut_off()
    young_dead = end(broker, JobState.DEAD)
    running = put(broker, queue="a")
    retrying = put(broker, queue="a")
    got = broker.reserve(["a"], 2, LONG, "t")
    assert [r.job_id for r in got] == [running, retrying]
    broker.settle(got[1], delay=HOUR, error="later")
    queued = put(broker, queue="a")

    assert broker.count_finished(JobState.DEAD, cutoff) == 3
    assert broker.delete_finished(JobState.DEAD, cutoff, batch=2) == 2
    assert list(jobs(broker, old_dead)) == [old_dead[2]]  # oldest first
    assert broker.delete_finished(JobState.DEAD, cutoff, batch=2) == 1
    assert broker.delete_finished(JobState.DEAD, cutoff, batch=2) == 0
    assert [x.job_id for x in letters(broker)] == [young_dead]  # the letters went with their jobs
    kept = [young_dead, old_failed, queued, running, retrying]
    assert sorted(jobs(broker, kept)) == sorted(kept)
    for state in (JobState.QUEUED, JobState.RUNNING, JobState.RETRYING):  # unfinished: never deleted
        assert broker.count_finished(state, time.time() + HOUR) == 0
        assert broker.delete_finished(state, time.time() + HOUR) == 0
    assert broker.delete_finished(JobState.FAILED, cutoff) == 1
    assert sorted(jobs(broker, kept)) == sorted(kept[:1] + kept[2:])


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.EXPIRED,
                                   JobState.CANCELLED])
def test_each_final_state_can_be_deleted(broker, state):
    old = end(broker, state)
    cutoff = cut_off()
    young = end(broker, state)
    assert broker.count_finished(state, cutoff) == 1
    assert broker.delete_finished(state, cutoff) == 1
    assert list(jobs(broker, [old, young])) == [young]


def test_one_owner_holds_a_chore_until_its_time_runs_out(broker):
    assert broker.hold_chore("prune", "a", 30)
    assert not broker.hold_chore("prune", "b", 30)
    assert broker.hold_chore("prune", "a", 0.2)  # renewed by its holder, for a short time
    assert not broker.hold_chore("prune", "b", 30)
    time.sleep(0.3)  # a died: its time ran out
    assert broker.hold_chore("prune", "b", 30)
    assert not broker.hold_chore("prune", "a", 30)


def test_orm_chore_done_adds_up_what_the_chore_deleted(orm_broker):
    """ORM only: the chore's row (the dashboard shows it) counts the rows deleted and the last run."""
    from django_taskmq.models import Chore

    assert orm_broker.hold_chore("prune", "b", 30)
    orm_broker.chore_done("prune", 7)
    orm_broker.chore_done("prune", 5)
    orm_broker.chore_done("retention", 3)  # no cluster held it yet: the row is made
    row = Chore.objects.get(name="prune")
    assert (row.owner, row.deleted) == ("b", 12) and row.last_run is not None
    assert Chore.objects.get(name="retention").deleted == 3


@pytest.mark.sqlite_only
@pytest.mark.parametrize("state", sorted(JobState.FINAL))
def test_sqlite_reads_the_finished_jobs_of_a_state_by_their_finish_time(orm_broker, state):
    """SQLite plans without statistics (nothing analyses its table): retention's and ``save_limit``'s
    queries name their state's partial index of finished jobs by finish time and read it in order.
    With the state as a parameter they took the index of states and sorted every job of that state:
    150 to 250 ms a statement beside 290,000 successes, at every round of the monitor."""
    from django.db import connection

    made = 3 if state == JobState.SUCCEEDED else 2
    for _ in range(made):
        end(orm_broker, state)
    with recorded(connection) as executed:
        assert orm_broker.count_finished(state.value, time.time() + HOUR) == made
        assert orm_broker.delete_finished(state.value, time.time() + HOUR, batch=1) == 1
        if state == JobState.SUCCEEDED:
            assert orm_broker.prune(keep=1) == 1

    reads = [(sql, params) for sql, params in executed if sql.startswith("SELECT") and "finished_at" in sql]
    assert len(reads) == (4 if state == JobState.SUCCEEDED else 2), executed
    index = {JobState.SUCCEEDED: "taskmq_job_succeeded", JobState.FAILED: "taskmq_job_failed",
             JobState.DEAD: "taskmq_job_failed"}.get(state, "taskmq_job_ended")
    for sql, params in reads:
        plan = sqlite_plan(connection, sql, params)
        assert f"INDEX {index}" in plan and "TEMP B-TREE" not in plan, (sql, plan)


def finished_at(job_ids: list[str], at: float) -> None:
    """Set the finish time of ``job_ids`` (epoch seconds), as jobs that ended then."""
    import datetime

    from django_taskmq.models import Job

    Job.objects.filter(pk__in=job_ids).update(finished_at=datetime.datetime.fromtimestamp(at, datetime.UTC))


def test_orm_deletion_goes_on_where_the_last_batch_stopped_and_takes_its_ties(orm_broker):
    """ORM only: each batch of the oldest jobs starts at the finish time where the last one
    stopped (deleted rows stay in the index until a vacuum, and a walk from the oldest end stepped
    over all of them), that time included: jobs that finished at the same instant as the last
    one deleted are not skipped."""
    from django.db import connection

    ids = [end(orm_broker, JobState.SUCCEEDED) for _ in range(6)]
    cutoff = cut_off()
    young = end(orm_broker, JobState.SUCCEEDED)
    old = time.time() - 10 * HOUR
    finished_at(ids[:1], old - 1)
    finished_at(ids[1:], old)  # five ties: the first batch stops among them

    with recorded(connection) as executed:
        steps = [orm_broker.delete_finished(JobState.SUCCEEDED, cutoff, batch=2) for _ in range(4)]

    assert steps == [2, 2, 2, 0]
    assert list(jobs(orm_broker, [*ids, young])) == [young]
    reads = [sql for sql, _ in executed if sql.startswith("SELECT") and "ORDER BY finished_at" in sql]
    assert len(reads) == 4 and "finished_at >=" not in reads[0]
    assert all("finished_at >=" in sql for sql in reads[1:]), reads


def test_orm_a_job_behind_where_deletion_stopped_goes_once_the_walk_starts_over(orm_broker, monkeypatch):
    """ORM only: a job that finished earlier than where the last batch stopped (a step of a
    workflow kept while it ran, a host's clock behind) is not seen by the next batches; every
    ``REWALK`` seconds the walk starts from the oldest end again, and takes it."""
    from django_taskmq.brokers.orm import broker as orm_module

    ids = [end(orm_broker, JobState.SUCCEEDED) for _ in range(3)]
    behind = end(orm_broker, JobState.SUCCEEDED)
    cutoff = cut_off()
    assert orm_broker.delete_finished(JobState.SUCCEEDED, cutoff, batch=2) == 2
    finished_at([behind], time.time() - 10 * HOUR)

    assert orm_broker.delete_finished(JobState.SUCCEEDED, cutoff, batch=2) == 1
    assert list(jobs(orm_broker, [*ids, behind])) == [behind]
    monkeypatch.setattr(orm_module, "REWALK", 0.0)
    assert orm_broker.delete_finished(JobState.SUCCEEDED, cutoff, batch=2) == 1
    assert list(jobs(orm_broker, [*ids, behind])) == []
