"""The workflow graph of the admin, drawn without a database: layers by dependency depth, one
node per step in its state's colour and linked to its job, edges between drawn steps, names
escaped, run-on-failure steps dashed, and the cap on what is drawn."""

from __future__ import annotations

import re

from django_taskmq.admin.display import STATE_COLOURS
from django_taskmq.admin.workflow_graph import Node, layers, layout, workflow_svg
from django_taskmq.models import State

DIAMOND = {"a": [], "b": [], "c": ["a", "b"], "d": ["c"], "e": ["a", "d"]}


def nodes(svg: str) -> list[str]:
    return re.findall(r'<(?:a|g) class="taskmq-node[^"]*"', svg)


def test_a_step_sits_one_layer_after_its_deepest_dependency():
    assert layers(DIAMOND) == {"a": 0, "b": 0, "c": 1, "d": 2, "e": 3}
    assert layers({"x": []}) == {"x": 0}
    assert layers({}) == {}


def test_a_chain_of_ten_thousand_steps_needs_no_recursion():
    chain = {f"s{i}": ([f"s{i - 1}"] if i else []) for i in range(10_000)}
    assert layers(chain)["s9999"] == 9999


def test_names_that_are_no_step_are_ignored_and_a_cycle_does_not_hang():
    assert layers({"a": ["ghost"], "b": ["a"]}) == {"a": 0, "b": 1}
    assert layers({"a": [], "b": ["a", "c"], "c": ["b"], "d": ["a"]}) == {"a": 0, "b": 2, "c": 2, "d": 1}


def test_columns_follow_the_layers_and_a_step_sits_near_what_it_waits_for():
    plan = layout({"a": [], "b": [], "x": ["b"], "y": ["a"]})
    assert plan.columns == [["a", "b"], ["y", "x"]] and plan.left_out == 0


def test_one_node_per_step_coloured_by_state_linked_to_its_job():
    states = dict(zip(DIAMOND, [State.SUCCEEDED, State.FAILED, State.CANCELLED, State.WAITING, State.QUEUED]))
    svg, left_out = workflow_svg(DIAMOND, {n: Node(s, f"/job/{n}/") for n, s in states.items()})
    assert left_out == 0 and svg.startswith("<svg") and svg.endswith("</svg>")
    assert len(nodes(svg)) == 5 and len(re.findall(r'<a class="taskmq-node[^"]*" href="/job/\w/"', svg)) == 5
    assert svg.count('class="taskmq-edge"') == 5
    for name, state in states.items():
        assert f'href="/job/{name}/"' in svg
        assert f"<title>{name}: {state}</title>" in svg
        assert f'fill="{STATE_COLOURS[state]}"' in svg
        assert f">{state}</text>" in svg


def test_names_and_urls_are_escaped():
    svg, _ = workflow_svg({"<b>&": [], "x\"y": ["<b>&"]},
                          {"<b>&": Node("RUNNING", "/j/?a=1&b=<2>"), "x\"y": Node("QUEUED")})
    assert "<b>" not in svg and "&lt;b&gt;&amp;" in svg and "x&quot;y" in svg
    assert 'href="/j/?a=1&amp;b=&lt;2&gt;"' in svg
    assert len(nodes(svg)) == 2 and svg.count('class="taskmq-edge"') == 1


def test_a_run_on_failure_step_is_dashed_and_a_step_without_a_job_is_not_a_link():
    svg, _ = workflow_svg({"a": [], "cleanup": ["a"]},
                          {"a": Node("DEAD", "/job/a/"), "cleanup": Node("QUEUED", "/job/c/", run_on_failure=True)})
    assert svg.count("stroke-dasharray") == 1 and "taskmq-node-on-failure" in svg
    assert "cleanup: QUEUED (runs on failure)" in svg
    svg, _ = workflow_svg({"a": []}, {"a": Node("DELETED", None)})
    assert "href" not in svg.replace('xmlns="http', "") and '<g class="taskmq-node taskmq-node-deleted">' in svg


def test_at_most_the_limit_is_drawn_first_layers_first_and_the_rest_counted():
    fan = {"root": [], **{f"leaf-{i}": ["root"] for i in range(10_000)}, "merge": [f"leaf-{i}" for i in range(10_000)]}
    plan = layout(fan, limit=500)
    assert plan.drawn[0] == "root" and len(plan.drawn) == 500 and plan.left_out == 9502
    svg, left_out = workflow_svg(fan, {}, limit=500)
    assert left_out == 9502 and len(nodes(svg)) == 500
    assert svg.count('class="taskmq-edge"') == 499  # root to each drawn leaf; merge is not drawn


def test_long_names_are_shortened_in_the_node_and_whole_in_its_tooltip():
    name = "a-very-long-step-name-that-does-not-fit"
    svg, _ = workflow_svg({name: []}, {name: Node("QUEUED")})
    assert f"<title>{name}: QUEUED</title>" in svg and f">{name}</text>" not in svg and "…</text>" in svg
