"""Tests of the pick rule (scheme D) and of lifting idle queues to the virtual time."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from django_taskmq.policy.pick import lift_idle, plan, virtual_time


@dataclass(frozen=True)
class Msg:
    queue: str
    seq: int
    priority: int = 0

    def __repr__(self) -> str:
        return f"{self.queue}{self.seq}@{self.priority}"


def queue(name: str, *priorities: int) -> list[Msg]:
    """Return a queue's candidates head first: priority desc, then enqueue order."""
    items = [Msg(name, seq, p) for seq, p in enumerate(priorities)]
    return sorted(items, key=lambda m: -m.priority)  # sorted() is stable: FIFO kept.


def names(picked: list[Msg]) -> list[str]:
    return [f"{m.queue}{m.seq}" for m in picked]


class TestPlan:
    def test_issue_example(self):
        candidates = {"a": queue("a", 0, 0, 0, 0), "b": queue("b", 0, 0, 0, 0)}
        picked, served = plan(candidates, {}, {"a": 1, "b": 2}, limit=6)
        assert names(picked) == ["a0", "b0", "b1", "a1", "b2", "b3"]
        assert served == {"a": 2, "b": 4}

    def test_strict_priority_across_bands(self):
        # A heavily favoured queue never jumps a higher band.
        candidates = {"a": queue("a", 1, 1), "b": queue("b", 5, 0), "c": queue("c", 9)}
        picked, _ = plan(candidates, {"c": 1000}, {"a": 100}, limit=10)
        assert names(picked) == ["c0", "b0", "a0", "a1", "b1"]

    def test_fifo_inside_queue_and_priority(self):
        candidates = {"a": queue("a", 0, 3, 0, 3, 0)}
        picked, served = plan(candidates, {}, {}, limit=10)
        assert names(picked) == ["a1", "a3", "a0", "a2", "a4"]
        assert served == {"a": 5}

    def test_smallest_served_per_weight_first(self):
        candidates = {"a": queue("a", 0, 0, 0, 0), "b": queue("b", 0, 0)}
        # a starts at 6/3 = 2, b at 3/1 = 3: a is picked until 9/3 = 3 ties with b, and the
        # tie goes to a by name; then a (10/3) is ahead of b.
        picked, served = plan(candidates, {"a": 6, "b": 3}, {"a": 3}, limit=5)
        assert names(picked) == ["a0", "a1", "a2", "a3", "b0"]
        assert served == {"a": 10, "b": 4}

    def test_ties_go_to_the_first_name(self):
        candidates = {"z": queue("z", 0), "m": queue("m", 0), "a": queue("a", 0)}
        picked, _ = plan(candidates, {}, {}, limit=3)
        assert names(picked) == ["a0", "m0", "z0"]

    def test_limit(self):
        candidates = {"a": queue("a", 0, 0, 0)}
        assert plan(candidates, {}, {}, limit=0) == ([], {"a": 0})
        picked, served = plan(candidates, {"a": 4}, {}, limit=2)
        assert names(picked) == ["a0", "a1"]
        assert served == {"a": 6}

    def test_empty_queues_and_missing_counters(self):
        picked, served = plan({"a": [], "b": queue("b", 0)}, {}, {}, limit=5)
        assert names(picked) == ["b0"]
        assert served == {"a": 0, "b": 1}

    def test_does_not_mutate_inputs(self):
        candidates = {"a": queue("a", 0, 1)}
        served = {"a": 1}
        plan(candidates, served, {}, limit=5)
        assert served == {"a": 1}
        assert len(candidates["a"]) == 2


def reference_plan(candidates, served, weights, limit):
    """Pick one message at a time the obvious way, comparing fractions by cross-multiplying."""
    remaining = {q: list(items) for q, items in candidates.items()}
    counts = {q: served.get(q, 0) for q in candidates}
    picked = []
    while len(picked) < limit:
        heads = {q: items[0] for q, items in remaining.items() if items}
        if not heads:
            break
        top = max(m.priority for m in heads.values())
        band = sorted(q for q, m in heads.items() if m.priority == top)
        best = band[0]
        for q in band[1:]:
            # counts[q] / w[q] < counts[best] / w[best], in integers.
            if counts[q] * weights.get(best, 1) < counts[best] * weights.get(q, 1):
                best = q
        picked.append(remaining[best].pop(0))
        counts[best] += 1
    return picked, counts


