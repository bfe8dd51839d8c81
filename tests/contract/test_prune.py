"""``Broker.prune``: the oldest successes beyond the newest ``keep`` go, at most ``batch`` a call;
nothing that did not succeed is touched, and a dead letter of a job that later succeeded goes with
its job. With a ``post_delete`` receiver on Job, the project's receiver sees every deleted job."""

from __future__ import annotations

import pytest
from django.db.models.signals import post_delete

from django_taskmq import async_task
from django_taskmq.api import run_sync
from django_taskmq.models import DeadLetter, Job, State

pytestmark = pytest.mark.django_db


def succeeded(count: int) -> list[str]:
    """``count`` jobs run to SUCCEEDED one after the other (finished_at in that order)."""
    ids = []
    for i in range(count):
        job_id = async_task("tests.tasks.add", i, 1)
        run_sync(job_id)
        ids.append(job_id)
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {State.SUCCEEDED}
    return ids


def test_prune_keeps_the_newest_successes_and_nothing_else_is_touched(broker):
    old = succeeded(5)
    failed = async_task("tests.tasks.fail", max_deliveries=1)
    run_sync(failed)
    queued = async_task("tests.tasks.add", 1, 2)
    DeadLetter.objects.create(job_id=old[0], queue="default", reason="died once, replayed, then succeeded")

    assert broker.prune(keep=2, batch=2) == 2  # at most batch a call
    assert Job.objects.filter(pk__in=old[:3]).count() == 1
    assert broker.prune(keep=2, batch=10) == 1
    assert not DeadLetter.objects.filter(job_id=old[0]).exists()
    assert broker.prune(keep=2, batch=10) == 0
    left = set(Job.objects.values_list("pk", flat=True))
    assert left == {old[3], old[4], failed, queued}
    assert broker.prune(keep=0) == 0  # keep 0: keep everything (save_limit 0)
    assert set(Job.objects.values_list("pk", flat=True)) == left


def test_prune_with_a_delete_receiver_reports_every_job(broker):
    ids = succeeded(3)
    seen: list[str] = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    post_delete.connect(receiver, sender=Job)
    try:
        assert broker.prune(keep=1) == 2
    finally:
        post_delete.disconnect(receiver, sender=Job)
    assert sorted(seen) == sorted(ids[:2])
