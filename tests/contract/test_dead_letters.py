"""The dead-letter queue, per queue: list, replay (one, all; optionally to a new queue and
priority), purge; and ``stats()`` per queue and priority.
"""

from __future__ import annotations

import pytest

from django_taskmq import ConfigError, async_task
from django_taskmq.models import DeadLetter, Job, State

pytestmark = pytest.mark.django_db

LONG = 300


def kill(broker, queue: str, n: int = 1, priority: int = 0, reason: str = "test") -> list[str]:
    """Enqueue ``n`` jobs in ``queue``, reserve and dead-letter them; return their ids."""
    ids = [async_task("tests.tasks.noop", i, queue=queue, priority=priority) for i in range(n)]
    got = broker.reserve([queue], limit=n, lease=LONG, owner="t")
    assert sorted(r.job_id for r in got) == sorted(ids)
    for r in got:
        assert broker.dead_letter(r, reason, error="it broke") is True
    return ids


def test_dead_letter_makes_the_job_dead_with_a_dlq_entry(broker):
    """dead_letter() ends the delivery: job DEAD, one DLQ entry with queue, reason, error, deliveries."""
    (job_id,) = kill(broker, "a", reason="rejected by test")
    j = Job.objects.get(pk=job_id)
    assert j.state == State.DEAD
    (letter,) = broker.dead_letters()
    assert (letter.job_id, letter.queue, letter.reason, letter.error, letter.deliveries) == (
        job_id, "a", "rejected by test", "it broke", 1)
    assert letter.failed_at is not None and letter.replayed_at is None and letter.replay_count == 0


def test_dead_letters_are_listed_per_queue(broker):
    """dead_letters(queue) lists that queue's entries only; without a queue, all of them."""
    a_ids = kill(broker, "a", 2)
    b_ids = kill(broker, "b", 3)
    assert sorted(d.job_id for d in broker.dead_letters("a")) == sorted(a_ids)
    assert sorted(d.job_id for d in broker.dead_letters("b")) == sorted(b_ids)
    assert sorted(d.job_id for d in broker.dead_letters()) == sorted(a_ids + b_ids)
    assert list(broker.dead_letters("emails")) == []


def test_replay_dead_requeues_the_same_job_with_counters_reset(broker, taskmq_settings):
    """replay_dead: the same job id is QUEUED again with deliveries and yields reset and runs again."""
    job_id = async_task("tests.tasks.noop", queue="a")
    r = broker.reserve(["a"], 1, LONG, "t")[0]
    broker.yield_reservation(r)
    r = broker.reserve(["a"], 1, LONG, "t")[0]
    broker.nack(r, error="first")
    r = broker.reserve(["a"], 1, LONG, "t")[0]
    broker.dead_letter(r, "gave up", error="second")
    before = Job.objects.get(pk=job_id)
    assert (before.state, before.deliveries, before.yields) == (State.DEAD, 2, 1)
    (letter,) = broker.dead_letters("a")

    assert broker.replay_dead(letter.pk) == job_id

    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries, j.yields, j.queue) == (State.QUEUED, 0, 0, "a")
    letter.refresh_from_db()
    assert letter.replayed_at is not None and letter.replay_count == 1
    assert list(broker.dead_letters("a")) == []
    assert Job.objects.count() == 1
    (again,) = broker.reserve(["a"], 5, LONG, "t")
    assert (again.job_id, again.deliveries, again.yields) == (job_id, 1, 0)


def test_replay_dead_refuses_a_letter_already_replayed_or_unknown(broker):
    """A replayed letter cannot be replayed again (the job may be running); an unknown id is an error."""
    async_task("tests.tasks.noop", queue="a")
    broker.dead_letter(broker.reserve(["a"], 1, LONG, "t")[0], "gave up")
    (letter,) = broker.dead_letters("a")
    broker.replay_dead(letter.pk)
    with pytest.raises(ConfigError, match="already replayed"):
        broker.replay_dead(letter.pk)
    with pytest.raises(ConfigError, match="no dead letter"):
        broker.replay_dead(letter.pk + 1000)
    assert DeadLetter.objects.get(pk=letter.pk).replay_count == 1


def test_replay_dead_to_a_new_queue_and_priority(broker):
    """replay_dead(queue=, priority=) moves the job; it is reserved from the new queue at the new band."""
    (job_id,) = kill(broker, "a")
    (letter,) = broker.dead_letters("a")
    broker.replay_dead(letter.pk, queue="b", priority=7)
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.queue, j.priority) == (State.QUEUED, "b", 7)
    assert broker.reserve(["a"], 5, LONG, "t") == []
    (r,) = broker.reserve(["b"], 5, LONG, "t")
    assert (r.job_id, r.queue, r.priority) == (job_id, "b", 7)


