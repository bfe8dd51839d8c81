"""The timing rollup's bucketing (policy.distribution.bucket_of, cumulative; policy.timings.tally):
every duration lands in the first bucket whose bound holds it, the cumulative counts are
Prometheus's ``le`` buckets, and tallying then summing a window loses no outcome and no second."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.policy.distribution import BUCKETS, bucket_of, cumulative
from django_taskmq.policy.timings import tally

durations = st.floats(min_value=-5, max_value=10_000, allow_nan=False)
moments = st.datetimes(min_value=datetime.datetime(2026, 1, 1), max_value=datetime.datetime(2026, 1, 2),
                       timezones=st.just(datetime.UTC))
outcomes = st.lists(st.tuples(moments, st.sampled_from(["a", "b"]), st.sampled_from(["t.x", "t.y"]),
                              durations, durations), max_size=60)


@given(durations)
def test_a_duration_is_in_the_first_bucket_that_holds_it(seconds):
    index = bucket_of(seconds)
    assert all(seconds > bound for bound in BUCKETS[:index])
    assert index == len(BUCKETS) or seconds <= BUCKETS[index]


def test_a_bound_is_in_its_own_bucket():
    assert [bucket_of(bound) for bound in BUCKETS] == list(range(len(BUCKETS)))
    assert bucket_of(BUCKETS[-1] + 1) == len(BUCKETS)


@given(st.lists(durations, max_size=80))
def test_cumulative_counts_are_the_observations_at_or_below_each_bound(observed):
    counts = [0] * (len(BUCKETS) + 1)
    for seconds in observed:
        counts[bucket_of(seconds)] += 1
    assert cumulative(counts) == [sum(1 for s in observed if s <= bound) for bound in BUCKETS]


@given(outcomes)
def test_tally_keeps_every_wait_and_run_in_its_slot_queue_task_and_bucket(timed):
    rows = tally(timed)
    assert list(rows) == sorted(rows)
    for (at, queue, task, bucket), (waits, wait_sum, runs, run_sum) in rows.items():
        assert at.second % 10 == 0 and at.microsecond == 0
        mine = [(w, r) for f, q, t, w, r in timed
                if (q, t) == (queue, task) and f.replace(second=f.second - f.second % 10, microsecond=0) == at]
        assert waits == sum(1 for w, _ in mine if bucket_of(w) == bucket)
        assert runs == sum(1 for _, r in mine if bucket_of(r) == bucket)
        assert abs(wait_sum - sum(w for w, _ in mine if bucket_of(w) == bucket)) < 1e-6
        assert abs(run_sum - sum(r for _, r in mine if bucket_of(r) == bucket)) < 1e-6
    assert sum(w for w, _ws, _r, _rs in rows.values()) == sum(r for _w, _ws, r, _rs in rows.values()) == len(timed)
