"""Durable Django tasks: ``@durable`` above Django's ``@task`` (``django.tasks`` on Django 6.x, the
``django-tasks`` backport on 5.2), run in the test process (sync mode, ``drain()`` and the test clock)
and on a real ``qcluster`` across a SIGKILL of its worker, a sleep and a wait for a signal."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import cluster  # noqa: F401 (the fixture, for the cluster test below)
from tests.django6.djtasks import InvalidTask, TaskResultStatus, default_task_backend, task
from tests.tasks import read_run_log

from django_taskmq import ConfigError, durable, send_signal  # noqa: E402
from django_taskmq.backends.tasks import to_taskmq  # noqa: E402
from django_taskmq.models import Job, JobStep, State  # noqa: E402
from django_taskmq.testing import drain, frozen_clock  # noqa: E402

HOUR = 3600


def steps(run_log, job_id: str) -> list[str]:
    return [tag for j, tag in read_run_log(run_log) if j == job_id]


@pytest.mark.django_db
def test_a_durable_django_task_sleeps_by_the_test_clock_waits_and_ends_with_its_steps_run_once(run_log):
    from tests.django6 import tasks_durable as t

    with frozen_clock() as clock:
        result = t.fulfil.enqueue(5, sleep=HOUR)
        job = Job.objects.get(pk=result.id)
        # @durable's option, Django's priority and queue: one job.
        assert (job.max_deliveries, job.priority, job.queue) == (4, to_taskmq(20), "default")
        drain()
        assert Job.objects.get(pk=result.id).state == State.SUSPENDED
        assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY  # asleep: not finished
        clock.advance(HOUR)
        drain()
        assert JobStep.objects.get(job_id=result.id, kind="wait").done is False  # waits for "approved"
        assert send_signal(result.id, "approved", {"by": "ann"}) is True
        drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"charge": {"id": 50}, "shipped": "shipped 5 by ann"}
    assert result.args == [5] and result.kwargs == {"sleep": HOUR}
    assert steps(run_log, result.id) == ["step:charge 5", "step:ship 5"]


@pytest.mark.django_db
def test_in_sync_mode_the_sleep_is_skipped_and_the_signal_runs_it_on_inline(settings, run_log):
    from tests.django6 import tasks_durable as t

    settings.TASKMQ = {**settings.TASKMQ, "sync": True}
    result = t.fulfil.enqueue(6)
    assert result.status == TaskResultStatus.READY  # ran to its wait
    assert send_signal(result.id, "approved", {"by": "bob"}) is True
    result.refresh()
    assert (result.status, result.return_value["shipped"]) == (TaskResultStatus.SUCCESSFUL, "shipped 6 by bob")
    assert steps(run_log, result.id) == ["step:charge 6", "step:ship 6"]


@pytest.mark.django_db
def test_a_wait_of_a_durable_django_task_times_out_by_the_test_clock(run_log):
    from tests.django6 import tasks_durable as t

    with frozen_clock() as clock:
        result = t.waits_with_timeout.enqueue(60)
        drain()
        clock.advance(60)
        drain()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, None)


def _plain(ctx, x):
    return x


def test_durable_refuses_django_tasks_it_cannot_run():
    with pytest.raises(InvalidTask, match="put @durable above @task"):
        task(durable(_plain))
    with pytest.raises(ConfigError, match="takes_context=True"):
        durable(task(takes_context=True)(_context_first))
    with pytest.raises(ConfigError, match="coroutine function"):
        durable(task(_coroutine))
    with pytest.raises(ConfigError, match="set by Django's @task"):
        durable(queue="other")(task(_plain))
    with pytest.raises(ConfigError, match="max_delivery"):
        durable(max_delivery=3)(task(_plain))
    with pytest.raises(ConfigError, match="name= is not for Django tasks"):
        durable(name="x")(task(_plain))


def _context_first(context, x):
    return x


async def _coroutine(ctx):
    return 1


@pytest.mark.cluster
@pytest.mark.django_db(transaction=True)
def test_on_a_cluster_steps_run_once_across_a_sigkill_and_the_worker_runs_other_work_while_it_sleeps(
        cluster, tmp_path):  # noqa: F811
    from tests.django6 import tasks_django, tasks_durable as t

    result = t.fulfil.enqueue(1, sleep=4, marker=str(tmp_path / "killed-once"))
    qc = cluster.start("-w", "1")

    def asleep() -> bool:
        return JobStep.objects.filter(job_id=result.id, kind="sleep", done=False).exists() and (
            Job.objects.get(pk=result.id).lease_owner is None)

    cluster.wait_until(asleep, "the task to sleep", alive=[qc])
    other = tasks_django.multiply.enqueue(6, 7)  # the only worker is free while it sleeps
    cluster.wait_final([other.id], alive=[qc])
    assert JobStep.objects.get(job_id=result.id, kind="sleep").done is False  # ran during the sleep
    cluster.wait_until(lambda: JobStep.objects.filter(job_id=result.id, kind="wait", done=False).exists()
                       and Job.objects.get(pk=result.id).state == State.SUSPENDED, "the task to wait", alive=[qc])
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
    assert send_signal(result.id, "approved", {"by": "ann"}) is True
    cluster.wait_final([result.id], alive=[qc])

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"charge": {"id": 10}, "shipped": "shipped 1 by ann"}
    # The killed step started twice and finished once; the others ran once, across the kill and the sleep.
    assert steps(cluster.run_log, result.id) == ["step:charge 1", "start:kill", "start:kill", "step:kill",
                                                 "step:ship 1"]
    job = Job.objects.get(pk=result.id)
    assert job.deliveries == 2  # the killed run and the last; the sleep and the wait counted none
    assert other.refresh() is None and other.return_value == 42
