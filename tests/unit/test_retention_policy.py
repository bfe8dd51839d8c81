"""policy/retention: the defaults, partial settings merged over them, and the cut-off times."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from django_taskmq.conf import from_mapping
from django_taskmq.exceptions import ConfigError
from django_taskmq.policy import retention
from django_taskmq.policy.states import JobState

seconds = st.one_of(st.none(), st.floats(min_value=1, max_value=1e9, allow_nan=False))
settings = st.dictionaries(st.sampled_from(list(retention.STATES)), seconds)


@given(settings, st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_cutoffs_are_now_minus_the_retention_of_each_kept_state(given_settings, now):
    merged = retention.merged(given_settings)
    assert set(merged) == set(retention.STATES)
    cut = retention.cutoffs(merged, now)
    for key, state in retention.STATES.items():
        if merged[key] is None:
            assert state not in cut  # kept for ever
        else:
            assert cut[state] == now - merged[key] and cut[state] < now
    assert set(cut) <= JobState.FINAL


def test_every_final_state_has_a_bounded_default():
    assert {retention.STATES[k] for k in retention.DEFAULTS} == JobState.FINAL
    assert all(v is not None and 0 < v <= 30 * retention.DAY for v in retention.DEFAULTS.values())


def test_the_setting_merges_over_the_defaults_and_names_what_is_wrong():
    assert from_mapping({"retention": {"dead": None}}).retention == {**retention.DEFAULTS, "dead": None}
    for bad, message in [({"dead": 0}, "['retention']['dead'] must be a number of seconds > 0"),
                         ({"dead": "1d"}, "['retention']['dead']"), ({"gone": 5}, "unknown key"),
                         ([1], "must be a dict")]:
        with pytest.raises(ConfigError, match=r"^TASKMQ\['retention'\]") as info:
            from_mapping({"retention": bad})
        assert message in str(info.value)


@given(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False, allow_subnormal=False), min_size=1, max_size=50))
def test_a_step_then_its_pause_spends_the_share_of_the_time_on_deleting(steps):
    """Whatever each step takes, deleting takes ``SHARE`` of the time its steps and pauses fill."""
    pauses = [retention.pause_after(spent) for spent in steps]
    assert all(p >= 0 for p in pauses)
    if sum(steps) > 0:
        assert sum(steps) / (sum(steps) + sum(pauses)) == pytest.approx(retention.SHARE)


@given(st.integers(min_value=1, max_value=5000), st.floats(min_value=0, max_value=10, allow_nan=False))
def test_the_next_batch_grows_while_batches_are_short_and_halves_when_one_is_long(size, spent):
    smallest, largest = retention.BATCHES
    after = retention.next_batch(size, spent)
    assert smallest <= after <= largest
    if spent < retention.STRETCH:
        assert after >= min(max(size, smallest), largest) and (after > size or after == largest)
    else:
        assert after <= max(size // 2, smallest)


def test_batches_reach_the_largest_on_a_quiet_database_and_the_smallest_on_a_loaded_one():
    size, sizes = retention.BATCHES[0], []
    for _ in range(30):
        size = retention.next_batch(size, retention.STRETCH / 2)
        sizes.append(size)
    assert sizes == sorted(sizes) and sizes[-1] == retention.BATCHES[1]
    for _ in range(10):
        size = retention.next_batch(size, retention.STRETCH * 2)
    assert size == retention.BATCHES[0]