def test_replay_dead_refuses_an_unknown_queue_or_bad_priority(broker):
    """A replay to an unknown queue or an out-of-range priority raises ConfigError and changes nothing."""
    (job_id,) = kill(broker, "a")
    (letter,) = broker.dead_letters("a")
    with pytest.raises(ConfigError):
        broker.replay_dead(letter.pk, queue="nope")
    with pytest.raises(ConfigError):
        broker.replay_dead(letter.pk, priority=10)
    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert [d.pk for d in broker.dead_letters("a")] == [letter.pk]


def test_replayed_job_that_dies_again_gets_a_new_entry(broker):
    """Each dead-lettered delivery is one entry: dying after a replay adds one; the history stays."""
    (job_id,) = kill(broker, "a", reason="first death")
    broker.replay_dead(broker.dead_letters("a")[0].pk)
    (r,) = broker.reserve(["a"], 1, LONG, "t")
    broker.dead_letter(r, "second death")
    letters = DeadLetter.objects.filter(job_id=job_id).order_by("id")
    assert [(d.reason, d.replay_count) for d in letters] == [("first death", 1), ("second death", 0)]
    assert [d.reason for d in broker.dead_letters("a")] == ["second death"]


def test_replay_all_replays_one_queue_only(broker):
    """replay_all(queue) requeues every pending entry of that queue and returns how many."""
    a_ids = kill(broker, "a", 3)
    b_ids = kill(broker, "b", 2)
    assert broker.replay_all("a") == 3
    assert set(Job.objects.filter(state=State.QUEUED).values_list("id", flat=True)) == set(a_ids)
    assert set(Job.objects.filter(state=State.DEAD).values_list("id", flat=True)) == set(b_ids)
    assert list(broker.dead_letters("a")) == []
    assert DeadLetter.objects.filter(queue="a", replay_count=1, replayed_at__isnull=False).count() == 3
    assert broker.replay_all("a") == 0


def test_replay_all_without_a_queue_replays_every_queue(broker):
    """replay_all() requeues the entries of all queues."""
    ids = kill(broker, "a", 2) + kill(broker, "b", 2)
    assert broker.replay_all() == 4
    assert set(Job.objects.filter(state=State.QUEUED).values_list("id", flat=True)) == set(ids)


def test_purge_dead_deletes_one_queues_entries_and_dead_jobs(broker):
    """purge_dead(queue) deletes that queue's pending entries and their dead jobs, nothing else."""
    a_ids = kill(broker, "a", 2)
    b_ids = kill(broker, "b", 2)
    alive = async_task("tests.tasks.noop", queue="a")
    assert broker.purge_dead("a") == 2
    assert not Job.objects.filter(pk__in=a_ids).exists()
    assert list(broker.dead_letters("a")) == []
    assert sorted(d.job_id for d in broker.dead_letters("b")) == sorted(b_ids)
    assert Job.objects.get(pk=alive).state == State.QUEUED


def test_purge_dead_keeps_replayed_jobs(broker):
    """A replayed job is no longer dead: purging its queue leaves it queued."""
    (job_id,) = kill(broker, "a")
    broker.replay_all("a")
    assert broker.purge_dead("a") == 0
    assert Job.objects.get(pk=job_id).state == State.QUEUED


def test_stats_count_ready_delayed_reserved_dead_per_queue_and_priority(broker):
    """stats() has one row per queue and priority with ready, delayed, reserved and dead counts."""
    for i in range(3):
        async_task("tests.tasks.noop", i, queue="a")
    async_task("tests.tasks.noop", queue="a", delay=3600)
    broker.reserve(["a"], 1, LONG, "t")
    kill(broker, "b", 2, priority=5)
    async_task("tests.tasks.noop", queue="b")
    done = async_task("tests.tasks.noop", queue="emails")
    (r,) = broker.reserve(["emails"], 1, LONG, "t")
    assert r.job_id == done
    broker.ack(r)

    rows = {(s["queue"], s["priority"]): {k: s[k] for k in ("ready", "delayed", "reserved", "dead")}
            for s in broker.stats()}
    assert rows == {
        ("a", 0): {"ready": 2, "delayed": 1, "reserved": 1, "dead": 0},
        ("b", 5): {"ready": 0, "delayed": 0, "reserved": 0, "dead": 2},
        ("b", 0): {"ready": 1, "delayed": 0, "reserved": 0, "dead": 0},
    }
