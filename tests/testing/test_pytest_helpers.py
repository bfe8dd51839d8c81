"""django_taskmq.testing as a project's pytest suite uses it: the ``taskmq_jobs`` fixture (the
pytest11 plugin), assert_enqueued / refute_enqueued, and drain() running what a view enqueued."""

from __future__ import annotations

import pytest

from django_taskmq import async_task
from django_taskmq.models import DeadLetter, Job, State
from django_taskmq.testing import all_enqueued, assert_enqueued, capture_jobs, drain, refute_enqueued
from tests.testing import tasks_project

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.testing.urls")]


@pytest.fixture(autouse=True)
def _clean():
    tasks_project.HOOKED.clear()
    tasks_project.SIGNALLED.clear()


def test_a_view_enqueues_and_drain_runs_it(client, taskmq_jobs):
    assert client.get("/signup/", {"email": "ada@example.com"}).status_code == 200
    (welcome,) = taskmq_jobs.assert_enqueued(tasks_project.send_welcome, args=["ada@example.com"], queue="emails",
                                             priority=5, count=1)
    taskmq_jobs.refute_enqueued(tasks_project.charge)
    assert welcome.state == State.QUEUED and welcome.kwargs == {}
    ran = taskmq_jobs.drain()
    assert [(j.func, j.state) for j in ran] == [("tests.testing.tasks_project.send_welcome", State.SUCCEEDED)]
    assert Job.objects.get(pk=welcome.id).result == "welcome sent to ada@example.com"
    assert drain() == []  # nothing left


def test_a_workflow_runs_in_dependency_order(client, taskmq_jobs):
    client.get("/signup/", {"email": "bob@example.com", "order": 7})
    taskmq_jobs.assert_enqueued("tests.testing.tasks_project.charge", args=[7])
    taskmq_jobs.assert_enqueued("tests.testing.tasks_project.ship", args=(7,))
    assert len(taskmq_jobs) == 3
    ran = drain()
    funcs = [j.func.rsplit(".", 1)[1] for j in ran]
    assert funcs.index("charge") < funcs.index("ship") and sorted(funcs) == ["charge", "send_welcome", "ship"]
    assert {j.state for j in ran} == {State.SUCCEEDED}
    assert tasks_project.HOOKED == ["tests.testing.tasks_project.ship:SUCCEEDED"]


def test_a_failing_task_is_retried_without_waiting_and_dies_into_the_dead_letter_queue(client):
    client.get("/signup/", {"email": "eve@example.com", "order": 3, "broken": "1"})
    ran = drain(queue="default")
    broken = [j for j in ran if j.func.endswith(".broken")]
    assert len(broken) == 3 and broken[-1].state == State.DEAD  # its three deliveries, its backoff skipped
    letter = DeadLetter.objects.get(job_id=broken[0].id)
    assert "payment service is down" in letter.error
    assert tasks_project.HOOKED.count("tests.testing.tasks_project.broken:DEAD") == 1
    assert tasks_project.SIGNALLED.count(("tests.testing.tasks_project.broken", "failure")) == 3
    # The emails queue was not drained.
    assert_enqueued(tasks_project.send_welcome, args=["eve@example.com"], count=1)
    assert [j.state for j in all_enqueued(tasks_project.send_welcome)] == [State.QUEUED]


def test_the_assertions_say_what_was_enqueued():
    async_task(tasks_project.charge, 1)
    with pytest.raises(AssertionError, match=r"expected at least one job tests\.testing\.tasks_project\.charge"
                                             r"\(args=\[2\]\), found 0; enqueued:\n  tests\.testing\.tasks_project"
                                             r"\.charge\(args=\[1\], kwargs=\{\}\) queue='default'"):
        assert_enqueued(tasks_project.charge, args=[2])
    with pytest.raises(AssertionError, match=r"expected 2 job\(s\)"):
        assert_enqueued(tasks_project.charge, count=2)
    with pytest.raises(AssertionError, match="expected no job any task"):
        refute_enqueued()
    refute_enqueued(tasks_project.charge, args=[2])


def test_capture_jobs_sees_only_its_block():
    async_task(tasks_project.charge, 1)
    with capture_jobs() as jobs:
        async_task(tasks_project.charge, 2)
    async_task(tasks_project.charge, 3)
    assert [j.args for j in jobs] == [(2,)]
    jobs.refute_enqueued(tasks_project.charge, args=[1])
    assert [j.args for j in all_enqueued(tasks_project.charge)] == [(1,), (2,), (3,)]


def test_drain_leaves_delayed_jobs_unless_asked(taskmq_jobs):
    later = async_task(tasks_project.charge, 5, delay=3600)
    assert drain() == []
    (ran,) = drain(with_scheduled=True)
    assert (ran.id, ran.state) == (later, State.SUCCEEDED)


def test_a_deferred_job_ran_once_and_waits_for_its_time():
    deferred = async_task("tests.tasks.defer", 3600)
    (ran,) = drain()
    assert (ran.id, ran.state) == (deferred, State.QUEUED)
    assert drain() == []
