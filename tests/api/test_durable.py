"""Durable tasks without a cluster: each run of the job is reserved, executed and recorded here,
through the same functions the cluster uses (``execution``, ``recorder``), on the real database.
What a real cluster does across crashes, sleeps and signals is ``tests/cluster/test_durable.py``'s.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import ConfigError, LeaseLost, async_task, cancel, durable, send_signal
from django_taskmq.runtime import execution, recorder
from django_taskmq.conf import get_settings
from django_taskmq.runtime.durable_context import DurableContext
from django_taskmq.models import DeadLetter, Job, JobSignal, JobStep, State
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db
TASKS = "tests.cluster.tasks_durable"


def run(broker, job_id: str) -> Job:
    """One delivery of ``job_id`` by a cluster-like owner (sleeps are not skipped); return the job after it."""
    settings = get_settings()
    reservation = broker.reserve_job(job_id, 60, owner="test-cluster")
    assert reservation is not None, f"job {job_id} could not be reserved"
    outcome = execution.seal(execution.execute(execution.unpack(reservation, settings.name)), settings)
    recorder.record([outcome], broker, settings)
    return Job.objects.get(pk=job_id)


def steps_run(run_log, job_id: str) -> list[str]:
    return [tag for j, tag in read_run_log(run_log) if j == job_id]


def wake_now(broker, job_id: str) -> None:
    """Move a sleeping job's wake time to now (what the clock would do), then run the sweep that wakes it."""
    now = time.time()
    JobStep.objects.filter(job_id=job_id, done=False).update(wake_at=now)
    Job.objects.filter(pk=job_id).update(visible_at=now)
    broker.reclaim_expired()


def test_a_step_that_raised_runs_again_on_the_retry_and_the_steps_before_it_do_not(broker, run_log, tmp_path):
    job_id = async_task(f"{TASKS}.flaky_second", str(tmp_path / "marker"))
    job = run(broker, job_id)
    assert (job.state, job.attempt, job.deliveries) == (State.RETRYING, 1, 1)
    assert "the step failed this time" in job.error
    job = run(broker, job_id)
    assert (job.state, job.result) == (State.SUCCEEDED, [1, "flaky done"])
    assert steps_run(run_log, job_id) == ["step:first", "start:flaky", "start:flaky"]
    assert list(JobStep.objects.filter(job_id=job_id).values_list("name", "kind", "done")) == [
        ("first", "step", True), ("second", "step", True)]


def test_a_sleep_gives_the_job_back_without_counting_a_delivery_or_an_execution(broker, run_log):
    job_id = async_task(f"{TASKS}.sleeper", 30)
    before = broker.now()
    job = run(broker, job_id)
    assert (job.state, job.deliveries, job.attempt, job.lease_token) == (State.SUSPENDED, 0, 0, None)
    assert before + 30 <= job.visible_at <= broker.now() + 30
    assert broker.reserve(["default"], limit=10, lease=60, owner="other") == []  # not ready while it sleeps
    assert broker.suspended() == {"sleep": 1, "wait": 0}
    (sleep,) = JobStep.objects.filter(job_id=job_id, kind="sleep")
    assert (sleep.name, sleep.done, sleep.wake_at) == ("#sleep:1", False, job.visible_at)

    wake_now(broker, job_id)
    job = run(broker, job_id)
    assert (job.state, job.deliveries, job.attempt) == (State.SUCCEEDED, 1, 1)
    assert [tag.split()[0] for tag in steps_run(run_log, job_id)] == ["step:before", "step:after"]
    assert JobStep.objects.get(job_id=job_id, kind="sleep").done
    assert broker.suspended() == {"sleep": 0, "wait": 0}


def test_a_run_that_comes_before_the_wake_time_sleeps_again_until_it(broker):
    job_id = async_task(f"{TASKS}.sleeper", 30)
    first = run(broker, job_id).visible_at
    Job.objects.filter(pk=job_id).update(state=State.QUEUED, visible_at=time.time())  # run early, somehow
    job = run(broker, job_id)
    assert (job.state, job.visible_at, job.deliveries) == (State.SUSPENDED, first, 0)


def test_a_signal_sent_before_the_wait_is_kept_and_delivered(broker, run_log):
    job_id = async_task(f"{TASKS}.approval")
    assert send_signal(job_id, "approved", {"by": "ann"}) is False  # nobody waits yet: kept
    job = run(broker, job_id)
    assert (job.state, job.result) == (State.SUCCEEDED, {"by": "ann"})
    assert steps_run(run_log, job_id) == ["step:asked", "step:answered:{'by': 'ann'}"]
    assert list(JobSignal.objects.filter(job_id=job_id).values_list("consumed", flat=True)) == [True]


