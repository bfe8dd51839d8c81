"""Retention by running clusters: finished jobs of each state older than their retention are deleted
with their dead letters, by one cluster of two; younger and unfinished jobs never are. ``qprune``
does the same on demand, and counts first with ``--dry-run``."""

from __future__ import annotations

import datetime
import re
import signal
import subprocess
import sys
import time

import pytest
from django.utils import timezone

from django_taskmq.models import Chore, DeadLetter, Job, State

from ..conftest import ROOT, db_env

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

FINAL = [State.SUCCEEDED, State.FAILED, State.DEAD, State.EXPIRED, State.CANCELLED]
KEYS = {State.SUCCEEDED: "succeeded", State.FAILED: "failed", State.DEAD: "dead", State.EXPIRED: "expired",
        State.CANCELLED: "cancelled"}


def fill(per_state: int = 30) -> tuple[set[str], set[str]]:
    """Old (2 h) and young (1 min) finished jobs of every final state, a dead letter for each dead
    one, and unfinished jobs enqueued 2 h ago that wait in the future; return (old ids, kept ids)."""
    now = timezone.now()
    old, kept = set(), set()
    rows = []
    for state in FINAL:
        for i in range(per_state):
            for age, bucket in ((datetime.timedelta(hours=2), old), (datetime.timedelta(minutes=1), kept)):
                job_id = f"{len(rows):024x}"
                rows.append(Job(id=job_id, func="tests.tasks.noop", task_name="tests.tasks.noop", payload="x",
                                state=state, visible_at=time.time(), enqueued_at=now - age, finished_at=now - age))
                bucket.add(job_id)
    for state in (State.QUEUED, State.RETRYING):  # unfinished, old, not due for a day
        for i in range(per_state):
            job_id = f"{len(rows):024x}"
            rows.append(Job(id=job_id, func="tests.tasks.noop", task_name="tests.tasks.noop", payload="x",
                            state=state, visible_at=time.time() + 86400, enqueued_at=now - datetime.timedelta(hours=2)))
            kept.add(job_id)
    Job.objects.bulk_create(rows)
    DeadLetter.objects.bulk_create(DeadLetter(job_id=j.id, queue="default", reason="max deliveries exceeded")
                                   for j in rows if j.state == State.DEAD)
    return old, kept


def test_one_of_two_clusters_deletes_what_outlived_its_retention(cluster):
    old, kept = fill()
    cluster.configure(retention={key: 3600 for key in KEYS.values()}, save_limit=0)
    a, b = cluster.start("-w", "1"), cluster.start("-w", "1")
    cluster.wait_until(lambda: not Job.objects.filter(pk__in=old).exists(), "the old finished jobs to be deleted",
                       alive=[a, b])
    time.sleep(2)  # two more pruning rounds of each cluster: nothing else may go
    for qc in (a, b):
        qc.send(signal.SIGTERM)
    for qc in (a, b):
        assert qc.wait() == 0, qc.output()

    assert set(Job.objects.values_list("pk", flat=True)) == kept
    assert set(DeadLetter.objects.values_list("job_id", flat=True)) == {j for j in kept if Job.objects.get(pk=j).state == State.DEAD}
    assert Chore.objects.get(name="prune").deleted == len(old)
    deleting = [qc for qc in (a, b) if "retention: deleted" in qc.output(tail=100_000)]
    assert len(deleting) == 1, cluster.outputs()
    # One line at once, then one a minute, and what is left at the stop: a slow machine's rounds
    # may split the deletion over two lines (120, then 30 at the stop), never lose a count.
    told = re.findall(r"retention: deleted (\d+) finished job", deleting[0].output(tail=100_000))
    assert sum(int(n) for n in told) == len(old), told


def test_none_keeps_a_state_for_ever(cluster):
    old, kept = fill(per_state=5)
    cluster.configure(retention={"dead": None, "succeeded": 3600, "failed": 3600, "expired": 3600, "cancelled": 3600},
                      save_limit=0)
    old_dead = set(Job.objects.filter(pk__in=old, state=State.DEAD).values_list("pk", flat=True))
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: not Job.objects.filter(pk__in=old - old_dead).exists(), "the old jobs to go", alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
    assert set(Job.objects.values_list("pk", flat=True)) == kept | old_dead


def test_qprune_counts_then_deletes(cluster):
    old, kept = fill(per_state=4)
    overrides = {"TASKMQ_OVERRIDES": '{"retention": {"succeeded": 3600, "failed": 3600, "dead": 3600, '
                                     '"expired": 3600, "cancelled": 3600}, "save_limit": 0}'}

    def qprune(*args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", "qprune", *args], cwd=str(ROOT), env=db_env(overrides),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    dry = qprune("--dry-run")
    assert "dead       would delete 4 job(s)" in dry and f"total      would delete {len(old)} job(s)" in dry, dry
    assert Job.objects.count() == len(old) + len(kept)
    real = qprune()
    assert f"total      deleted {len(old)} job(s)" in real, real
    assert set(Job.objects.values_list("pk", flat=True)) == kept
    assert Chore.objects.get(name="prune").deleted == len(old)


def test_what_retention_deleted_after_its_last_line_is_told_at_the_stop(caplog):
    from django_taskmq.cluster.retention import RetentionLog

    log = RetentionLog()
    with caplog.at_level("INFO", logger="django_taskmq.cluster.monitor"):
        log.deleted({"SUCCEEDED": 120})  # the first round: told at once
        log.deleted({"SUCCEEDED": 20, "FAILED": 10})  # within the minute: held back
        assert [r.getMessage() for r in caplog.records] == [
            "retention: deleted 120 finished job(s) older than their retention (SUCCEEDED 120)"]
        log.flush()  # the monitor stops
        log.flush()  # nothing left: no empty line
    assert [r.getMessage() for r in caplog.records][1:] == [
        "retention: deleted 30 finished job(s) older than their retention (FAILED 10, SUCCEEDED 20)"]

    log = RetentionLog()
    log.flush()  # nothing deleted yet: the first deletion is still told at once
    with caplog.at_level("INFO", logger="django_taskmq.cluster.monitor"):
        caplog.clear()
        log.deleted({"DEAD": 1})
    assert [r.getMessage() for r in caplog.records] == [
        "retention: deleted 1 finished job(s) older than their retention (DEAD 1)"]