QUEUE_NAMES = ["a", "b", "c", "d", "default", "zz"]


@st.composite
def scenarios(draw):
    queue_names = draw(st.lists(st.sampled_from(QUEUE_NAMES), unique=True, max_size=5))
    candidates = {
        q: queue(q, *draw(st.lists(st.integers(-9, 9), max_size=8))) for q in queue_names
    }
    served = {q: draw(st.integers(0, 30)) for q in queue_names if draw(st.booleans())}
    weights = {q: draw(st.integers(1, 6)) for q in queue_names if draw(st.booleans())}
    return candidates, served, weights


def rest_after(candidates, picked):
    """Return the candidates not yet picked (picks come off each queue's head)."""
    taken = {q: 0 for q in candidates}
    for m in picked:
        taken[m.queue] += 1
    return {q: items[taken[q]:] for q, items in candidates.items()}


@given(scenarios(), st.integers(-2, 50))
def test_plan_matches_reference(scenario, limit):
    candidates, served, weights = scenario
    assert plan(candidates, served, weights, limit) == reference_plan(candidates, served, weights, limit)


@given(scenarios(), st.integers(0, 50))
def test_plan_order_invariants(scenario, limit):
    candidates, served, weights = scenario
    picked, counts = plan(candidates, served, weights, limit)
    total = sum(len(items) for items in candidates.values())
    assert len(picked) == min(limit, total)
    # Strict priority: heads are sorted per queue, so the picks never go up a band.
    priorities = [m.priority for m in picked]
    assert priorities == sorted(priorities, reverse=True)
    # FIFO: each queue contributes a prefix of its own list, in order.
    for q, items in candidates.items():
        mine = [m for m in picked if m.queue == q]
        assert mine == items[: len(mine)]
        assert counts[q] == served.get(q, 0) + len(mine)


@given(scenarios(), st.integers(0, 20), st.integers(0, 50))
@settings(max_examples=200)
def test_plan_in_several_calls_equals_one_call(scenario, first, second):
    candidates, served, weights = scenario
    picked1, served1 = plan(candidates, served, weights, first)
    picked2, served2 = plan(rest_after(candidates, picked1), served1, weights, second)
    assert (picked1 + picked2, served2) == plan(candidates, served, weights, first + second)


@st.composite
def counters(draw):
    queue_names = draw(st.lists(st.sampled_from(QUEUE_NAMES), unique=True, min_size=0, max_size=6))
    split = draw(st.integers(0, len(queue_names)))
    busy, idle = queue_names[:split], queue_names[split:]
    served = {q: draw(st.integers(0, 1000)) for q in queue_names if draw(st.booleans())}
    weights = {q: draw(st.integers(1, 7)) for q in queue_names if draw(st.booleans())}
    return served, weights, busy, idle


@given(counters())
def test_lift_idle(scenario):
    served, weights, busy, idle = scenario
    lifted = lift_idle(served, weights, busy, idle)
    # Busy queues are never touched; only idle ones are returned.
    assert set(lifted) <= set(idle)
    assert not set(lifted) & set(busy)
    now = virtual_time(served, weights, busy)
    if now is None:
        assert lifted == {}
        return
    after = {**served, **lifted}
    for q in idle:
        # Never lowered; never strictly behind the virtual time after lifting.
        assert after.get(q, 0) >= served.get(q, 0)
        assert Fraction(after.get(q, 0), weights.get(q, 1)) >= now
        if q in lifted:
            # Lifted by no more than needed: one fewer would still be behind.
            assert lifted[q] > served.get(q, 0)
            assert Fraction(lifted[q] - 1, weights.get(q, 1)) < now


def test_lift_idle_example():
    # Busy a is at 10/1, busy b at 12/2 = 6 -> virtual time 6. Idle c (weight 3) needs 18.
    lifted = lift_idle({"a": 10, "b": 12, "c": 2, "d": 50}, {"b": 2, "c": 3}, ["a", "b"], ["c", "d", "e"])
    assert lifted == {"c": 18, "e": 6}
    assert lift_idle({"c": 2}, {}, [], ["c"]) == {}
