"""The attempt history of a job: every failed execution leaves one entry in ``attempt_log`` (its
number, start, error and traceback), oldest first, whichever way the failure is settled (retry,
acknowledged failure, dead letter); the newest ``policy.attempts.KEEP`` are kept and the rest
counted. ``first_started_at`` is the first execution's start, ``started_at`` the latest's.
Deliveries that never ran (poison guard at reserve, a bad package, a give-back) write nothing.

The tests taking ``broker`` run on each broker (see conftest.py), reading ``Broker.jobs``; the
migration test is the ORM broker's own."""

from __future__ import annotations

import datetime
import time

import pytest

from django_taskmq.runtime import execution as ex
from django_taskmq.runtime import recorder
from django_taskmq.brokers.base import Ack
from django_taskmq.exceptions import LeaseLost
from django_taskmq.policy import attempts
from django_taskmq.policy.states import JobState
from django_taskmq.policy.storable import MARK
from tests.contract.helpers import job as job_of
from tests.contract.helpers import letters, put

T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def reserve_one(broker, lease=300):
    (r,) = broker.reserve(["default"], limit=1, lease=lease, owner="t")
    return r


def log_of(broker, job_id):
    return job_of(broker, job_id).attempt_log


def test_failed_executions_are_listed_oldest_first_and_a_success_adds_none(broker):
    job_id = put(broker, func="tests.tasks.fail", max_deliveries=5)
    for n, kind in enumerate(("KeyError", "tests.tasks.Boom"), start=1):
        r = reserve_one(broker)
        assert broker.settle(r, delay=0, error=f"{kind}: failure {n}", traceback=f"Traceback {n}",
                             started_at=at(n)) == JobState.RETRYING
    r = reserve_one(broker)
    assert broker.ack_many([Ack(r, None, at(3), at(4))]) == []
    job = job_of(broker, job_id)
    assert job.state == JobState.SUCCEEDED and job.attempt == 3
    assert job.attempt_log == {"dropped": 0, "attempts": [
        {"attempt": 1, "started_at": at(1).isoformat(), "error": "KeyError: failure 1", "traceback": "Traceback 1"},
        {"attempt": 2, "started_at": at(2).isoformat(), "error": "tests.tasks.Boom: failure 2",
         "traceback": "Traceback 2"},
    ]}
    assert (job.first_started_at, job.started_at) == (at(1), at(3))


def test_a_job_that_succeeds_at_once_writes_no_history_and_its_first_start_is_its_start(broker):
    job_id = put(broker)
    r = reserve_one(broker)
    broker.ack_many([Ack(r, None, at(7), at(8))])
    job = job_of(broker, job_id)
    assert job.attempt_log is None
    assert job.first_started_at == job.started_at == at(7)


def test_an_acknowledged_failure_and_a_dead_letter_that_ran_are_recorded(broker):
    failed = put(broker, func="tests.tasks.fail")
    r = reserve_one(broker)
    assert broker.fail(r, "ValueError: once", "tb once", started_at=at(1), finished_at=at(2))
    assert [(e["attempt"], e["error"]) for e in attempts.entries(log_of(broker, failed))] == [(1, "ValueError: once")]
    assert job_of(broker, failed).first_started_at == at(1)

    rejected = put(broker, func="tests.tasks.fail")
    r = reserve_one(broker)
    broker.settle(r, delay=0, error="KeyError: first", started_at=at(3))
    r = reserve_one(broker)
    assert broker.dead_letter(r, "rejected", "RuntimeError: reject", "tb reject", started_at=at(4))
    job = job_of(broker, rejected)
    assert job.state == JobState.DEAD
    assert [e["error"] for e in attempts.entries(job.attempt_log)] == ["KeyError: first", "RuntimeError: reject"]
    assert (job.first_started_at, job.started_at) == (at(3), at(4))


def test_the_poison_guards_last_failure_is_recorded_with_the_others(broker):
    """max_deliveries=3: three failed executions, three entries; the third dead-letters the job."""
    job_id = put(broker, func="tests.tasks.fail", max_deliveries=3)
    for n in (1, 2, 3):
        broker.settle(reserve_one(broker), delay=0, error=f"ValueError: {n}", started_at=at(n))
    job = job_of(broker, job_id)
    assert job.state == JobState.DEAD
    assert [e["attempt"] for e in attempts.entries(job.attempt_log)] == [1, 2, 3]


def test_deliveries_that_never_ran_write_no_entry(broker):
    """A crash loop dead-lettered at reserve and a package that does not verify: no execution, no entry."""
    crashed = put(broker, max_deliveries=1)
    reserve_one(broker, lease=0.05)
    time.sleep(0.1)
    broker.reclaim_expired()
    assert broker.reserve(["default"], limit=1, lease=300, owner="t") == []  # buried by the guard
    job = job_of(broker, crashed)
    assert (job.state, job.attempt, job.attempt_log, job.first_started_at) == (JobState.DEAD, 0, None, None)

    bad = put(broker)
    assert broker.dead_letter_package(reserve_one(broker), "bad signature")
    job = job_of(broker, bad)
    assert (job.state, job.attempt, job.attempt_log) == (JobState.DEAD, 0, None)


