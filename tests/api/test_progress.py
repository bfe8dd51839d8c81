"""Progress reports: checked values, fenced writes, and a report of an earlier delivery hidden."""

from __future__ import annotations

import time

import pytest

from django_taskmq import ConfigError, async_task, fetch
from django_taskmq.runtime import progress
from django_taskmq.policy.progress import MESSAGE_LIMIT, report


def wait_written() -> None:
    writer = progress.writer()
    deadline = time.monotonic() + 30
    while not writer.idle():
        assert time.monotonic() < deadline, "the progress writer did not finish"
        time.sleep(0.01)


@pytest.mark.parametrize("done, total, message", [(-1, None, ""), (True, None, ""), (1, float("nan"), ""),
                                                  ("3", None, ""), (1, 2, 3)])
def test_bad_values_are_config_errors(done, total, message):
    with pytest.raises(ConfigError, match="set_progress"):
        report(done, total, message)


def test_a_long_message_is_clipped():
    assert len(report(1, None, "x" * 1000)["message"]) == MESSAGE_LIMIT


def test_only_the_delivery_holding_the_lease_writes(broker, transactional_db):
    job = async_task("tests.tasks.noop")
    first = broker.reserve_job(job, 30, owner="test")
    progress.set_progress(first, 3, 4, "three")
    wait_written()
    assert {k: v for k, v in fetch(job).progress.items() if k != "updated_at"} == \
        {"done": 3, "total": 4, "message": "three"}

    progress.set_progress(first._replace(token="someone-else"), 4, 4, "forged")
    wait_written()
    assert fetch(job).progress["done"] == 3

    # The delivery fails; the next one has reported nothing yet.
    broker.settle(first, delay=0, error="boom")
    second = broker.reserve_job(job, 30, owner="test")
    assert second is not None and second.deliveries == 2
    assert fetch(job).progress is None
    progress.set_progress(first, 4, 4, "late")  # the first delivery's lease is gone: nothing changes
    wait_written()
    assert fetch(job).progress is None


def test_current_job_is_the_plain_id_outside_the_worker():
    from django_taskmq.brokers.base import Reservation
    import pickle

    job = progress.CurrentJob(Reservation("j1", "default", 0, 1, 0, "t"))
    assert job == "j1" and isinstance(job, str)
    assert type(pickle.loads(pickle.dumps(job))) is str
