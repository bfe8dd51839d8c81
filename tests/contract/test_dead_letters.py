"""The dead-letter queue, per queue: list, replay (one, all; optionally to a new queue and
priority), purge; and ``stats()`` per queue and priority.

The tests taking ``broker`` run on each broker (see conftest.py); the ``orm_broker`` one looks at
the letters a replay marked, which ``dead_letters()`` no longer lists, through the ORM.
"""

from __future__ import annotations

import pytest

from django_taskmq import ConfigError
from django_taskmq.policy.states import JobState
from tests.contract.helpers import ack, job, jobs, letters, put, states

LONG = 300


def kill(broker, queue: str, n: int = 1, priority: int = 0, reason: str = "test") -> list[str]:
    """Enqueue ``n`` jobs in ``queue``, reserve and dead-letter them; return their ids."""
    ids = [put(broker, i, queue=queue, priority=priority) for i in range(n)]
    got = broker.reserve([queue], limit=n, lease=LONG, owner="t")
    assert sorted(r.job_id for r in got) == sorted(ids)
    for r in got:
        assert broker.dead_letter(r, reason, error="it broke") is True
    return ids


def test_dead_letter_makes_the_job_dead_with_a_dlq_entry(broker):
    """dead_letter() ends the delivery: job DEAD, one DLQ entry with queue, reason, error, deliveries."""
    (job_id,) = kill(broker, "a", reason="rejected by test")
    j = job(broker, job_id)
    assert (j.state, j.error, j.lease_owner) == (JobState.DEAD, "it broke", None)
    assert j.finished_at is not None
    (letter,) = letters(broker)
    assert (letter.job_id, letter.queue, letter.reason, letter.error, letter.deliveries) == (
        job_id, "a", "rejected by test", "it broke", 1)
    assert letter.failed_at is not None and letter.replayed_at is None and letter.replay_count == 0


def test_a_dead_letter_without_an_error_keeps_the_jobs_last_one(broker):
    """Without ``error`` the job keeps its last error and its letter carries it."""
    job_id = put(broker, queue="a")
    (r,) = broker.reserve(["a"], 1, LONG, "t")
    broker.settle(r, error="KeyError: first")
    (r,) = broker.reserve(["a"], 1, LONG, "t")
    assert broker.dead_letter(r, "gave up") is True
    assert broker.dead_letter(r, "gave up") is False  # the holder's repeated call
    assert job(broker, job_id).error == "KeyError: first"
    assert [(x.reason, x.error, x.deliveries) for x in letters(broker)] == [("gave up", "KeyError: first", 2)]


def test_dead_letters_are_listed_per_queue_newest_first(broker):
    """dead_letters(queue) lists that queue's entries only; without a queue, all of them."""
    a_ids = kill(broker, "a", 2)
    b_ids = kill(broker, "b", 3)
    assert sorted(d.job_id for d in letters(broker, "a")) == sorted(a_ids)
    assert sorted(d.job_id for d in letters(broker, "b")) == sorted(b_ids)
    assert sorted(d.job_id for d in letters(broker)) == sorted(a_ids + b_ids)
    assert [d.queue for d in letters(broker)] == ["b"] * 3 + ["a"] * 2
    assert letters(broker, "emails") == []


def test_replay_dead_requeues_the_same_job_with_counters_reset(broker):
    """replay_dead: the same job id is QUEUED again with deliveries and yields reset and runs again."""
    job_id = put(broker, queue="a")
    r = broker.reserve(["a"], 1, LONG, "t")[0]
    broker.yield_reservation(r)
    r = broker.reserve(["a"], 1, LONG, "t")[0]
    broker.settle(r, error="first")
    r = broker.reserve(["a"], 1, LONG, "t")[0]
    broker.dead_letter(r, "gave up", error="second")
    before = job(broker, job_id)
    assert (before.state, before.deliveries, before.yields) == (JobState.DEAD, 2, 1)
    (letter,) = letters(broker, "a")

    assert broker.replay_dead(letter.pk) == job_id

    j = job(broker, job_id)
    assert (j.state, j.deliveries, j.yields, j.queue, j.finished_at) == (JobState.QUEUED, 0, 0, "a", None)
    assert letters(broker, "a") == []
    assert states(broker, [job_id]) == {job_id: JobState.QUEUED}
    (again,) = broker.reserve(["a"], 5, LONG, "t")
    assert (again.job_id, again.deliveries, again.yields) == (job_id, 1, 0)