def test_a_signal_wakes_the_waiting_job_with_its_payload(broker, run_log):
    job_id = async_task(f"{TASKS}.approval", 3600)
    job = run(broker, job_id)
    assert (job.state, job.deliveries) == (State.SUSPENDED, 0)
    assert job.visible_at > broker.now() + 3000
    assert broker.suspended() == {"sleep": 0, "wait": 1}
    assert send_signal(job_id, "approved", "yes") is True
    assert Job.objects.get(pk=job_id).visible_at <= broker.now()
    job = run(broker, job_id)
    assert (job.state, job.result, job.deliveries) == (State.SUCCEEDED, "yes", 1)
    assert steps_run(run_log, job_id) == ["step:asked", "step:answered:'yes'"]


def test_a_wait_without_a_timeout_waits_until_its_signal(broker):
    job_id = async_task(f"{TASKS}.approval")
    job = run(broker, job_id)
    assert job.state == State.SUSPENDED
    assert broker.reserve(["default"], limit=10, lease=60, owner="other") == []
    send_signal(job_id, "other-signal", 1)  # not what it waits for: it does not wake
    assert broker.reserve(["default"], limit=10, lease=60, owner="other") == []


def test_a_wait_that_times_out_returns_none(broker, run_log):
    job_id = async_task(f"{TASKS}.approval", 0)
    job = run(broker, job_id)
    assert job.state == State.QUEUED  # the deadline is now: visible again at once
    job = run(broker, job_id)
    assert (job.state, job.result) == (State.SUCCEEDED, None)
    assert steps_run(run_log, job_id) == ["step:asked", "step:answered:None"]
    with pytest.raises(ConfigError, match="has ended"):
        send_signal(job_id, "approved", "too late")


def test_cancel_while_waiting_ends_it_cancelled_at_once(broker):
    job_id = async_task(f"{TASKS}.approval")
    run(broker, job_id)
    assert cancel(job_id) is True
    assert Job.objects.get(pk=job_id).state == State.CANCELLED
    with pytest.raises(ConfigError, match="has ended"):
        send_signal(job_id, "approved")


def test_a_suspension_after_a_cancel_request_ends_the_job_cancelled(broker):
    job_id = async_task(f"{TASKS}.approval")
    settings = get_settings()
    reservation = broker.reserve_job(job_id, 60, owner="test-cluster")
    assert broker.request_cancel([job_id]) == 1  # asked while it runs, before it reaches its wait
    outcome = execution.execute(execution.unpack(reservation, settings.name))
    assert outcome.status == execution.SUSPEND
    assert recorder.record([outcome], broker, settings) == [(outcome, "CANCELLED")]
    assert Job.objects.get(pk=job_id).state == State.CANCELLED


def test_send_signal_refuses_an_unknown_job_and_bad_arguments(broker):
    with pytest.raises(ConfigError, match="no job"):
        send_signal("0" * 32, "approved")
    job_id = async_task(f"{TASKS}.approval")
    for name in ("", 5, "x" * 101):
        with pytest.raises(ConfigError, match="signal's name"):
            send_signal(job_id, name)
    with pytest.raises(ConfigError, match="payload"):
        send_signal(job_id, "approved", lambda: None)
    assert not JobSignal.objects.exists()


def test_a_step_reached_again_with_other_arguments_dead_letters_the_job(broker, monkeypatch):
    job_id = async_task(f"{TASKS}.changes_its_steps")
    assert run(broker, job_id).state == State.QUEUED  # after its step, a sleep of 0 s
    monkeypatch.setenv("TASKMQ_TEST_STEP_ARG", "2")
    job = run(broker, job_id)
    assert job.state == State.DEAD
    assert "step 'only'" in job.error and "other arguments" in job.error
    assert "other arguments" in DeadLetter.objects.get(job_id=job_id).reason


def test_a_superseded_run_writes_no_step(broker):
    job_id = async_task(f"{TASKS}.approval")
    reservation = broker.reserve_job(job_id, 60, owner="test-cluster")
    ctx = DurableContext(reservation._replace(token="f" * 32), broker)
    with pytest.raises(LeaseLost):
        ctx.step("asked", str, 1)
    assert not JobStep.objects.exists()


def test_bad_step_sleep_and_wait_arguments_raise_config_errors(broker):
    job_id = async_task(f"{TASKS}.approval")
    ctx = DurableContext(broker.reserve_job(job_id, 60, owner="test-cluster"), broker)
    for name in ("", "#sleep:1", "x" * 201, None):
        with pytest.raises(ConfigError, match="step's name"):
            ctx.step(name, str)
    with pytest.raises(ConfigError, match="not callable"):
        ctx.step("a", 5)
    for bad in (-1, "5", None, True):
        with pytest.raises(ConfigError, match="sleep"):
            ctx.sleep(bad)
    with pytest.raises(ConfigError, match="aware datetime"):
        ctx.sleep_until(__import__("datetime").datetime(2030, 1, 1))
    with pytest.raises(ConfigError, match="timeout"):
        ctx.wait_for("approved", timeout=-2)
    assert not JobStep.objects.exists()


