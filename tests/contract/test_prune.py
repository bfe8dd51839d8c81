"""``Broker.prune``: the oldest successes beyond the newest ``keep`` go, at most ``batch`` a call;
nothing that did not succeed is touched, and a dead letter of a job that later succeeded goes with
its job. With a ``post_delete`` receiver on Job, the project's receiver sees every deleted job.

The tests taking ``broker`` run on each broker (see conftest.py); the ``orm_broker`` ones look at
dead-letter rows and Django's delete signals.
"""

from __future__ import annotations

import time

from django.db.models.signals import post_delete

from tests.contract.helpers import ack, jobs, letters, put

LONG = 300


def succeeded(broker, count: int) -> list[str]:
    """``count`` jobs acknowledged one after the other (finished_at in that order)."""
    ids = []
    for i in range(count):
        job_id = put(broker, i, 1, func="tests.tasks.add")
        (r,) = broker.reserve(["default"], 1, LONG, "t")
        assert r.job_id == job_id
        ack(broker, r, result=i + 1)
        ids.append(job_id)
        time.sleep(0.01)
    return ids


def test_prune_keeps_the_newest_successes_and_nothing_else_is_touched(broker):
    old = succeeded(broker, 5)
    failed = put(broker, func="tests.tasks.fail", max_deliveries=1)
    broker.settle(broker.reserve(["default"], 1, LONG, "t")[0], error="boom")
    queued = put(broker, 1, 2, func="tests.tasks.add")
    everything = [*old, failed, queued]

    assert broker.prune(keep=2, batch=2) == 2  # at most batch a call, the oldest first
    assert list(jobs(broker, old[:3])) == [old[2]]
    assert sorted(jobs(broker, [*old[3:], failed, queued])) == sorted([*old[3:], failed, queued])
    assert broker.prune(keep=2, batch=10) == 1
    assert broker.prune(keep=2, batch=10) == 0
    left = sorted(jobs(broker, everything))
    assert left == sorted([old[3], old[4], failed, queued])
    assert [x.job_id for x in letters(broker)] == [failed]
    assert broker.prune(keep=0) == 0  # keep 0: keep everything (save_limit 0)
    assert sorted(jobs(broker, everything)) == left


def test_orm_prune_takes_the_dead_letters_of_a_job_that_later_succeeded(orm_broker):
    """ORM only: a job dead-lettered, replayed, then succeeded leaves a replayed letter row; it goes
    with its job."""
    from django_taskmq.models import DeadLetter

    broker = orm_broker
    revived = put(broker)
    broker.dead_letter(broker.reserve(["default"], 1, LONG, "t")[0], "died once")
    broker.replay_dead(letters(broker)[0].pk)
    ack(broker, broker.reserve(["default"], 1, LONG, "t")[0])
    time.sleep(0.01)
    newer = succeeded(broker, 1)
    assert DeadLetter.objects.filter(job_id=revived).exists()
    assert broker.prune(keep=1) == 1
    assert not DeadLetter.objects.filter(job_id=revived).exists()
    assert list(jobs(broker, [revived, *newer])) == newer


def test_orm_prune_with_a_delete_receiver_reports_every_job(orm_broker):
    """ORM only: with a ``post_delete`` receiver on Job, the project's receiver sees every deleted job."""
    from django_taskmq.models import Job

    ids = succeeded(orm_broker, 3)
    seen: list[str] = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    post_delete.connect(receiver, sender=Job)
    try:
        assert orm_broker.prune(keep=1) == 2
    finally:
        post_delete.disconnect(receiver, sender=Job)
    assert sorted(seen) == sorted(ids[:2])