def test_replay_dead_refuses_a_letter_already_replayed_or_unknown(broker):
    """A replayed letter cannot be replayed again (the job may be running); an unknown id is an error."""
    job_id = put(broker, queue="a")
    broker.dead_letter(broker.reserve(["a"], 1, LONG, "t")[0], "gave up")
    (letter,) = letters(broker, "a")
    broker.replay_dead(letter.pk)
    broker.reserve(["a"], 1, LONG, "t")
    with pytest.raises(ConfigError, match="already replayed"):
        broker.replay_dead(letter.pk)
    with pytest.raises(ConfigError, match="no dead letter"):
        broker.replay_dead(letter.pk + 1000)
    assert job(broker, job_id).state == JobState.RUNNING  # left to its holder


def test_replay_dead_refuses_a_letter_whose_job_is_no_longer_dead(broker):
    """A letter whose job was retried another way (retry_jobs marks it) or runs again is not replayed."""
    (job_id,) = kill(broker, "a")
    (letter,) = letters(broker, "a")
    assert broker.retry_jobs([job_id]) == 1
    with pytest.raises(ConfigError):
        broker.replay_dead(letter.pk)
    assert job(broker, job_id).state == JobState.QUEUED


def test_replay_dead_to_a_new_queue_and_priority(broker):
    """replay_dead(queue=, priority=) moves the job; it is reserved from the new queue at the new band."""
    (job_id,) = kill(broker, "a")
    (letter,) = letters(broker, "a")
    broker.replay_dead(letter.pk, queue="b", priority=7)
    j = job(broker, job_id)
    assert (j.state, j.queue, j.priority) == (JobState.QUEUED, "b", 7)
    assert broker.reserve(["a"], 5, LONG, "t") == []
    (r,) = broker.reserve(["b"], 5, LONG, "t")
    assert (r.job_id, r.queue, r.priority) == (job_id, "b", 7)


def test_replay_dead_refuses_an_unknown_queue_or_bad_priority(broker):
    """A replay to an unknown queue or an out-of-range priority raises ConfigError and changes nothing."""
    (job_id,) = kill(broker, "a")
    (letter,) = letters(broker, "a")
    with pytest.raises(ConfigError):
        broker.replay_dead(letter.pk, queue="nope")
    with pytest.raises(ConfigError):
        broker.replay_dead(letter.pk, priority=10)
    assert job(broker, job_id).state == JobState.DEAD
    assert [d.pk for d in letters(broker, "a")] == [letter.pk]


def test_replayed_job_that_dies_again_gets_a_new_entry(broker):
    """Each dead-lettered delivery is one entry: dying after a replay adds one."""
    (job_id,) = kill(broker, "a", reason="first death")
    (first,) = letters(broker, "a")
    broker.replay_dead(first.pk)
    (r,) = broker.reserve(["a"], 1, LONG, "t")
    broker.dead_letter(r, "second death")
    (second,) = letters(broker, "a")
    assert (second.job_id, second.reason, second.replay_count) == (job_id, "second death", 0)
    assert second.pk != first.pk


