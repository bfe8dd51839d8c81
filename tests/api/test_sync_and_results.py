"""Sync mode (per call or ``TASKMQ['sync']``) runs the task inline through the cluster's
unpack/execute/record path and records the job; ``result`` and ``fetch`` read it back;
``Priority`` names the documented values.
"""

from __future__ import annotations

import pytest

from django_taskmq import Priority, async_task, fetch, result
from django_taskmq.models import DeadLetter, Job, State
from tests import tasks
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db


def test_sync_call_runs_inline_and_records_success(broker):
    """sync=True: the job is SUCCEEDED with its result when async_task returns."""
    job_id = async_task(tasks.add, 2, 3, sync=True)
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.result, j.deliveries, j.attempt) == (State.SUCCEEDED, 5, 1, 1)
    assert j.started_at is not None and j.finished_at is not None and j.started_at <= j.finished_at
    assert result(job_id) == 5


def test_sync_setting_runs_every_call_inline(broker, taskmq_settings):
    """TASKMQ['sync'] = True runs calls inline; sync=False on a call still only enqueues."""
    taskmq_settings(sync=True)
    ran = async_task(tasks.add, 1, 1)
    queued = async_task(tasks.add, 1, 1, sync=False)
    assert Job.objects.get(pk=ran).state == State.SUCCEEDED
    assert Job.objects.get(pk=queued).state == State.QUEUED


def test_task_sees_its_own_job_id(broker):
    """Inside a task, current_job() is the id of the job it runs in; outside, None."""
    from django_taskmq import current_job

    job_id = async_task(tasks.current, sync=True)
    assert result(job_id) == job_id
    assert current_job() is None


def test_a_coroutine_task_and_what_it_starts_see_its_job(broker):
    """The one current-job context reaches a coroutine task's asyncio tasks and threads it starts
    with asyncio.to_thread (a context copied), and is gone once the task ended."""
    from django_taskmq import current_job

    job_id = async_task(tasks.current_in_subtasks, sync=True)
    assert result(job_id) == [job_id] * 4
    assert current_job() is None


def test_sync_failure_is_a_failed_delivery_waiting_for_retry(broker):
    """A raising task in sync mode is recorded as a failed delivery: RETRYING with its error."""
    job_id = async_task(tasks.fail, "kaput", sync=True)
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries) == (State.RETRYING, 1)
    assert "TaskFailed" in j.error and "kaput" in j.error
    assert "Traceback" in j.traceback
    assert result(job_id) is None


def test_sync_unpicklable_result_is_a_failure_not_a_stuck_job(broker):
    """A result that cannot be pickled fails the delivery with that reason; the job is not left RUNNING."""
    job_id = async_task(tasks.unpicklable_result, sync=True, ack_failure=True)
    j = Job.objects.get(pk=job_id)
    assert j.state == State.FAILED and "result cannot be pickled" in j.error


def test_sync_exit_in_a_task_is_its_failure(broker):
    """sys.exit() inside a task is recorded as the task's failure (SystemExit), not swallowed or fatal."""
    job_id = async_task(tasks.exits, 3, sync=True)
    j = Job.objects.get(pk=job_id)
    assert j.state == State.RETRYING and "SystemExit" in j.error


def test_sync_failure_on_the_last_delivery_goes_to_the_dlq(broker):
    """With max_deliveries=1 the first failure is the last: DEAD with a DLQ entry."""
    job_id = async_task(tasks.fail, sync=True, max_deliveries=1)
    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert DeadLetter.objects.filter(job_id=job_id).count() == 1


def test_sync_failure_with_ack_failure_ends_failed(broker):
    """ack_failure=True acknowledges the failure: FAILED, not redelivered, not dead-lettered."""
    job_id = async_task(tasks.fail, sync=True, ack_failure=True)
    j = Job.objects.get(pk=job_id)
    assert j.state == State.FAILED and "TaskFailed" in j.error
    assert not DeadLetter.objects.exists()


def test_ack_failures_setting_and_its_per_task_override(broker, taskmq_settings):
    """TASKMQ['ack_failures'] = True ends failures FAILED unless the call says ack_failure=False."""
    taskmq_settings(ack_failures=True)
    acked = async_task(tasks.fail, sync=True)
    retried = async_task(tasks.fail, sync=True, ack_failure=False)
    assert Job.objects.get(pk=acked).state == State.FAILED
    assert Job.objects.get(pk=retried).state == State.RETRYING


def test_sync_reject_goes_straight_to_the_dlq(broker):
    """A task raising Reject is dead-lettered at once, with its reason."""
    job_id = async_task(tasks.reject, "not today", sync=True)
    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert "not today" in DeadLetter.objects.get(job_id=job_id).reason


def test_sync_call_with_a_known_key_does_not_run_again(broker, run_log):
    """A second sync call with the same idempotency key returns the first job and runs nothing."""
    first = async_task(tasks.record_run, "x", key="once", sync=True)
    second = async_task(tasks.record_run, "x", key="once", sync=True)
    assert second == first
    assert read_run_log(run_log) == [(first, "x")]


def test_result_of_an_unfinished_job_is_none_after_waiting(broker):
    """result(job_id, wait=ms) of a queued job returns None once the wait is over."""
    job_id = async_task(tasks.add, 1, 2)
    assert result(job_id) is None
    assert result(job_id, wait=50) is None
    assert fetch(job_id, wait=50).state == State.QUEUED


def test_fetch_returns_the_job_and_none_for_an_unknown_id(broker):
    """fetch returns the Job (state, result, error); an unknown id gives None."""
    job_id = async_task(tasks.add, 4, 4, sync=True)
    j = fetch(job_id)
    assert (j.pk, j.state, j.result, j.success) == (job_id, State.SUCCEEDED, 8, True)
    assert fetch("0" * 24) is None
    assert result("0" * 24) is None


def test_priority_names_and_values():
    """Priority.LOW=-5, NORMAL=0, HIGH=5, CRITICAL=9, usable as plain integers."""
    assert [(p.name, int(p)) for p in Priority] == [("LOW", -5), ("NORMAL", 0), ("HIGH", 5), ("CRITICAL", 9)]


def test_named_priorities_order_reservations(broker):
    """Jobs enqueued LOW, NORMAL, CRITICAL, HIGH are reserved CRITICAL, HIGH, NORMAL, LOW."""
    ids = {p: async_task(tasks.noop, priority=p) for p in (Priority.LOW, Priority.NORMAL, Priority.CRITICAL,
                                                          Priority.HIGH)}
    got = [r.job_id for r in broker.reserve(["default"], 10, 60, "t")]
    assert got == [ids[Priority.CRITICAL], ids[Priority.HIGH], ids[Priority.NORMAL], ids[Priority.LOW]]


def test_sync_retry_later_with_a_delay_is_a_failed_delivery_hidden_until_then(broker):
    """A task raising RetryLater(delay) counts the delivery and waits that long: RETRYING, invisible."""
    job_id = async_task(tasks.retry_later, 3600, sync=True)
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries) == (State.RETRYING, 1)
    assert broker.reserve(["default"], 1, 60, "t") == []


def test_sync_defer_puts_the_job_back_without_counting_a_delivery(broker):
    """A task raising Defer is put back QUEUED with no delivery counted."""
    job_id = async_task(tasks.defer, 0, sync=True)
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.deliveries) == (State.QUEUED, 0)
    (r,) = broker.reserve(["default"], 1, 60, "t")
    assert (r.job_id, r.deliveries) == (job_id, 1)
