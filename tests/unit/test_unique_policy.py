"""Coalescing keys' pure rules (policy/unique.py), by property: what unique_for accepts, what a
key row's stored states say, and that every refusal is the caller's error type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.exceptions import ConfigError
from django_taskmq.policy.states import JobState
from django_taskmq.policy.unique import DEFAULT_FOR, HOLDABLE, Unique, parse_states, parse_unique

holdable = st.sampled_from(sorted(HOLDABLE))
any_state = st.sampled_from(list(JobState))
keys = st.text(min_size=1, max_size=255)


def spelled(state: JobState, case: str) -> str:
    return {"lower": state.value.lower(), "upper": state.value, "title": state.value.title()}[case]


@given(st.lists(st.tuples(holdable, st.sampled_from(["lower", "upper", "title"])), min_size=1))
def test_any_spelling_of_the_holdable_states_parses_to_those_states(names):
    parsed = parse_states([spelled(state, case) for state, case in names], ConfigError)
    assert parsed == {state for state, _ in names}


@given(st.lists(any_state, min_size=1))
def test_a_final_state_among_them_is_refused(states):
    names = [s.value.lower() for s in states]
    if set(states) <= HOLDABLE:
        assert parse_states(names, ConfigError) == set(states)
    else:
        with pytest.raises(ConfigError, match="unique_for may name only"):
            parse_states(names, ConfigError)


@given(keys, st.frozensets(holdable, min_size=1), any_state)
def test_a_key_holds_exactly_in_its_stored_states(key, states, state):
    unique = Unique(key, states)
    stored = unique.column  # what the key table keeps
    assert stored == ",".join(sorted(stored.split(",")))
    assert unique.holds(state, stored) == (state in states)
    assert unique.holds(state) == (state in states)
    # Another call's states never decide for a key stored by the first one.
    assert Unique(key).holds(state, stored) == (state in states)


@given(keys, st.booleans())
def test_a_key_without_unique_for_holds_before_running(key, replace):
    unique = parse_unique(key, None, replace, ConfigError)
    assert unique == Unique(key, DEFAULT_FOR, replace)
    assert DEFAULT_FOR == JobState.READY and JobState.RUNNING not in DEFAULT_FOR


@given(st.one_of(st.just(""), st.text(min_size=256, max_size=300), st.integers(), st.binary(min_size=1)))
def test_a_key_that_is_not_a_short_string_is_refused(key):
    with pytest.raises(ConfigError, match="unique_key must be a string"):
        parse_unique(key, None, None, ConfigError)


@given(st.one_of(st.just(("queued",)), st.none()), st.one_of(st.just(True), st.none()))
def test_options_without_a_key_are_refused_unless_both_are_absent(states, replace):
    if states is None and replace is None:
        assert parse_unique(None, states, replace, ConfigError) is None
    else:
        with pytest.raises(ConfigError, match="need a unique_key"):
            parse_unique(None, states, replace, ConfigError)
