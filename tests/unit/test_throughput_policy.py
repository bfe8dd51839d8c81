"""The throughput rollup's arithmetic: every outcome lands in the slot its finish time falls in,
successes and failures (FAILED, DEAD) apart, per queue; nothing else is counted."""

from __future__ import annotations

import datetime

from hypothesis import given, strategies as st

from django_taskmq.policy import throughput

MOMENTS = st.datetimes(min_value=datetime.datetime(2026, 1, 1), max_value=datetime.datetime(2027, 1, 1),
                       timezones=st.just(datetime.UTC))
OUTCOMES = st.lists(st.tuples(MOMENTS, st.sampled_from(["a", "b"]),
                              st.sampled_from(["SUCCEEDED", "FAILED", "DEAD", "CANCELLED"])), max_size=50)


@given(MOMENTS)
def test_a_moment_is_in_the_slot_that_starts_at_most_a_slot_before_it(moment):
    slot = throughput.slot_of(moment)
    assert slot <= moment < slot + datetime.timedelta(seconds=throughput.SLOT)
    assert slot.second % throughput.SLOT == 0 and slot.microsecond == 0


@given(OUTCOMES)
def test_tally_counts_each_success_and_failure_once_in_its_slot(outcomes):
    counts = throughput.tally(outcomes)
    assert sum(ok for ok, _ in counts.values()) == sum(1 for _, _, s in outcomes if s == "SUCCEEDED")
    assert sum(bad for _, bad in counts.values()) == sum(1 for _, _, s in outcomes if s in ("FAILED", "DEAD"))
    for (slot, queue), (ok, bad) in counts.items():
        mine = [s for at, q, s in outcomes if q == queue and throughput.slot_of(at) == slot]
        assert (ok, bad) == (mine.count("SUCCEEDED"), mine.count("FAILED") + mine.count("DEAD"))
        assert ok + bad > 0
    assert list(counts) == sorted(counts)
