"""Tests of the Retry policy."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.exceptions import ConfigError
from django_taskmq.policy.backoff import Retry

seconds = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
factors = st.floats(1, 100, allow_nan=False, allow_infinity=False)
fractions = st.floats(0, 1, allow_nan=False)
attempts = st.one_of(st.integers(1, 200), st.integers(1, 10**30))


@st.composite
def policies(draw, backoffs=("exponential", "linear", "fixed"), jitter=None):
    return Retry(
        backoff=draw(st.sampled_from(backoffs)),
        base=draw(seconds),
        factor=draw(factors),
        max_delay=draw(seconds),
        jitter=draw(st.one_of(st.booleans(), fractions)) if jitter is None else jitter,
    )


class TestDelay:
    def test_exponential(self):
        retry = Retry(base=2, factor=3, max_delay=100, jitter=False)
        assert [retry.delay(n) for n in range(1, 6)] == [2, 6, 18, 54, 100]

    def test_linear(self):
        retry = Retry(backoff="linear", base=1.5, max_delay=5, jitter=False)
        assert [retry.delay(n) for n in range(1, 6)] == [1.5, 3, 4.5, 5, 5]

    def test_fixed(self):
        retry = Retry(backoff="fixed", base=7, jitter=False)
        assert [retry.delay(n) for n in (1, 2, 100)] == [7, 7, 7]
        assert Retry(backoff="fixed", base=7, max_delay=3, jitter=False).delay(1) == 3

    def test_defaults(self):
        retry = Retry()
        assert retry.jitter_fraction == 0.1
        assert retry.delay(1, rand=lambda: 0.5) == 1.0
        assert retry.delay(3, rand=lambda: 0.5) == 4.0
        assert retry.delay(100, rand=lambda: 0.5) == 3600.0

    def test_jitter_range(self):
        retry = Retry(base=10, jitter=0.5)
        assert retry.delay(1, rand=lambda: 0.0) == 5.0
        assert retry.delay(1, rand=lambda: 0.5) == 10.0
        assert retry.delay(1, rand=lambda: 0.999999) == pytest.approx(15.0, abs=1e-4)

    def test_jitter_after_the_cap(self):
        retry = Retry(base=10, max_delay=20, jitter=0.5)
        assert retry.delay(50, rand=lambda: 0.0) == 10.0
        assert retry.delay(50, rand=lambda: 1.0) == 30.0

    def test_bad_rand_is_clamped(self):
        retry = Retry(base=10, jitter=1.0)
        assert retry.delay(1, rand=lambda: -5.0) == 0.0
        assert retry.delay(1, rand=lambda: 7.0) == 20.0

    def test_rand_not_called_without_jitter(self):
        def rand():
            raise AssertionError("rand called")

        assert Retry(jitter=False).delay(2, rand=rand) == 2.0
        assert Retry(base=0).delay(2, rand=rand) == 0.0

    @pytest.mark.parametrize("backoff", ["exponential", "linear", "fixed"])
    @pytest.mark.parametrize("attempt", [10**4, 10**6, 10**100, 2**4000])
    def test_huge_attempts(self, backoff, attempt):
        base = {"exponential": 1e-300, "linear": 1.0, "fixed": 7.0}[backoff]
        expected = 7.0 if backoff == "fixed" else 3600.0
        assert Retry(backoff=backoff, base=base, factor=100.0, jitter=False).delay(attempt) == expected
        # Linear with a tiny base stays exact below the cap.
        if backoff == "linear" and attempt < 10**300:
            assert Retry(backoff=backoff, base=1e-300, jitter=False).delay(attempt) == 1e-300 * attempt
        assert Retry(backoff=backoff, factor=1.0000001, jitter=False).delay(attempt) <= 3600.0
        assert Retry(backoff=backoff, base=1e308, max_delay=1e308, factor=1e308).delay(attempt) <= 1.1e308

    @pytest.mark.parametrize("attempt", [0, -1, True, 1.0, None])
    def test_bad_attempt(self, attempt):
        with pytest.raises(ConfigError, match="attempt"):
            Retry().delay(attempt)


@given(policies(jitter=False), st.integers(1, 2000), st.integers(0, 2000))
def test_no_jitter_is_monotone(retry, attempt, more):
    assert retry.delay(attempt) <= retry.delay(attempt + more)


@given(policies(), attempts, st.floats(0, 1, exclude_max=True))
def test_delay_bounds(retry, attempt, r):
    delay = retry.delay(attempt, rand=lambda: r)
    assert isinstance(delay, float)
    assert math.isfinite(delay)
    assert 0 <= delay <= retry.max_delay * (1 + retry.jitter_fraction)
    unjittered = Retry(**{**retry.to_dict(), "jitter": False}).delay(attempt)
    assert unjittered <= retry.max_delay
    assert delay >= unjittered * (1 - retry.jitter_fraction) - 1e-9 * unjittered


@given(policies(backoffs=("exponential",), jitter=False), st.integers(1, 60))
def test_exponential_formula(retry, attempt):
    try:
        expected = min(retry.base * retry.factor ** (attempt - 1), retry.max_delay)
    except OverflowError:
        expected = retry.max_delay
    assert retry.delay(attempt) == pytest.approx(expected, rel=1e-9)


class TestAllows:
    def test_global_cap(self):
        retry = Retry()
        assert [retry.allows(n, 5) for n in range(7)] == [True] * 5 + [False] * 2

    def test_max_attempts_is_a_further_cap(self):
        assert [Retry(max_attempts=2).allows(n, 5) for n in range(4)] == [True, True, False, False]
        # max_attempts can't lift the global cap.
        assert Retry(max_attempts=10).allows(5, 5) is False
        assert Retry(max_attempts=1).allows(0, 5) is True
        assert Retry(max_attempts=1).allows(1, 5) is False

    @pytest.mark.parametrize("args", [(-1, 5), (1, -1), (True, 5), (1, 5.0)])
    def test_bad_arguments(self, args):
        with pytest.raises(ConfigError):
            Retry().allows(*args)


@given(st.one_of(st.none(), st.integers(1, 20)), st.integers(0, 30), st.integers(0, 30))
def test_allows_is_a_prefix(max_attempts, deliveries, max_deliveries):
    retry = Retry(max_attempts=max_attempts)
    cap = max_deliveries if max_attempts is None else min(max_attempts, max_deliveries)
    assert retry.allows(deliveries, max_deliveries) is (deliveries < cap)


class TestConfig:
    @pytest.mark.parametrize(
        "kwargs, field",
        [
            ({"max_attempts": 0}, "max_attempts"),
            ({"max_attempts": -3}, "max_attempts"),
            ({"max_attempts": True}, "max_attempts"),
            ({"max_attempts": 2.0}, "max_attempts"),
            ({"backoff": "exp"}, "backoff"),
            ({"backoff": None}, "backoff"),
            ({"base": -1}, "base"),
            ({"base": True}, "base"),
            ({"base": "1"}, "base"),
            ({"base": float("nan")}, "base"),
            ({"base": float("inf")}, "base"),
            ({"factor": 0.5}, "factor"),
            ({"factor": False}, "factor"),
            ({"factor": float("inf")}, "factor"),
            ({"backoff": "linear", "factor": -1}, "factor"),
            ({"max_delay": -0.1}, "max_delay"),
            ({"max_delay": float("inf")}, "max_delay"),
            ({"max_delay": None}, "max_delay"),
            ({"jitter": 1.5}, "jitter"),
            ({"jitter": -0.1}, "jitter"),
            ({"jitter": "yes"}, "jitter"),
            ({"jitter": float("nan")}, "jitter"),
        ],
    )
    def test_invalid(self, kwargs, field):
        with pytest.raises(ConfigError, match=rf"Retry\.{field}\b"):
            Retry(**kwargs)

    def test_config_error_is_a_value_error(self):
        with pytest.raises(ValueError):
            Retry(base=-1)

    def test_factor_below_one_is_fine_when_unused(self):
        assert Retry(backoff="fixed", factor=0.5).delay(3, rand=lambda: 0.5) == 1.0

    def test_keyword_only_and_frozen(self):
        with pytest.raises(TypeError):
            Retry(3)  # type: ignore[misc]
        retry = Retry()
        with pytest.raises(AttributeError):
            retry.base = 2  # type: ignore[misc]

    def test_integers_accepted(self):
        assert Retry(base=2, factor=3, max_delay=10, jitter=0).delay(2) == 6


class TestStorage:
    def test_round_trip(self):
        retry = Retry(max_attempts=3, backoff="linear", base=2.5, factor=1.0, max_delay=60, jitter=0.25)
        data = retry.to_dict()
        assert data == {
            "max_attempts": 3,
            "backoff": "linear",
            "base": 2.5,
            "factor": 1.0,
            "max_delay": 60,
            "jitter": 0.25,
        }
        assert Retry.from_dict(data) == retry

    def test_missing_fields_default(self):
        assert Retry.from_dict({"base": 3}) == Retry(base=3)
        assert Retry.from_dict({}) == Retry()

    def test_unknown_field(self):
        with pytest.raises(ConfigError, match="'delay'"):
            Retry.from_dict({"delay": 3})

    def test_invalid_stored_value(self):
        with pytest.raises(ConfigError, match="Retry.base"):
            Retry.from_dict({"base": -3})

    @given(policies(), st.one_of(st.none(), st.integers(1, 50)))
    def test_round_trip_property(self, retry, max_attempts):
        retry = Retry(**{**retry.to_dict(), "max_attempts": max_attempts})
        assert Retry.from_dict(retry.to_dict()) == retry
