"""policy.flow: rate strings, GCRA spacing, and admit() never exceeding a limit (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_taskmq.exceptions import ConfigError
from django_taskmq.policy.flow import Rate, admit, check_key, check_limit, gcra, parse_rate


@pytest.mark.parametrize("text, rate", [("10/s", Rate(10, 1.0)), (" 300 / m ", Rate(300, 60.0)), ("1/h", Rate(1, 3600.0))])
def test_parse_rate(text, rate):
    assert parse_rate(text) == rate
    assert str(parse_rate(text)) == text.replace(" ", "")


@pytest.mark.parametrize("bad", ["10/x", "0/s", "-1/s", "10", "ten/s", 10, None, "1.5/s", "10/sec"])
def test_bad_rates_are_config_errors_naming_the_option(bad):
    with pytest.raises(ConfigError, match="rate_limit"):
        parse_rate(bad)


@pytest.mark.parametrize("bad", ["", "x" * 256, 3, None])
def test_bad_keys(bad):
    with pytest.raises(ConfigError, match="concurrency_key"):
        check_key(bad)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_limits(bad):
    with pytest.raises(ConfigError, match="concurrency_limit"):
        check_limit(bad)


def test_gcra_spreads_starts_and_idle_time_earns_no_burst():
    rate = Rate(5, 1.0)
    allowed, tat = gcra(None, 100.0, rate)
    assert allowed and tat == pytest.approx(100.2)
    assert gcra(tat, 100.1, rate) == (False, tat)
    allowed, tat2 = gcra(tat, 100.2, rate)
    assert allowed and tat2 == pytest.approx(100.4)
    allowed, tat3 = gcra(tat2, 500.0, rate)  # long idle: one start, not a burst
    assert allowed and gcra(tat3, 500.0, rate)[0] is False


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=20), st.sampled_from([1.0, 2.0]))
def test_gcra_never_lets_a_half_open_window_hold_more_than_count(times, count, period):
    rate = Rate(count, period)
    tat = None
    starts = []
    for now in sorted(times):
        allowed, new = gcra(tat, now, rate)
        if allowed:
            starts.append(now)
            tat = new
    for s in starts:
        assert sum(1 for t in starts if s <= t < s + period) <= count


@dataclass(frozen=True, eq=False)  # identity: two generated jobs may hold equal fields
class J:
    id: int
    queue: str
    key: str | None
    limit: int
    task: str | None


jobs = st.lists(st.builds(J, id=st.integers(), queue=st.sampled_from(["a", "b"]),
                          key=st.sampled_from([None, "k1", "k2", "k3"]), limit=st.integers(1, 3),
                          task=st.sampled_from([None, "t1", "t2"])), max_size=40)


@settings(max_examples=300, deadline=None)
@given(jobs, st.integers(0, 30), st.dictionaries(st.sampled_from(["k1", "k2", "k3"]), st.integers(0, 3)),
       st.dictionaries(st.sampled_from(["a", "b"]), st.integers(1, 4)),
       st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 4)))
def test_admit_never_exceeds_a_key_limit_a_queue_cap_or_a_rate(ordered, limit, running, caps, queue_running):
    rate = Rate(2, 1.0)
    verdict = admit(
        ordered, limit, 50.0,
        key_of=lambda j: (j.key, j.limit) if j.key else None, queue_of=lambda j: j.queue,
        buckets_of=lambda j: [(f"task:{j.task}", rate)] if j.task else [],
        running_keys=running, queue_caps=caps, running_queues=queue_running, tats={},
    )
    got = verdict.admitted
    assert len(got) <= limit
    assert [j for j in ordered if j in got] == got  # a subsequence, in pick order
    for key in {"k1", "k2", "k3"}:
        for j in got:
            if j.key == key:  # every admitted job of a key fit its own limit when admitted
                before = running.get(key, 0) + sum(1 for x in got[:got.index(j)] if x.key == key)
                assert before < j.limit
    for queue, cap in caps.items():
        assert queue_running.get(queue, 0) + sum(1 for j in got if j.queue == queue) <= max(cap, queue_running.get(queue, 0))
    for task in ("t1", "t2"):
        assert sum(1 for j in got if j.task == task) <= 1  # GCRA, burst 1: one start per claim
    held = [j for jobs in verdict.held.values() for j in jobs]
    considered = ordered[: ordered.index(got[-1]) + 1] if got else []
    assert set(map(id, considered)) <= set(map(id, got)) | set(map(id, held))


def test_a_held_job_does_not_block_the_ones_behind_it():
    ordered = [J(1, "a", "k", 1, None), J(2, "a", "k", 1, None), J(3, "a", "other", 1, None)]
    verdict = admit(ordered, 3, 0.0, key_of=lambda j: (j.key, j.limit), queue_of=lambda j: j.queue,
                    buckets_of=lambda j: [], running_keys={}, queue_caps={}, running_queues={}, tats={})
    assert [j.id for j in verdict.admitted] == [1, 3]
    assert [j.id for j in verdict.held["concurrency key 'k' at its limit (1)"]] == [2]
