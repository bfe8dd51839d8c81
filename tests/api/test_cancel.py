"""``django_taskmq.cancel`` and ``manage.py qcancel`` without a cluster: what they store, what they
answer, and how a CANCELLED outcome is recorded (its hooks and ``post_execute`` say so). Stopping a
job that runs in a cluster is tested with real processes in ``tests/cluster/test_cancel.py``.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from django_taskmq import ConfigError, JobCancelled, LeaseLost, async_task, cancel, current_job
from django_taskmq.runtime import execution as ex
from django_taskmq.runtime import context
from django_taskmq.brokers.base import Reservation
from django_taskmq.models import Job, State
from django_taskmq.signals import post_execute
from tests.contract.helpers import ack
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db


def test_cancel_a_waiting_job_ends_it_at_once(broker):
    job_id = async_task("tests.tasks.noop", delay=60)
    assert cancel(job_id) is True
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempt, job.cancel_requested_at) == (State.CANCELLED, 0, None)
    assert broker.reserve(["default"], limit=10, lease=60, owner="t") == []


def test_cancel_a_running_job_stores_the_request_for_its_holder(broker):
    job_id = async_task("tests.tasks.noop")
    (held,) = broker.reserve(["default"], limit=1, lease=60, owner="t")
    assert broker.cancel_requested([job_id]) == []
    assert cancel(job_id) is True
    first = Job.objects.get(pk=job_id).cancel_requested_at
    assert first is not None and Job.objects.get(pk=job_id).state == State.RUNNING
    assert cancel(job_id) is True  # asked again: the first time is kept
    assert Job.objects.get(pk=job_id).cancel_requested_at == first
    assert broker.cancel_requested([job_id, "unknown"]) == [job_id]
    # The holder records the end: CANCELLED, an execution counted, never retried; a late write is refused.
    assert broker.end_cancelled(held, "JobCancelled: stop", started_at=first) is True
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempt, job.lease_owner, job.error) == (State.CANCELLED, 1, None, "JobCancelled: stop")
    assert broker.cancel_requested([job_id]) == []
    assert broker.end_cancelled(held, "again") is False
    assert cancel(job_id) is False


def test_end_cancelled_of_an_unstarted_reservation_counts_no_execution_and_is_fenced(broker):
    job_id = async_task("tests.tasks.noop")
    (held,) = broker.reserve(["default"], limit=1, lease=60, owner="t")
    with pytest.raises(LeaseLost):
        broker.end_cancelled(held._replace(token="not-the-token"), "late")
    assert broker.end_cancelled(held, "JobCancelled: cancelled before it started") is True
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempt, job.started_at) == (State.CANCELLED, 0, None)


def test_retry_of_a_job_cancelled_while_running_forgets_the_request(broker):
    job_id = async_task("tests.tasks.noop")
    (held,) = broker.reserve(["default"], limit=1, lease=60, owner="t")
    cancel(job_id)
    broker.end_cancelled(held, "JobCancelled")
    assert broker.retry_jobs([job_id]) == 1
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.cancel_requested_at) == (State.QUEUED, None)
    broker.reserve(["default"], limit=1, lease=60, owner="t")
    assert broker.cancel_requested([job_id]) == [], "the replayed run is not cancelled by the old request"


def test_cancel_of_a_finished_or_unknown_job_is_false_and_a_bad_id_a_config_error(broker):
    job_id = async_task("tests.tasks.noop")
    ack(broker, broker.reserve(["default"], limit=1, lease=60, owner="t")[0])
    assert cancel(job_id) is False
    assert cancel("no-such-job") is False
    for bad in (None, 42, ""):
        with pytest.raises(ConfigError, match="job id"):
            cancel(bad)  # type: ignore[arg-type]


def test_a_task_that_raises_job_cancelled_ends_cancelled_and_its_hook_and_signal_say_so(broker, settings, run_log):
    seen = []

    def receiver(sender, job_id, status, error, **kwargs):
        seen.append((job_id, status, error))

    post_execute.connect(receiver)
    try:
        job_id = async_task("tests.tasks.cancels_itself", hook="tests.tasks.hook_log", sync=True)
    finally:
        post_execute.disconnect(receiver)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempt, job.deliveries) == (State.CANCELLED, 1, 1)
    assert job.error == "django_taskmq.exceptions.JobCancelled: the task gave up"
    assert seen == [(job_id, ex.CANCELLED, job.error)] and seen[0][1] == "cancelled"
    assert read_run_log(run_log) == [(job_id, "cancels-itself"), (job_id, "hook:CANCELLED")]


def test_current_job_is_its_id_and_says_whether_it_was_cancelled():
    assert current_job() is None
    requested = [False]
    token = context.enter(reservation=Reservation("j1", "default", 0, 1, 0, "t"), cancel_probe=lambda: requested[0])
    try:
        job = current_job()
        assert job == "j1" and isinstance(job, str) and job.cancelled is False
        job.raise_if_cancelled()  # not cancelled: nothing happens
        requested[0] = True
        assert job.cancelled is True
        with pytest.raises(JobCancelled, match="job j1 was cancelled"):
            job.raise_if_cancelled()
    finally:
        context.leave(token)
    token = context.enter(reservation=Reservation("j2", "default", 0, 1, 0, "t"))  # sync mode: never cancelled
    try:
        assert current_job().cancelled is False
    finally:
        context.leave(token)
    assert current_job() is None


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_qcancel_cancels_waiting_jobs_asks_running_ones_and_names_the_rest(broker):
    waiting = async_task("tests.tasks.noop", delay=60)
    running = async_task("tests.tasks.noop")
    broker.reserve(["default"], limit=1, lease=60, owner="t")
    done = async_task("tests.tasks.noop")
    ack(broker, broker.reserve(["default"], limit=1, lease=60, owner="t")[0])
    lines = run("qcancel", waiting, running, done).splitlines()
    assert lines[0] == f"{waiting} cancelled"
    assert lines[1].startswith(f"{running} running: asked to stop")
    assert lines[2] == f"{done} not cancelled: it has finished (SUCCEEDED)"
    assert Job.objects.get(pk=waiting).state == State.CANCELLED
    assert broker.cancel_requested([running]) == [running]
    with pytest.raises(CommandError, match="no such job: nope"):
        run("qcancel", "nope")


def test_the_admin_job_page_shows_when_a_cancellation_was_requested(admin_client, broker):
    job_id = async_task("tests.tasks.noop")
    broker.reserve(["default"], limit=1, lease=60, owner="t")
    page = admin_client.get(f"/admin/django_taskmq/job/{job_id}/change/").content.decode()
    assert "cancel requested" not in page
    cancel(job_id)
    page = admin_client.get(f"/admin/django_taskmq/job/{job_id}/change/").content.decode()
    assert "cancel requested" in page
