"""The test clock of django_taskmq.testing: durable tasks run in the test process (drain(), sync mode)
sleep and time out by a clock the test advances, and signals sent from the test (or a view it calls)
wake them under capture_jobs()/drain()."""

from __future__ import annotations

import datetime

import pytest
from django.test import TestCase, override_settings

from django_taskmq import ConfigError, send_signal
from django_taskmq.models import Job, JobStep, State
from django_taskmq.testing import TaskMQTestMixin, capture_jobs, drain, frozen_clock
from tests.testing import tasks_project

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.testing.urls")]
DAY = 86400


@pytest.fixture(autouse=True)
def _clean():
    tasks_project.STEPS.clear()


def state(job_id: str) -> str:
    return Job.objects.get(pk=job_id).state


def test_a_sleep_holds_until_the_clock_passes_it_then_a_signal_from_a_view_ships(client):
    with frozen_clock() as clock, capture_jobs() as jobs:
        job_id = tasks_project.fulfil.delay(7)
        assert [j.id for j in drain()] == [job_id]
        assert tasks_project.STEPS == ["charge 7"] and state(job_id) == State.SUSPENDED  # asleep
        clock.advance(DAY - 1)
        assert drain() == [] and state(job_id) == State.SUSPENDED  # a second short of its wake time
        clock.advance(1)
        assert [j.id for j in drain()] == [job_id]  # woke, and now waits for "approved"
        assert JobStep.objects.get(job_id=job_id, kind="wait").done is False
        response = client.post(f"/approve/{job_id}/", {"by": "ann"})
        assert (response.status_code, response.json()) == (200, {"woke": True})
        (ran,) = drain()
    assert (ran.id, ran.state) == (job_id, State.SUCCEEDED)
    assert Job.objects.get(pk=job_id).result == "shipped"
    assert tasks_project.STEPS == ["charge 7", "ship 7 by ann"]  # each step once
    jobs.assert_enqueued(tasks_project.fulfil, args=[7], count=1)


def test_a_wait_times_out_when_the_clock_passes_its_timeout():
    with frozen_clock() as clock:
        job_id = tasks_project.fulfil.delay(8)
        drain()
        clock.advance(datetime.timedelta(days=1))
        drain()
        clock.advance(datetime.timedelta(days=2) - datetime.timedelta(seconds=1))
        assert drain() == [] and state(job_id) == State.SUSPENDED  # still waiting
        clock.advance(1)
        drain()
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result) == (State.SUCCEEDED, "timed out")
    assert tasks_project.STEPS == ["charge 8", "refund 8"]


def test_a_signal_sent_before_the_wait_is_kept_under_the_clock():
    with frozen_clock() as clock:
        job_id = tasks_project.fulfil.delay(9)
        drain()
        assert send_signal(job_id, "approved", {"by": "early"}) is False  # asleep: kept for the wait
        clock.advance(DAY)
        drain()
    assert (state(job_id), tasks_project.STEPS) == (State.SUCCEEDED, ["charge 9", "ship 9 by early"])


def test_without_a_clock_sleeps_are_skipped_and_a_signal_from_the_test_resumes_the_wait():
    job_id = tasks_project.fulfil.delay(10)
    drain()
    assert state(job_id) == State.SUSPENDED and tasks_project.STEPS == ["charge 10"]  # at its wait, slept none
    assert send_signal(job_id, "approved", {"by": "bob"}) is True
    drain()
    assert (state(job_id), tasks_project.STEPS) == (State.SUCCEEDED, ["charge 10", "ship 10 by bob"])
    with pytest.raises(ConfigError, match="has ended"):
        send_signal(job_id, "approved", {"by": "late"})


def test_the_clock_in_sync_mode_and_sleep_until(settings):
    settings.TASKMQ = {**settings.TASKMQ, "sync": True}
    start = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    with frozen_clock(start) as clock:
        assert clock.utc == start
        job_id = tasks_project.fulfil.delay(11)  # sync: runs here, up to its sleep
        assert state(job_id) == State.SUSPENDED and tasks_project.STEPS == ["charge 11"]
        assert JobStep.objects.get(job_id=job_id, kind="sleep").wake_at == start.timestamp() + DAY
        assert clock.advance(DAY) == start.timestamp() + DAY
        drain()  # to the wait
        assert send_signal(job_id, "approved", {"by": "sync"}) is True  # sync mode: runs on here
    assert (state(job_id), tasks_project.STEPS) == (State.SUCCEEDED, ["charge 11", "ship 11 by sync"])


def test_bad_clock_arguments_raise_config_errors():
    with pytest.raises(ConfigError, match="aware datetime"):
        with frozen_clock(datetime.datetime(2030, 1, 1)):
            pass
    with frozen_clock() as clock:
        with pytest.raises(ConfigError, match="do not nest"):
            with frozen_clock():
                pass
        with pytest.raises(ConfigError, match="timedelta"):
            clock.advance(-1)


def test_the_pytest_fixture(taskmq_clock):
    job_id = tasks_project.fulfil.delay(12)
    drain()
    taskmq_clock.advance(DAY)
    drain()
    assert JobStep.objects.get(job_id=job_id, kind="sleep").done is True


class ClockInATestCase(TaskMQTestMixin, TestCase):
    @override_settings(ROOT_URLCONF="tests.testing.urls")
    def test_the_mixin_method(self):
        tasks_project.STEPS.clear()
        with self.frozenClock() as clock:
            job_id = tasks_project.fulfil.delay(13)
            self.drainJobs()
            clock.advance(DAY)
            self.drainJobs()
            self.client.post(f"/approve/{job_id}/", {"by": "case"})
            self.drainJobs()
        self.assertEqual(Job.objects.get(pk=job_id).result, "shipped")
        self.assertEqual(tasks_project.STEPS, ["charge 13", "ship 13 by case"])
