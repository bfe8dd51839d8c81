"""Quantiles estimated from histogram buckets (policy/distribution.py)."""

from __future__ import annotations

import bisect
import math

from hypothesis import given, strategies as st

from django_taskmq.policy.distribution import BUCKETS, merged, quantile


def histogram(values: list[float]) -> tuple[list[int], int]:
    values = sorted(values)
    return [bisect.bisect_right(values, b) for b in BUCKETS], len(values)


durations = st.lists(st.floats(0, 5000, allow_nan=False), min_size=1, max_size=200)


@given(durations, st.floats(0.01, 1.0))
def test_the_estimate_lies_in_the_bucket_of_the_true_quantile(values, q):
    cumulative, total = histogram(values)
    estimate = quantile(q, BUCKETS, cumulative, total)
    ordered = sorted(values)
    true = ordered[math.ceil(q * total) - 1]  # the smallest value with at least q of them at or below it
    if true > BUCKETS[-1]:
        assert estimate == BUCKETS[-1]
    else:
        index = bisect.bisect_left(BUCKETS, true)
        low = BUCKETS[index - 1] if index else 0.0
        assert low <= estimate <= BUCKETS[index]


@given(durations, st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_quantiles_do_not_decrease_with_q(values, a, b):
    cumulative, total = histogram(values)
    low, high = sorted((a, b))
    assert quantile(low, BUCKETS, cumulative, total) <= quantile(high, BUCKETS, cumulative, total)


def test_no_observations_no_quantile():
    assert quantile(0.5, BUCKETS, [0] * len(BUCKETS), 0) is None


def test_merged_adds_bucket_by_bucket():
    assert merged([1, 2, 3], [0, 5, 5]) == [1, 7, 8]
