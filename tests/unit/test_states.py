"""Tests of job states and their transitions."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.exceptions import TaskMQError
from django_taskmq.policy.states import TRANSITIONS, Event, InvalidTransition, JobState, transition

S, E = JobState, Event

# Written out independently of the module's table, from the design.
LEGAL = {
    (S.QUEUED, E.RESERVE): S.RUNNING,
    (S.RETRYING, E.RESERVE): S.RUNNING,
    (S.QUEUED, E.EXPIRE): S.EXPIRED,
    (S.RETRYING, E.EXPIRE): S.EXPIRED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.RETRYING, E.CANCEL): S.CANCELLED,
    (S.QUEUED, E.DEAD_LETTER): S.DEAD,
    (S.RETRYING, E.DEAD_LETTER): S.DEAD,
    (S.RUNNING, E.ACK): S.SUCCEEDED,
    (S.RUNNING, E.FAIL_RETRY): S.RETRYING,
    (S.RUNNING, E.FAIL_FINAL): S.FAILED,
    (S.RUNNING, E.DEAD_LETTER): S.DEAD,
    (S.RUNNING, E.DEFER): S.QUEUED,
    (S.RUNNING, E.YIELD): S.QUEUED,
    (S.RUNNING, E.SUSPEND): S.SUSPENDED,
    (S.SUSPENDED, E.WAKE): S.QUEUED,
    (S.SUSPENDED, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.RECLAIM): S.RETRYING,
    (S.RUNNING, E.EXPIRE): S.EXPIRED,
    (S.RUNNING, E.CANCEL_RUNNING): S.CANCELLED,
    (S.DEAD, E.REPLAY): S.QUEUED,
    (S.FAILED, E.REPLAY): S.QUEUED,
    (S.EXPIRED, E.REPLAY): S.QUEUED,
    (S.CANCELLED, E.REPLAY): S.QUEUED,
    # Workflow steps: waiting for their dependencies, then released or cancelled by them; a
    # replay of the step that cancelled one (or of the step itself, still waiting) reopens it.
    (S.WAITING, E.RELEASE): S.QUEUED,
    (S.WAITING, E.CANCEL): S.CANCELLED,
    (S.CANCELLED, E.REOPEN): S.WAITING,
    (S.QUEUED, E.REOPEN): S.WAITING,
}
# The operator's replays: of the job itself, or of the workflow step that cancelled it.
REPLAYS = (E.REPLAY, E.REOPEN)
ILLEGAL = [pair for pair in itertools.product(JobState, Event) if pair not in LEGAL]


def test_values_are_the_names():
    assert [s.value for s in JobState] == [
        "WAITING", "QUEUED", "RUNNING", "RETRYING", "SUSPENDED", "SUCCEEDED", "FAILED", "DEAD", "EXPIRED", "CANCELLED",
    ]
    assert [e.value for e in Event] == [
        "RESERVE", "ACK", "FAIL_RETRY", "FAIL_FINAL", "DEAD_LETTER", "EXPIRE", "CANCEL", "CANCEL_RUNNING",
        "DEFER", "YIELD", "RECLAIM", "RELEASE", "REOPEN", "REPLAY", "SUSPEND", "WAKE",
    ]
    assert all(s == s.name and str(s) == s.name for s in JobState)
    assert all(e == e.name and str(e) == e.name for e in Event)


def test_groups():
    assert JobState.READY == {S.QUEUED, S.RETRYING}
    assert JobState.FINAL == {S.SUCCEEDED, S.FAILED, S.DEAD, S.EXPIRED, S.CANCELLED}
    assert isinstance(JobState.READY, frozenset) and isinstance(JobState.FINAL, frozenset)
    # The groups are not members.
    assert len(JobState) == 10
    # Every state is waiting, ready, running, suspended or final, exactly once.
    assert {S.WAITING} | JobState.READY | {S.RUNNING, S.SUSPENDED} | JobState.FINAL == set(JobState)
    assert not JobState.READY & JobState.FINAL


def test_table_is_the_design():
    assert dict(TRANSITIONS) == LEGAL
    with pytest.raises(TypeError):
        TRANSITIONS[S.SUCCEEDED, E.REPLAY] = S.QUEUED  # type: ignore[index]


@pytest.mark.parametrize("state, event", list(LEGAL))
def test_legal(state, event):
    assert transition(state, event) is LEGAL[state, event]
    # Strings as stored in the database work as well.
    assert transition(state.value, event.value) is LEGAL[state, event]


@pytest.mark.parametrize("state, event", ILLEGAL)
def test_illegal(state, event):
    with pytest.raises(InvalidTransition) as info:
        transition(state, event)
    assert info.value.state is state
    assert info.value.event is event
    assert state.value in str(info.value) and event.value in str(info.value)


def test_invalid_transition_is_a_taskmq_error():
    assert issubclass(InvalidTransition, TaskMQError)


@pytest.mark.parametrize("state, event", [("DONE", "ACK"), ("RUNNING", "FINISH"), (None, None)])
def test_unknown_names(state, event):
    with pytest.raises(InvalidTransition, match="unknown"):
        transition(state, event)


@given(st.sampled_from(sorted(JobState.FINAL)), st.sampled_from(list(Event)))
def test_nothing_leaves_a_final_state_but_replay(state, event):
    if event is E.REPLAY and state is not S.SUCCEEDED:
        assert transition(state, event) is S.QUEUED
    elif event is E.REOPEN and state is S.CANCELLED:
        assert transition(state, event) is S.WAITING
    else:
        with pytest.raises(InvalidTransition):
            transition(state, event)


@given(st.lists(st.sampled_from(list(Event)), max_size=30))
def test_random_walks(events):
    """Follow any event sequence from QUEUED, skipping illegal moves; invariants hold."""
    state = S.QUEUED
    for event in events:
        try:
            new = transition(state, event)
        except InvalidTransition:
            continue
        # Only a reservation starts a run; a run only ends by an event on RUNNING.
        assert (new is S.RUNNING) == (event is E.RESERVE)
        if event is E.RESERVE:
            assert state in JobState.READY
        if state in JobState.FINAL:
            assert event in REPLAYS and new in (S.QUEUED, S.WAITING)
        state = new


CANCELS = (E.CANCEL, E.CANCEL_RUNNING)


@given(st.sampled_from([s for s in JobState if s not in JobState.FINAL]))
def test_every_unfinished_job_can_be_cancelled_and_a_cancel_ends_cancelled(state):
    """cancel() works in every state a job has before it finishes: waiting (CANCEL) or running
    (CANCEL_RUNNING); either way the job ends CANCELLED."""
    legal = [event for event in CANCELS if (state, event) in TRANSITIONS]
    assert len(legal) == 1
    assert transition(state, legal[0]) is S.CANCELLED


@given(st.lists(st.sampled_from(list(Event)), max_size=30))
def test_a_cancelled_job_is_never_retried_or_run_again_without_an_operator(events):
    """Follow any event sequence from QUEUED: once a cancel lands, the job stays CANCELLED for every
    later event except an operator's replay (retry_jobs, or of the workflow step that cancelled it);
    no reservation, retry, release or reclaim moves it."""
    state = S.QUEUED
    cancelled = False
    for event in events:
        try:
            new = transition(state, event)
        except InvalidTransition:
            continue
        if cancelled:
            assert event in REPLAYS and new in (S.QUEUED, S.WAITING)
            cancelled = False
        elif event in CANCELS:
            assert new is S.CANCELLED
            cancelled = True
        state = new
    assert cancelled == (state is S.CANCELLED)
