"""Management commands: qdead (list, replay, purge the DLQ) and qinfo (clusters and broker counts)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from django_taskmq import async_task
from django_taskmq.models import DeadLetter, Job, State

pytestmark = pytest.mark.django_db


def kill(broker, queue: str) -> str:
    job_id = async_task("tests.tasks.noop", queue=queue)
    broker.dead_letter(broker.reserve([queue], 1, 60, "t")[0], "gave up")
    return job_id


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_qdead_lists_replays_and_purges_one_queue(broker):
    a, b = kill(broker, "a"), kill(broker, "b")
    listed = run("qdead", "list", "-Q", "a")
    assert a in listed and b not in listed
    letter = DeadLetter.objects.get(job_id=a)
    assert a in run("qdead", "replay", str(letter.pk), "--to-queue", "b", "--priority", "5")
    assert Job.objects.filter(pk=a).values_list("state", "queue", "priority").get() == (State.QUEUED, "b", 5)
    assert "purged 1" in run("qdead", "purge", "-Q", "b")
    assert not Job.objects.filter(pk=b).exists()


def test_qdead_replay_all_and_refused_flag_combinations(broker):
    kill(broker, "a")
    kill(broker, "a")
    with pytest.raises(CommandError, match="--all takes only -Q"):
        run("qdead", "replay", "--all", "--to-queue", "b")
    with pytest.raises(CommandError, match="give dead letter ids, job ids or --all"):
        run("qdead", "replay")
    with pytest.raises(CommandError, match="unknown queue"):
        run("qdead", "replay", str(DeadLetter.objects.first().pk), "--to-queue", "nope")
    assert "replayed 2" in run("qdead", "replay", "--all", "-Q", "a")
    assert Job.objects.filter(state=State.QUEUED).count() == 2


def test_qdead_replay_takes_a_job_id_as_well_as_a_dead_letter_id(broker):
    """The list shows job ids most prominently: replay takes them too (the job's pending letter)."""
    a, b = kill(broker, "a"), kill(broker, "a")
    letter = DeadLetter.objects.get(job_id=b)
    listed = run("qdead", "list").splitlines()
    assert listed[0].split()[:3] == ["letter", "queue", "job"]
    assert f"replayed {a}" in run("qdead", "replay", a, "--priority", "3")
    assert f"replayed {b}" in run("qdead", "replay", str(letter.pk))
    assert set(Job.objects.filter(pk__in=[a, b]).values_list("state", flat=True)) == {State.QUEUED}
    with pytest.raises(CommandError, match=f"job {a} has no dead letter waiting"):
        run("qdead", "replay", a)
    with pytest.raises(CommandError, match="neither a dead letter id"):
        run("qdead", "replay", "0661d2")


def test_qinfo_shows_the_counts_per_queue(broker):
    async_task("tests.tasks.noop", queue="a", priority=5)
    kill(broker, "b")
    out = run("qinfo")
    assert "clusters alive: 0" in out
    assert out.splitlines()[1].split() == ["queue", "ready", "delayed", "retrying", "running", "reserved", "dead",
                                           "ready", "by", "priority"]
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
    assert rows["a"] == ["1", "0", "0", "0", "0", "0", "5:1"]  # ready, delayed, retrying, running, reserved, dead
    assert rows["b"] == ["0", "0", "0", "0", "0", "1", "-"]


def test_qinfo_counts_the_durable_jobs_that_sleep_or_wait(broker):
    from tests.api.test_durable import run as run_once

    run_once(broker, async_task("tests.cluster.tasks_durable.approval"))
    assert "durable jobs: sleeping 0, waiting for a signal 1" in run("qinfo")
