"""Retention through the broker: ``delete_finished`` deletes only jobs of the given final state that
finished before the cut-off, oldest first, at most ``batch``, with their dead letters; unfinished
jobs never. ``hold_chore``: one owner at a time, taken over once the holder's time ran out."""

from __future__ import annotations

import datetime
import time

import pytest
from django.utils import timezone

from django_taskmq.models import Chore, DeadLetter, Job, State

pytestmark = pytest.mark.django_db

HOUR = 3600.0


def job(state: str, hours_ago: float | None, name: str) -> str:
    """A job in ``state`` finished ``hours_ago`` (None: not finished)."""
    at = None if hours_ago is None else timezone.now() - datetime.timedelta(hours=hours_ago)
    row = Job.objects.create(id=f"{name:0>24}"[:24], func="tests.tasks.noop", task_name="tests.tasks.noop", payload="x",
                             state=state, visible_at=time.time(), finished_at=at,
                             enqueued_at=at or timezone.now())
    return row.pk


def test_delete_finished_takes_the_old_jobs_of_one_state_only(broker):
    old_dead = [job(State.DEAD, 48 + i, f"d{i}") for i in range(3)]
    for job_id in old_dead:
        DeadLetter.objects.create(job_id=job_id, queue="default", reason="max deliveries exceeded: failed 5 times")
    young_dead = job(State.DEAD, 1, "dy")
    DeadLetter.objects.create(job_id=young_dead, queue="default", reason="kept")
    old_failed = job(State.FAILED, 48, "f")
    queued = job(State.QUEUED, None, "q")
    running = job(State.RUNNING, None, "r")
    retrying = job(State.RETRYING, None, "t")
    cutoff = time.time() - 24 * HOUR

    assert broker.count_finished(State.DEAD, cutoff) == 3
    assert broker.delete_finished(State.DEAD, cutoff, batch=2) == 2
    assert set(Job.objects.filter(pk__in=old_dead).values_list("pk", flat=True)) == {old_dead[0]}  # oldest first
    assert broker.delete_finished(State.DEAD, cutoff, batch=2) == 1
    assert broker.delete_finished(State.DEAD, cutoff, batch=2) == 0
    assert not DeadLetter.objects.filter(job_id__in=old_dead).exists()  # the letters went with their jobs
    assert DeadLetter.objects.filter(job_id=young_dead).exists()
    left = set(Job.objects.values_list("pk", flat=True))
    assert left == {young_dead, old_failed, queued, running, retrying}
    for state in (State.QUEUED, State.RUNNING, State.RETRYING):  # unfinished: no finished_at, never deleted
        assert broker.delete_finished(state, time.time() + HOUR) == 0
    assert broker.delete_finished(State.FAILED, cutoff) == 1


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.FAILED, State.DEAD, State.EXPIRED, State.CANCELLED])
def test_each_final_state_can_be_deleted(broker, state):
    old, young = job(state, 30, "old"), job(state, 0.1, "young")
    assert broker.delete_finished(state, time.time() - HOUR) == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [young] and old != young


def test_one_owner_holds_a_chore_until_its_time_runs_out(broker):
    assert broker.hold_chore("prune", "a", 30)
    assert not broker.hold_chore("prune", "b", 30)
    assert broker.hold_chore("prune", "a", 30)  # renewed by its holder
    Chore.objects.filter(name="prune").update(until=time.time() - 1)  # a died: its time ran out
    assert broker.hold_chore("prune", "b", 30)
    assert not broker.hold_chore("prune", "a", 30)
    broker.chore_done("prune", 7)
    broker.chore_done("prune", 5)
    row = Chore.objects.get(name="prune")
    assert (row.owner, row.deleted) == ("b", 12) and row.last_run is not None
