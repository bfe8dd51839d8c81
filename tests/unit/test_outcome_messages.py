"""Outcomes travel to the monitor without the task's arguments, with everything recording reads."""

import pickle

from django_taskmq.runtime import execution as ex
from django_taskmq.brokers.base import Reservation
from django_taskmq.cluster.messages import (FAILED, SUCCEEDED, SUSPENDED, dump_outcome, outcome_frame,
                                            read_outcome_frame)
from django_taskmq.envelope import Envelope

OPTIONS = {"timeout": 5, "hook": "tests.tasks.noop", "chain": [("tests.tasks.noop", (1,), {}, {})],
           "retry": {"max_attempts": 3}}


def test_the_arguments_stay_behind_the_function_and_options_travel():
    envelope = Envelope(func="tests.tasks.echo", args=("x" * 100_000,), kwargs={"k": [1, 2]}, options=OPTIONS)
    outcome = ex.Outcome(Reservation("job1", "default", 0, 1, 0, "token"), envelope, ex.SUCCESS, result="r",
                         started_at=1.0, finished_at=2.0)

    data = dump_outcome(outcome)

    loaded = pickle.loads(data)
    assert loaded.envelope == Envelope(func="tests.tasks.echo", options=OPTIONS)
    assert loaded._replace(envelope=envelope) == outcome
    assert len(data) < 2_000
    status, job_id, framed = read_outcome_frame(outcome_frame(outcome))
    assert (status, job_id, pickle.loads(framed).envelope.args) == (b"S", "job1", ())


def test_an_outcome_without_an_envelope_is_pickled_as_it_is():
    outcome = ex.Outcome(Reservation("job2", "default", 0, 1, 0, "token"), None, ex.CRASH, error="gone")
    assert pickle.loads(dump_outcome(outcome)) == outcome


def test_a_suspension_travels_with_its_wake_time_as_neither_a_success_nor_a_failure():
    outcome = ex.Outcome(Reservation("job3", "default", 0, 1, 0, "token"), None, ex.SUSPEND, (1234.5, "approved"))
    status, job_id, framed = read_outcome_frame(outcome_frame(outcome))
    assert (status, job_id, pickle.loads(framed).result) == (SUSPENDED, "job3", (1234.5, "approved"))
    assert SUSPENDED not in (SUCCEEDED, FAILED)
