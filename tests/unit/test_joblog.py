"""Log records about jobs: the level of each outcome, and the filter that gives a task's own records
its job's fields."""

from __future__ import annotations

import logging

from django_taskmq.observability import joblog
from django_taskmq.brokers.base import Reservation
from django_taskmq.envelope import Envelope
from django_taskmq.runtime import context

R = Reservation("j1", "mail", 5, 2, 0, "token", "tests:host:1:ab", 5)


def test_levels_say_how_bad_an_outcome_is():
    assert joblog._level("success", "SUCCEEDED") == logging.DEBUG
    assert joblog._level("retry", "RETRYING") == logging.INFO  # the task asked for it
    assert joblog._level("failure", "RETRYING") == logging.WARNING
    assert joblog._level("timeout", "DEAD") == logging.ERROR
    assert joblog._level("failure", "FAILED") == logging.ERROR


def test_fields_of_a_delivery():
    assert joblog.fields(R, "app.send") == {"job_id": "j1", "task": "app.send", "queue": "mail", "priority": 5,
                                            "attempt": 2, "cluster": "tests:host:1:ab"}


def test_the_filter_adds_the_running_job_and_keeps_what_a_record_carries():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    record.queue = "given"
    token = context.enter(reservation=R, envelope=Envelope(func="app.send"))
    try:
        assert joblog.JobFields().filter(record) is True
    finally:
        context.leave(token)
    assert (record.job_id, record.task, record.queue, record.attempt) == ("j1", "app.send", "given", 2)
    outside = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    assert joblog.JobFields().filter(outside) is True and not hasattr(outside, "job_id")
