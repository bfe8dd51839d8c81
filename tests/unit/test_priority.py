"""Tests of priority validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.exceptions import ConfigError
from django_taskmq.policy.priority import MAX_PRIORITY, MIN_PRIORITY, Priority, validate_priority


def test_named_priorities():
    assert {p.name: p.value for p in Priority} == {"LOW": -5, "NORMAL": 0, "HIGH": 5, "CRITICAL": 9}
    assert (MIN_PRIORITY, MAX_PRIORITY) == (-9, 9)
    assert Priority.CRITICAL > Priority.HIGH > Priority.NORMAL > Priority.LOW


@pytest.mark.parametrize("value", [-9, -1, 0, 1, 9, *Priority])
def test_valid(value):
    result = validate_priority(value, ConfigError)
    assert result == value
    assert type(result) is int


@pytest.mark.parametrize(
    "value",
    [True, False, 1.0, 0.5, 10, -10, 100, "5", None, 5 + 0j, [1]],
    ids=repr,
)
def test_invalid_is_a_config_error(value):
    with pytest.raises(ConfigError, match="priority"):
        validate_priority(value, error=ConfigError)


def test_default_error_is_value_error():
    with pytest.raises(ValueError, match="outside"):
        validate_priority(10)
    with pytest.raises(ValueError, match="integer"):
        validate_priority(True)


@given(st.integers())
def test_never_clamped(value):
    if MIN_PRIORITY <= value <= MAX_PRIORITY:
        assert validate_priority(value, ConfigError) == value
    else:
        with pytest.raises(ConfigError):
            validate_priority(value, ConfigError)