def test_a_stale_holder_writes_no_entry(broker):
    job_id = put(broker, func="tests.tasks.fail")
    old = reserve_one(broker, lease=0.05)
    time.sleep(0.1)
    broker.reclaim_expired()
    new = reserve_one(broker)
    with pytest.raises(LeaseLost):
        broker.settle(old, delay=0, error="ValueError: late", started_at=at(1))
    assert log_of(broker, job_id) is None
    broker.settle(new, delay=0, error="ValueError: current", started_at=at(2))
    assert [(e["attempt"], e["error"]) for e in attempts.entries(log_of(broker, job_id))] == [(1, "ValueError: current")]


def test_the_history_is_capped_to_the_newest_entries_and_counts_the_dropped(broker):
    """A job failing KEEP + 5 times keeps its newest KEEP entries; dropped says 5."""
    total = attempts.KEEP + 5
    job_id = put(broker, func="tests.tasks.fail", max_deliveries=total + 1)
    long_traceback = "frame\n" * 5_000 + "the frame that raised"
    for n in range(1, total + 1):
        broker.settle(reserve_one(broker), delay=0, error=f"ValueError: {n} " + "x" * 5_000,
                    traceback=long_traceback, started_at=at(n))
    job = job_of(broker, job_id)
    assert job.state == JobState.RETRYING and job.attempt == total
    assert attempts.dropped(job.attempt_log) == 5
    kept = attempts.entries(job.attempt_log)
    assert [e["attempt"] for e in kept] == list(range(6, total + 1))
    assert kept[0]["started_at"] == at(6).isoformat()
    for e in kept:
        assert len(e["error"]) == attempts.ERROR_LIMIT and e["error"].endswith(MARK)
        assert len(e["traceback"]) == attempts.TRACEBACK_LIMIT
        assert e["traceback"].startswith(MARK) and e["traceback"].endswith("the frame that raised")
    assert job.traceback == long_traceback  # the job's own column keeps the latest at full size
    assert job.first_started_at == at(1)  # the cap drops entries, never the first start


def test_a_replayed_job_keeps_its_history_and_goes_on_numbering(broker):
    job_id = put(broker, func="tests.tasks.fail", max_deliveries=1)
    broker.settle(reserve_one(broker), delay=0, error="ValueError: before", started_at=at(1))
    (letter,) = letters(broker)
    broker.replay_dead(letter.pk)
    broker.settle(reserve_one(broker), delay=0, error="ValueError: after", started_at=at(2))
    job = job_of(broker, job_id)
    assert [(e["attempt"], e["error"]) for e in attempts.entries(job.attempt_log)] == [
        (1, "ValueError: before"), (2, "ValueError: after")]
    assert (job.first_started_at, job.started_at) == (at(1), at(2))


def test_text_no_engine_can_store_is_cleaned_in_the_history_too(broker):
    """NUL (refused by PostgreSQL's text and jsonb) and a lone surrogate, recorded by the recorder."""
    job_id = put(broker, func="tests.tasks.fail")
    r = reserve_one(broker)
    now = time.time()
    text = "cannot open report-\udcff.csv\x00 (NUL above)"
    outcome = ex.Outcome(r, None, ex.FAILURE, error=text, traceback=text, started_at=now, finished_at=now)
    recorder.record([outcome], broker, broker.settings)
    (entry,) = attempts.entries(log_of(broker, job_id))
    assert "\x00" not in entry["error"] and "report-\\udcff.csv" in entry["error"]
    assert entry["traceback"] == entry["error"]


@pytest.mark.django_db(transaction=True)
def test_migration_0008_adds_two_columns_without_rebuilding_the_table_and_old_rows_go_on(orm_broker):
    """ORM only: the migration is ADD COLUMN only (no SQLite table rebuild, no rewrite on PostgreSQL); a job
    that failed before it keeps its latest start as its first, and its history starts with the
    next failure, numbered after the executions it already had."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    from django_taskmq.models import Job

    broker = orm_broker
    table = Job._meta.db_table
    executor = MigrationExecutor(connection)
    executor.migrate([("django_taskmq", "0007_failed_index")])
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan([("django_taskmq", "0008_attempt_history")])
        assert [m.name for m, _ in plan] == ["0008_attempt_history"]
        statements = [s for s in executor.loader.collect_sql(plan) if not s.startswith("--")]
        assert len(statements) == 2, statements
        quoted = connection.ops.quote_name(table)
        assert all(s.startswith(f"ALTER TABLE {quoted} ADD COLUMN") and " NULL" in s and "DEFAULT" not in s
                   for s in statements), statements
        adapt = connection.ops.adapt_datetimefield_value
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (id, func, task_name, payload, queue, priority, state, attempt, deliveries, "
                f"yields, max_deliveries, visible_at, enqueued_at, started_at, error, traceback) VALUES "
                f"(%s, 'tests.tasks.fail', 'fail', '', 'default', 0, 'DEAD', 2, 2, 0, 2, 0, %s, %s, "
                f"'ValueError: old', 'old tb')",
                ["d" * 24, adapt(timezone.now()), adapt(at(2))],
            )
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
        old = Job.objects.get(pk="d" * 24)
        assert (old.attempt_log, old.first_started_at, old.started_at) == (None, None, at(2))
        assert broker.retry_jobs([old.pk]) == 1
        broker.settle(reserve_one(broker), delay=0, error="KeyError: new", traceback="new tb", started_at=at(9))
        old = Job.objects.get(pk="d" * 24)
        assert (old.first_started_at, old.started_at) == (at(2), at(9))
        assert [(e["attempt"], e["error"]) for e in attempts.entries(old.attempt_log)] == [(3, "KeyError: new")]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
        Job.objects.all().delete()
