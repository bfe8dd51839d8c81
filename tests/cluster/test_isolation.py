"""A running cluster keeps one job's trouble to that job: unstorable error text, an oversized
result, a function that no longer imports."""

from __future__ import annotations

import collections

import pytest

from django_taskmq import async_task
from django_taskmq.models import DeadLetter, Job

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_one_unstorable_outcome_among_healthy_jobs_touches_none_of_them(cluster):
    """A failure with a NUL and a lone surrogate between 30 healthy jobs: all 30 succeed exactly
    once, and the failing job's own error is readable."""
    cluster.configure(max_result_size=1024 * 1024, max_package_size=None)
    healthy = [async_task("tests.tasks.record_run", f"ok{i}") for i in range(15)]
    bad = async_task("tests.tasks.fail_with_unstorable_text", max_deliveries=2)
    big = async_task("tests.tasks.echo", "y" * 5_000_000)
    healthy += [async_task("tests.tasks.record_run", f"ok{i}") for i in range(15, 30)]

    cluster.burst("-w", "2")

    runs = collections.Counter(job_id for job_id, _ in cluster.log())
    assert runs == {job_id: 1 for job_id in healthy}
    states = dict(Job.objects.values_list("id", "state"))
    assert [states[j] for j in healthy] == ["SUCCEEDED"] * 30
    job = Job.objects.get(pk=bad)
    assert (job.state, job.deliveries, job.attempt) == ("DEAD", 2, 2)
    assert job.error == "ValueError: cannot open report-\\udcff.csv (NUL above)"
    assert DeadLetter.objects.get(job_id=bad).error == job.error
    job = Job.objects.get(pk=big)
    assert (job.state, job.deliveries, job.result_package) == ("DEAD", 1, None)
    assert "above TASKMQ['max_result_size'] = 1048576" in job.error


def test_a_function_missing_in_the_workers_dead_letters_at_once(cluster):
    """Enqueued by a process that has it, run by workers that do not: one delivery, 'cannot import'."""
    import tests.tasks as module

    def only_here():
        return None

    only_here.__qualname__ = "only_here"
    module.only_here = only_here
    try:
        job_id = async_task("tests.tasks.only_here")
    finally:
        del module.only_here
    ok = async_task("tests.tasks.record_run", "fine")

    cluster.burst("-w", "1")

    job = Job.objects.get(pk=job_id)
    assert (job.state, job.deliveries) == ("DEAD", 1)
    assert job.error.startswith("cannot import tests.tasks.only_here:")
    assert Job.objects.get(pk=ok).state == "SUCCEEDED"


def test_a_task_that_makes_its_arguments_unpicklable_still_succeeds(cluster):
    """The outcome goes to the monitor without the task's arguments (recording needs none), so a
    task that appends a lock to its list argument is recorded as the success it was."""
    jobs = [async_task("tests.tasks.grow_unpicklable", [1, 2, i]) for i in range(3)]

    cluster.burst("-w", "2")

    assert [Job.objects.get(pk=j).state for j in jobs] == ["SUCCEEDED"] * 3
    assert [Job.objects.get(pk=j).result for j in jobs] == [4, 4, 4]
