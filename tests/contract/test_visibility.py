"""Visibility: ``delay`` and ``eta`` hide a message until its time; an ``expires_at`` in the past
means it is never reserved and its job ends EXPIRED.

Every test runs on each broker (``broker`` is parametrised, see conftest.py).
"""

from __future__ import annotations

import datetime
import time

import pytest

from django_taskmq import ConfigError
from django_taskmq.policy.states import JobState
from tests.contract.helpers import job, put, states

LONG = 300
WAIT = 0.3


def reserve(broker):
    return [r.job_id for r in broker.reserve(["default"], limit=10, lease=LONG, owner="t")]


def aware(seconds_from_now: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)


def test_delay_hides_a_job_while_others_are_reserved(broker):
    """A job delayed by an hour stays QUEUED and invisible; a job without delay is reserved."""
    job_id = put(broker, delay=3600)
    now_id = put(broker)
    assert reserve(broker) == [now_id]
    assert job(broker, job_id).state == JobState.QUEUED
    (row,) = broker.stats()
    assert (row["ready"], row["delayed"], row["reserved"]) == (0, 1, 1)


def test_delayed_job_is_reserved_once_its_time_came(broker):
    """After the delay passed the job is reserved."""
    job_id = put(broker, delay=WAIT)
    time.sleep(WAIT + 0.1)
    assert reserve(broker) == [job_id]


@pytest.mark.parametrize("eta", [lambda: aware(3600), lambda: time.time() + 3600], ids=["datetime", "epoch"])
def test_eta_in_the_future_hides_a_job(broker, eta):
    """An eta (aware datetime or epoch seconds) an hour ahead hides the job."""
    job_id = put(broker, eta=eta())
    assert reserve(broker) == []
    j = job(broker, job_id)
    assert j.state == JobState.QUEUED and j.visible_at > time.time() + 3000


@pytest.mark.parametrize("eta", [lambda: aware(WAIT), lambda: time.time() + WAIT], ids=["datetime", "epoch"])
def test_job_is_reserved_once_its_eta_came(broker, eta):
    """When the eta passed the job is reserved."""
    job_id = put(broker, eta=eta())
    time.sleep(WAIT + 0.1)
    assert reserve(broker) == [job_id]


def test_eta_in_the_past_is_ready_at_once(broker):
    """An eta already passed makes the job ready now."""
    job_id = put(broker, eta=aware(-60))
    assert reserve(broker) == [job_id]


def test_expires_at_in_the_past_at_enqueue_never_runs(broker):
    """A job whose expires_at has passed at enqueue is EXPIRED and never reserved."""
    expired = put(broker, expires_at=aware(-1))
    epoch_expired = put(broker, expires_at=time.time() - 1)
    assert reserve(broker) == []
    assert states(broker, [expired, epoch_expired]) == {expired: JobState.EXPIRED, epoch_expired: JobState.EXPIRED}
    assert broker.has_ready(["default"]) is False


def test_job_that_expires_while_queued_is_never_reserved(broker):
    """A job that expires while waiting is marked EXPIRED by the next reserve, not returned."""
    job_id = put(broker, expires_at=time.time() + WAIT)
    behind = put(broker)
    time.sleep(WAIT + 0.1)
    assert reserve(broker) == [behind]
    j = job(broker, job_id)
    assert (j.state, j.deliveries) == (JobState.EXPIRED, 0)
    assert reserve(broker) == []


@pytest.mark.parametrize("option", ["delay", "eta"])
def test_expiry_before_the_job_becomes_visible_is_refused_at_the_call(broker, option):
    """delay or eta beyond expires_at: the job could never run, so the call raises and stores nothing."""
    visible = {"delay": WAIT} if option == "delay" else {"eta": time.time() + WAIT}
    with pytest.raises(ConfigError, match="expire before it could run"):
        put(broker, expires_at=time.time() + WAIT / 2, **visible)
    assert broker.stats() == []


def test_unexpired_job_runs_normally(broker):
    """expires_at in the future does not hide the job."""
    job_id = put(broker, expires_at=aware(3600))
    assert reserve(broker) == [job_id]
