"""What the workflow pages read: the steps' counts by state, and the graph and table of one workflow.

Queries are bounded in number whatever the workflow's size: the counts are one ``GROUP BY`` for a
whole list page; a workflow's page reads its step names and edges (two queries of narrow rows),
lays them out without the database (:mod:`.workflow_graph`), then loads the jobs of the drawn
steps only (at most :data:`~.workflow_graph.MAX_NODES`, one query) and never their package,
result or traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from ..models import Job, State, Workflow, WorkflowEdge, WorkflowStep
from . import workflow_graph
from .display import shorten, state_badge

ERROR_SHOWN = 200  # characters of a step's error in the table
AFTER_SHOWN = 10  # names of the steps a step waits for, in the table (a fan-in may wait for thousands)
DELETED = "DELETED"  # the state shown for a step whose job was deleted (pruned), as workflow() says


def step_counts(workflow_ids: Iterable[str], alias: str | None = None) -> dict[str, dict[str, int]]:
    """Return, per workflow id, its steps' jobs counted by state, in one query (``GROUP BY``)."""
    ids = list(workflow_ids)
    counts: dict[str, dict[str, int]] = {i: {} for i in ids}
    if not ids:
        return counts
    rows = (WorkflowStep.objects.using(alias).filter(workflow_id__in=ids).order_by()
            .values("workflow_id", "job__state").annotate(n=Count("pk"))
            .values_list("workflow_id", "job__state", "n"))
    for workflow_id, state, n in rows:
        counts[workflow_id][state] = n
    return counts


def jobs_url(workflow_id: str, state: str | None = None) -> str:
    """The job list of a workflow's steps (its ``workflow`` filter), of one state if given."""
    params = {"workflow": workflow_id, **({"state": state} if state else {})}
    return reverse("admin:django_taskmq_job_changelist") + "?" + urlencode(params)


def counts_html(workflow_id: str, counts: dict[str, int]) -> SafeString | str:
    """The counts as state badges with their numbers, in the states' order, each a link to its jobs."""
    if not counts:
        return "-"
    order = {state: i for i, state in enumerate(State.values)}
    ordered = sorted(counts.items(), key=lambda item: order.get(item[0], len(order)))
    return format_html_join(" ", "<a href='{}' style='white-space: nowrap;'>{}&nbsp;{}</a>", (
        (jobs_url(workflow_id, state), state_badge(state), n) for state, n in ordered))


def graph(workflow: Workflow, limit: int | None = None) -> dict[str, Any]:
    """The change page's context: the SVG graph and the table of the drawn steps."""
    alias = workflow._state.db
    limit = workflow_graph.MAX_NODES if limit is None else limit
    steps = list(WorkflowStep.objects.using(alias).filter(workflow_id=workflow.pk).order_by("job_id")
                 .values_list("job_id", "name", "run_on_failure"))
    name_of = {job_id: name for job_id, name, _ in steps}
    after: dict[str, list[str]] = {name: [] for _, name, _ in steps}
    for upstream, downstream in (WorkflowEdge.objects.using(alias).filter(workflow_id=workflow.pk).order_by("id")
                                 .values_list("upstream", "downstream")):
        if upstream in name_of and downstream in name_of:
            after[name_of[downstream]].append(name_of[upstream])
    plan = workflow_graph.layout(after, limit)
    id_of = {name: job_id for job_id, name, _ in steps}
    on_failure = {name for _, name, flag in steps if flag}
    jobs = Job.objects.using(alias).only("id", "state", "error").in_bulk([id_of[n] for n in plan.drawn])
    nodes, rows = {}, []
    for name in plan.drawn:
        job = jobs.get(id_of[name])
        url = reverse("admin:django_taskmq_job_change", args=[job.pk]) if job else None
        state = job.state if job else DELETED
        nodes[name] = workflow_graph.Node(state, url, name in on_failure)
        rows.append({"name": name, "job_id": id_of[name], "url": url, "state": state_badge(state),
                     "error": shorten(job.error, ERROR_SHOWN) if job else "", "after": _names(after[name]),
                     "run_on_failure": name in on_failure})
    return {
        "workflow_svg": workflow_graph.draw(plan, after, nodes),
        "workflow_steps": rows,
        "workflow_step_total": len(steps),
        "workflow_left_out": plan.left_out,
        "workflow_jobs_url": jobs_url(workflow.pk),
    }



def _names(names: list[str]) -> str:
    more = len(names) - AFTER_SHOWN
    return ", ".join(names[:AFTER_SHOWN]) + (f" and {more} more" if more > 0 else "")
