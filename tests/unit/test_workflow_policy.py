"""The pure rules of workflows (policy/workflow.py): graph checks, what an end does to a dependent,
and a workflow's state; property tests over random graphs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_taskmq.policy import workflow as rules
from django_taskmq.policy.states import JobState
from django_taskmq.policy.workflow import Effect, WorkflowState

FINAL = sorted(JobState.FINAL)
NOT_FINAL = sorted(set(JobState) - JobState.FINAL)


@st.composite
def dags(draw, max_steps: int = 25) -> dict[str, list[str]]:
    """A random acyclic graph (step -> its dependencies) whose names are not in dependency order."""
    n = draw(st.integers(1, max_steps))
    names = draw(st.permutations([f"s{i}" for i in range(n)]))
    graph = {}
    for i, name in enumerate(names):
        graph[name] = draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else []
    items = draw(st.permutations(list(graph.items())))
    return dict(items)


@given(dags())
def test_order_puts_every_step_after_its_dependencies(graph):
    placed = rules.order(graph)
    assert sorted(placed) == sorted(graph)
    position = {name: i for i, name in enumerate(placed)}
    assert all(position[dep] < position[step] for step, deps in graph.items() for dep in deps)


@given(dags(), st.data())
def test_any_edge_back_makes_a_cycle_that_is_refused_by_name(graph, data):
    # A path a -> ... -> b (each waits for the next) plus "b waits for a" is a cycle.
    with_deps = [step for step, deps in graph.items() if deps]
    if not with_deps:
        return
    a = data.draw(st.sampled_from(with_deps))
    path = [a]
    while graph[path[-1]]:
        path.append(data.draw(st.sampled_from(graph[path[-1]])))
    b = path[-1]
    cyclic = {**graph, b: [*graph[b], a]}
    with pytest.raises(ValueError, match="cycle") as info:
        rules.order(cyclic)
    assert a in str(info.value) and b in str(info.value)


def test_order_refuses_an_empty_graph_an_unknown_name_and_a_self_loop():
    with pytest.raises(ValueError, match="at least one step"):
        rules.order({})
    with pytest.raises(ValueError, match=r"step 'b' waits for unknown step\(s\) \['x'\]"):
        rules.order({"a": [], "b": ["a", "x"]})
    with pytest.raises(ValueError, match="cycle: a -> a"):
        rules.order({"a": ["a"]})


def test_order_of_a_long_chain_needs_no_recursion():
    n = 20_000
    graph = {f"s{i}": [f"s{i - 1}"] if i else [] for i in range(n)}
    assert rules.order(dict(reversed(graph.items())))[:3] == ["s0", "s1", "s2"]


@given(st.sampled_from(FINAL), st.booleans())
def test_an_end_satisfies_a_dependent_when_it_succeeded_or_the_dependent_runs_on_failure(state, run_on_failure):
    expected = Effect.SATISFY if state is JobState.SUCCEEDED or run_on_failure else Effect.CANCEL
    assert rules.effect(state, run_on_failure) is expected
    assert rules.effect(state.value, run_on_failure) is expected


@pytest.mark.parametrize("state", NOT_FINAL)
def test_a_step_that_has_not_ended_has_no_effect_yet(state):
    with pytest.raises(ValueError, match="has not ended"):
        rules.effect(state, True)


@given(st.lists(st.sampled_from(list(JobState)), min_size=1), st.booleans())
def test_a_workflow_runs_until_every_step_ended_then_its_state_follows_the_steps(states, cancelled):
    state = rules.outcome(states, cancelled)
    if any(s not in JobState.FINAL for s in states):
        assert state is WorkflowState.RUNNING
    elif cancelled:
        assert state is WorkflowState.CANCELLED
    elif set(states) == {JobState.SUCCEEDED}:
        assert state is WorkflowState.SUCCEEDED
    else:
        assert state is WorkflowState.FAILED


@given(dags(), st.data())
def test_simulated_runs_never_start_a_step_whose_dependency_failed_unless_it_runs_on_failure(graph, data):
    """Run a graph with the rules alone, each step's own outcome drawn at random: a step runs
    once each dependency satisfied it; a CANCEL ends it, and it passes its end on. Every step
    ends, exactly once; one that ran without run_on_failure had only successful dependencies."""
    on_failure = {step: data.draw(st.booleans()) for step in graph}
    ends: dict[str, JobState] = {}
    ran: set[str] = set()
    for step in rules.order(graph):  # every dependency has ended by then
        effects = [rules.effect(ends[dep], on_failure[step]) for dep in graph[step]]
        if Effect.CANCEL in effects:
            ends[step] = JobState.CANCELLED
            continue
        ran.add(step)
        ends[step] = data.draw(st.sampled_from([JobState.SUCCEEDED, JobState.DEAD, JobState.FAILED]))
    assert set(ends) == set(graph)
    for step in ran:
        if not on_failure[step]:
            assert all(ends[dep] is JobState.SUCCEEDED for dep in graph[step])
    if all(s is JobState.SUCCEEDED for s in ends.values()):
        assert rules.outcome(ends.values()) is WorkflowState.SUCCEEDED


def test_the_reason_of_a_cancelled_dependent_names_the_step_and_its_end():
    assert rules.cancel_reason("fetch-1", "DEAD") == "upstream step 'fetch-1' ended DEAD"


@pytest.mark.parametrize("name", ["", "x" * 101, 3, None])
def test_a_bad_step_name_is_refused(name):
    with pytest.raises(ValueError, match="name"):
        rules.check_name(name, set())


def test_a_taken_name_and_bad_after_values_are_refused():
    with pytest.raises(ValueError, match="already has a step named 'a'"):
        rules.check_name("a", {"a"})
    with pytest.raises(ValueError, match="list of step names"):
        rules.check_after("a")
    with pytest.raises(ValueError, match="strings"):
        rules.check_after(["a", 2])
    with pytest.raises(ValueError, match="twice"):
        rules.check_after(["a", "a"])
    assert rules.check_after(None) == () and rules.check_after(["later"]) == ("later",)
