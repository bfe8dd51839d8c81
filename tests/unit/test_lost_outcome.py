"""``execution.lost``: the outcome of a task stopped from outside (a timeout, a dead worker, an
exception a worker thread caught around the task). Its text is storable whatever the exception:
a message that cannot be read or is huge does not break the recording of the job (nor of others
recorded with it)."""

from __future__ import annotations

from django_taskmq.runtime import execution as ex
from django_taskmq.brokers.base import Reservation
from django_taskmq.exceptions import TaskTimeout
from django_taskmq.policy.storable import ERROR_LIMIT, TRACEBACK_LIMIT

RESERVATION = Reservation("job", "default", 0, 1, 0, "token", "owner", 5)


class Unreadable(BaseException):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_the_error_reads_kind_colon_message():
    outcome = ex.lost(RESERVATION, None, ex.TIMEOUT, TaskTimeout("ran past its timeout of 5s"))
    assert (outcome.status, outcome.error) == (ex.TIMEOUT, "TaskTimeout: ran past its timeout of 5s")
    assert outcome.started_at <= outcome.finished_at


def test_an_unreadable_message_and_a_huge_one_give_storable_text():
    unreadable = ex.lost(RESERVATION, None, ex.FAILURE, Unreadable())
    assert unreadable.error == "Unreadable: <the exception's message could not be read>"
    huge = ex.lost(RESERVATION, None, ex.FAILURE, GeneratorExit("x" * (ERROR_LIMIT * 3)),
                   traceback="y" * (TRACEBACK_LIMIT * 3))
    assert huge.error.startswith("GeneratorExit: xxx") and len(huge.error) <= ERROR_LIMIT
    assert len(huge.traceback) <= TRACEBACK_LIMIT
