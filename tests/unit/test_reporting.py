"""Error reporting's pure parts: the state a failure leads to, and the guard around a reporter."""

from __future__ import annotations

import threading

from hypothesis import given, strategies as st

from django_taskmq.contrib.sentry import context, tags, without_local_variables
from django_taskmq.policy.states import used_up
from django_taskmq.observability.reporting import DEAD, FAILED, RETRYING, FailedJob, expected_state, guarded


@given(st.integers(1, 50), st.integers(1, 50), st.booleans())
def test_expected_state_follows_the_poison_guard(deliveries, max_deliveries, acks):
    state = expected_state(deliveries, max_deliveries, acks)
    if acks:
        assert state == FAILED
    else:
        assert state == (DEAD if used_up(deliveries, max_deliveries) else RETRYING)


@given(st.integers(1, 50), st.integers(1, 50), st.booleans())
def test_a_failure_that_is_not_retried_is_dead(deliveries, max_deliveries, acks):
    assert expected_state(deliveries, max_deliveries, acks, retried=False) == DEAD


def test_guarded_swallows_what_the_call_raises(caplog):
    def boom():
        raise SystemExit(3)

    assert guarded(boom, "reporter", 5) is False
    assert "reporter raised SystemExit" in caplog.text


def test_guarded_leaves_a_hung_call_behind(caplog):
    release = threading.Event()
    try:
        assert guarded(release.wait, "reporter", 0.05) is False
        assert "still runs" in caplog.text
    finally:
        release.set()


def test_guarded_returns_true_when_the_call_returned():
    calls = []
    assert guarded(lambda: calls.append(1), "reporter", 5) is True
    assert calls == [1]


JOB = FailedJob(id="j1", task="app.tasks.charge", queue="mail", priority=5, attempt=3, max_deliveries=3,
                state=DEAD, cluster="c", args=("secret",), kwargs={"card": "secret"})


def test_sentry_tags_and_context_leave_arguments_out_unless_asked():
    assert tags(JOB) == {"taskmq.task": "app.tasks.charge", "taskmq.queue": "mail", "taskmq.priority": "5",
                         "taskmq.attempt": "3", "taskmq.job_id": "j1", "taskmq.state": "DEAD"}
    assert "secret" not in repr(context(JOB))
    assert context(JOB, send_arguments=True)["kwargs"] == {"card": "secret"}
    assert JOB.final and JOB.dead


def test_local_variables_are_dropped_from_every_frame():
    event = {"exception": {"values": [{"stacktrace": {"frames": [{"function": "f", "vars": {"card": "x"}},
                                                                  {"function": "g"}]}}]}}
    assert without_local_variables(event)["exception"]["values"][0]["stacktrace"]["frames"] == \
        [{"function": "f"}, {"function": "g"}]