def test_durable_takes_the_options_of_task_and_refuses_others():
    with pytest.raises(ConfigError, match="unknown option"):
        durable(colour="red")(lambda ctx: None)

    async def coroutine(ctx):
        return None

    with pytest.raises(ConfigError, match="coroutine"):
        durable(coroutine)


def test_retention_deletes_steps_and_signals_with_their_job(broker):
    job_id = async_task(f"{TASKS}.approval")
    send_signal(job_id, "approved", "ok")
    assert run(broker, job_id).state == State.SUCCEEDED
    assert JobStep.objects.filter(job_id=job_id).count() == 3
    assert broker.delete_finished("SUCCEEDED", time.time() + 60) == 1
    assert not JobStep.objects.exists() and not JobSignal.objects.exists()


class TestSyncMode:
    @pytest.fixture(autouse=True)
    def sync(self, settings):
        settings.TASKMQ = {**settings.TASKMQ, "sync": True}

    def test_sleeps_are_skipped(self, broker, run_log):
        job_id = async_task(f"{TASKS}.sleeper", 3600)
        job = Job.objects.get(pk=job_id)
        assert job.state == State.SUCCEEDED
        assert [tag.split()[0] for tag in steps_run(run_log, job_id)] == ["step:before", "step:after"]

    def test_a_signal_from_the_test_resumes_a_waiting_job_inline(self, broker, run_log):
        job_id = async_task(f"{TASKS}.approval")
        assert Job.objects.get(pk=job_id).state == State.SUSPENDED
        assert send_signal(job_id, "approved", 42) is True
        job = Job.objects.get(pk=job_id)
        assert (job.state, job.result) == (State.SUCCEEDED, 42)
        assert steps_run(run_log, job_id) == ["step:asked", "step:answered:42"]

    def test_three_steps_run_once_each(self, broker, run_log, tmp_path):
        marker = tmp_path / "marker"
        marker.touch()  # no kill in sync mode
        job_id = async_task(f"{TASKS}.three_steps", 1, str(marker))
        assert Job.objects.get(pk=job_id).result == [2, 20, 25]


def test_a_durable_task_as_a_workflow_step_holds_its_dependents_until_it_ends(broker):
    from django_taskmq import Workflow, workflow

    wf = Workflow(name="approve-then-mail")
    first = wf.add(f"{TASKS}.approval", name="approve")
    wf.add("tests.tasks.add", 1, 2, name="mail", after=[first])
    workflow_id = wf.enqueue()
    approve, mail = wf.job_ids["approve"], wf.job_ids["mail"]
    assert run(broker, approve).state == State.SUSPENDED  # waits for its signal: not an end
    assert Job.objects.get(pk=mail).state == State.WAITING
    send_signal(approve, "approved", "ok")
    assert run(broker, approve).state == State.SUCCEEDED
    assert Job.objects.get(pk=mail).state == State.QUEUED  # released by the durable step's end
    assert run(broker, mail).result == 3
    assert workflow(workflow_id).state == "SUCCEEDED"


def test_the_steps_and_signals_of_an_encrypted_job_are_encrypted_like_its_result(broker, settings):
    from django_taskmq.encryption import Sealed, generate_key
    from django_taskmq.envelope import verify_result

    settings.TASKMQ = {**settings.TASKMQ, "encryption_keys": [generate_key()]}
    job_id = async_task(f"{TASKS}.approval", encrypt=True)
    send_signal(job_id, "approved", {"card": "4111"})
    job = run(broker, job_id)
    assert (job.state, job.result) == (State.SUCCEEDED, {"card": "4111"})
    name = get_settings().name
    stored = [*JobStep.objects.filter(job_id=job_id).exclude(result_package=None).values_list("result_package", flat=True),
              *JobSignal.objects.filter(job_id=job_id).values_list("payload_package", flat=True)]
    assert len(stored) == 2  # the wait's payload and the signal
    assert all(isinstance(verify_result(p, name, decrypt=False), Sealed) for p in stored)
    plain = async_task(f"{TASKS}.approval")
    send_signal(plain, "approved", {"card": "4111"})
    (package,) = JobSignal.objects.filter(job_id=plain).values_list("payload_package", flat=True)
    assert verify_result(package, name, decrypt=False) == {"card": "4111"}