def test_orm_replay_marks_the_letter_and_keeps_the_history(orm_broker):
    """ORM only: a replayed letter stays, with its replay time and count (the DLQ page lists them)."""
    from django_taskmq.models import DeadLetter

    broker = orm_broker
    (job_id,) = kill(broker, "a", reason="first death")
    broker.replay_dead(letters(broker, "a")[0].pk)
    (r,) = broker.reserve(["a"], 1, LONG, "t")
    broker.dead_letter(r, "second death")
    history = DeadLetter.objects.filter(job_id=job_id).order_by("id")
    assert [(d.reason, d.replay_count, d.replayed_at is not None) for d in history] == [
        ("first death", 1, True), ("second death", 0, False)]
    assert broker.replay_all("a") == 1
    assert DeadLetter.objects.filter(queue="a", replay_count=1, replayed_at__isnull=False).count() == 2


def test_replay_all_replays_one_queue_only(broker):
    """replay_all(queue) requeues every pending entry of that queue and returns how many."""
    a_ids = kill(broker, "a", 3)
    b_ids = kill(broker, "b", 2)
    assert broker.replay_all("a") == 3
    assert set(states(broker, a_ids).values()) == {JobState.QUEUED}
    assert set(states(broker, b_ids).values()) == {JobState.DEAD}
    assert letters(broker, "a") == []
    assert broker.replay_all("a") == 0


def test_replay_all_without_a_queue_replays_every_queue(broker):
    """replay_all() requeues the entries of all queues."""
    ids = kill(broker, "a", 2) + kill(broker, "b", 2)
    assert broker.replay_all() == 4
    assert set(states(broker, ids).values()) == {JobState.QUEUED}
    assert letters(broker) == []


def test_purge_dead_deletes_one_queues_entries_and_dead_jobs(broker):
    """purge_dead(queue) deletes that queue's pending entries and their dead jobs, nothing else."""
    a_ids = kill(broker, "a", 2)
    b_ids = kill(broker, "b", 2)
    alive = put(broker, queue="a")
    assert broker.purge_dead("a") == 2
    assert jobs(broker, a_ids) == {}
    assert letters(broker, "a") == []
    assert sorted(d.job_id for d in letters(broker, "b")) == sorted(b_ids)
    assert job(broker, alive).state == JobState.QUEUED


def test_purge_dead_of_chosen_letters(broker):
    """purge_dead(ids=) deletes those letters and their jobs only."""
    ids = kill(broker, "a", 3)
    chosen = [d for d in letters(broker, "a") if d.job_id != ids[1]]
    assert broker.purge_dead(ids=[d.pk for d in chosen]) == 2
    assert list(jobs(broker, ids)) == [ids[1]]
    assert [d.job_id for d in letters(broker)] == [ids[1]]


def test_purge_dead_keeps_replayed_jobs(broker):
    """A replayed job is no longer dead: purging its queue leaves it queued."""
    (job_id,) = kill(broker, "a")
    broker.replay_all("a")
    assert broker.purge_dead("a") == 0
    assert job(broker, job_id).state == JobState.QUEUED


def test_stats_count_ready_delayed_reserved_dead_per_queue_and_priority(broker):
    """stats() has one row per queue and priority with ready, delayed, reserved and dead counts."""
    for i in range(3):
        put(broker, i, queue="a")
    put(broker, queue="a", delay=3600)
    broker.reserve(["a"], 1, LONG, "t")
    kill(broker, "b", 2, priority=5)
    put(broker, queue="b")
    done = put(broker, queue="emails")
    (r,) = broker.reserve(["emails"], 1, LONG, "t")
    assert r.job_id == done
    ack(broker, r)

    rows = [(s["queue"], s["priority"], {k: s[k] for k in ("ready", "delayed", "reserved", "dead")})
            for s in broker.stats()]
    assert rows == [  # by queue, then priority, most urgent first
        ("a", 0, {"ready": 2, "delayed": 1, "reserved": 1, "dead": 0}),
        ("b", 5, {"ready": 0, "delayed": 0, "reserved": 0, "dead": 2}),
        ("b", 0, {"ready": 1, "delayed": 0, "reserved": 0, "dead": 0}),
    ]
