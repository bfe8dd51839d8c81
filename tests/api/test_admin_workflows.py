"""Workflows in the admin through the test client, as a superuser: the list (steps counted by
state in one query for the page, filters, search), the page with its graph (one node per step
linked to its job, coloured by state, edges, run-on-failure dashed, names escaped) and its table,
the cap on what a big workflow draws, and the job page's link to its workflow (and the job list's
filter by workflow).
Workflows are enqueued for real (no cluster runs them); steps change state through updates."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_taskmq import Workflow, async_task
from django_taskmq.admin import workflow_graph
from django_taskmq.admin.display import STATE_COLOURS
from django_taskmq.models import Job, State, WorkflowStep
from django_taskmq.models import Workflow as WorkflowRecord

pytestmark = pytest.mark.django_db

WORKFLOWS = "/admin/django_taskmq/workflow/"
JOBS = "/admin/django_taskmq/job/"
T = "tests.tasks.noop"


def text(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def ids(workflow_id: str) -> dict[str, str]:
    """The job id of each step of a workflow, by step name."""
    return dict(WorkflowStep.objects.filter(workflow_id=workflow_id).values_list("name", "job_id"))


def set_state(workflow_id: str, **states: str) -> None:
    steps = ids(workflow_id)
    for name, state in states.items():
        Job.objects.filter(pk=steps[name]).update(state=state)


def diamond(name: str = "report-42") -> str:
    """fetch-a and ``<b>&`` fan in to merge; cleanup runs after merge, however it ended."""
    wf = Workflow(name=name)
    a = wf.add(T, name="fetch-a")
    b = wf.add(T, name="<b>&")
    merge = wf.add(T, name="merge", after=[a, b])
    wf.add(T, name="cleanup", after=[merge], run_on_failure=True)
    return wf.enqueue()


def svg_of(page: str) -> str:
    match = re.search(r"<svg [^>]*class=\"taskmq-workflow\".*?</svg>", page, re.S)
    assert match, "no SVG on the page"
    return match.group(0)


def table_of(page: str) -> str:
    start = page.index('id="taskmq-steps"')
    return page[start:page.index("</table>", start)]


def nodes(svg: str) -> list[str]:
    return re.findall(r'<(?:a|g) class="taskmq-node[^"]*"', svg)


# -- the list ----------------------------------------------------------------------------------------

def test_list_shows_each_workflow_with_its_steps_counted_by_state(admin_client, broker):
    first = diamond("report-1")
    second = diamond("report-2")
    set_state(first, **{"fetch-a": State.SUCCEEDED, "<b>&": State.FAILED, "merge": State.CANCELLED})
    WorkflowRecord.objects.filter(pk=first).update(state="FAILED", finished_at=timezone.now())
    page = text(admin_client.get(WORKFLOWS))
    for column in ("name", "state", "steps by state", "created", "finished"):
        assert column in page.lower(), column
    assert "report-1" in page and "report-2" in page and "By state" in page
    rows = {row.pk: row for row in admin_client.get(WORKFLOWS).context["cl"].result_list}
    assert set(rows) == {first, second}
    admin = admin_client.get(WORKFLOWS).context["cl"].model_admin
    first_cell, second_cell = admin.steps(rows[first]), admin.steps(rows[second])
    for state, n in ((State.SUCCEEDED, 1), (State.FAILED, 1), (State.CANCELLED, 1), (State.WAITING, 1)):
        assert re.search(rf"taskmq-state-{state.lower()}\b[^>]*>[^<]*</span>&nbsp;{n}</a>", first_cell), state
    assert re.search(r"taskmq-state-queued\b[^>]*>[^<]*</span>&nbsp;2</a>", second_cell)  # fetch-a, <b>&
    assert re.search(r"taskmq-state-waiting\b[^>]*>[^<]*</span>&nbsp;2</a>", second_cell)  # merge, cleanup
    assert f"?workflow={first}&amp;state=FAILED" in first_cell  # each count lists its jobs
    assert "taskmq-state-failed" in page and "taskmq-state-running" in page  # the workflows' own states


def test_the_list_counts_the_steps_of_its_page_in_one_query(admin_client, broker):
    for n in range(4):
        diamond(f"report-{n}")
    with CaptureQueriesContext(connection) as queries:
        page = text(admin_client.get(WORKFLOWS))
    step_reads = [q["sql"] for q in queries if "django_taskmq_workflowstep" in q["sql"]]
    assert len(step_reads) == 1 and "GROUP BY" in step_reads[0].upper(), step_reads
    assert page.count("&nbsp;2</a>") == 8  # two queued and two waiting steps, per workflow


@pytest.mark.parametrize("query", ["state=FAILED", "q={id}", "q=port-7"])
def test_filter_and_search_find_the_workflow(admin_client, broker, query):
    wanted, other = diamond("report-7"), diamond("other")
    WorkflowRecord.objects.filter(pk=wanted).update(state="FAILED")
    response = admin_client.get(f"{WORKFLOWS}?{query.format(id=wanted)}")
    assert [row.pk for row in response.context["cl"].result_list] == [wanted] and other != wanted


def test_workflows_are_read_only(admin_client, broker):
    workflow_id = diamond()
    assert admin_client.get(f"{WORKFLOWS}add/").status_code == 403
    page = text(admin_client.get(f"{WORKFLOWS}{workflow_id}/change/"))
    assert 'name="_save"' not in page and "deletelink" not in page
    assert admin_client.post(f"{WORKFLOWS}{workflow_id}/change/", {"name": "renamed"}).status_code == 403
    assert admin_client.get(f"{WORKFLOWS}{workflow_id}/delete/").status_code == 403
    assert WorkflowRecord.objects.get(pk=workflow_id).name == "report-42"
    choices = dict(admin_client.get(WORKFLOWS).context["action_form"].fields["action"].choices)
    assert set(choices) == {"", "cancel_workflows"}  # no "delete selected"


def test_cancel_confirms_then_cancels_the_running_workflows_steps(admin_client, broker):
    running, done = diamond("running"), diamond("done")
    WorkflowRecord.objects.filter(pk=done).update(state="SUCCEEDED")
    selected = {"action": "cancel_workflows", "_selected_action": [running, done]}
    page = text(admin_client.post(WORKFLOWS, selected))
    assert "Cancel workflows" in page and "1 of them is running." in page
    assert WorkflowRecord.objects.get(pk=running).state == "RUNNING"  # nothing changed yet
    response = admin_client.post(WORKFLOWS, {**selected, "post": "yes"}, follow=True)
    assert "1 workflow cancelled (4 steps)." in [str(m) for m in response.context["messages"]]
    assert WorkflowRecord.objects.get(pk=running).state == "CANCELLED"
    assert set(Job.objects.filter(pk__in=ids(running).values()).values_list("state", flat=True)) == {"CANCELLED"}
    assert set(Job.objects.filter(pk__in=ids(done).values()).values_list("state", flat=True)) == {"QUEUED", "WAITING"}


# -- the page ----------------------------------------------------------------------------------------

def test_the_page_draws_one_node_per_step_linked_to_its_job_with_its_edges(admin_client, broker):
    workflow_id = diamond()
    set_state(workflow_id, **{"fetch-a": State.SUCCEEDED, "<b>&": State.DEAD, "merge": State.CANCELLED})
    Job.objects.filter(pk=ids(workflow_id)["merge"]).update(error="upstream step '<b>&' ended DEAD")
    page = text(admin_client.get(f"{WORKFLOWS}{workflow_id}/change/"))
    svg = svg_of(page)
    steps = ids(workflow_id)
    assert len(nodes(svg)) == 4 == len(steps)
    for name, job_id in steps.items():
        assert f'href="{JOBS}{job_id}/change/"' in svg, name
    assert svg.count('class="taskmq-edge"') == 3
    expected = {"fetch-a": State.SUCCEEDED, "&lt;b&gt;&amp;": State.DEAD, "merge": State.CANCELLED,
                "cleanup": State.WAITING}
    for name, state in expected.items():
        assert re.search(rf'<title>{re.escape(name)}: {state}( \(runs on failure\))?</title><rect [^>]*'
                         rf'fill="{STATE_COLOURS[state]}"', svg), name
    assert "<b>&" not in page  # the name is escaped, in the graph and in the table
    assert svg.count("stroke-dasharray") == 1 and "cleanup: WAITING (runs on failure)" in svg
    # columns by depth: the two fetches, then merge, then cleanup
    xs = {name: float(x) for name, x in re.findall(r'<title>([^:<]+): [A-Z]+[^<]*</title><rect x="([\d.]+)"', svg)}
    assert xs["fetch-a"] == xs["&lt;b&gt;&amp;"] < xs["merge"] < xs["cleanup"]
    table = table_of(page)
    for name, job_id in steps.items():
        assert f'<a href="{JOBS}{job_id}/change/">{job_id}</a>' in table, name
    assert "upstream step &#x27;&lt;b&gt;&amp;&#x27; ended DEAD" in table
    assert "fetch-a, &lt;b&gt;&amp;" in table  # what merge waits for
    assert "taskmq-state-dead" in table and "runs on failure" in table


def test_the_page_loads_no_package_result_or_traceback(admin_client, broker):
    workflow_id = diamond()
    with CaptureQueriesContext(connection) as queries:
        text(admin_client.get(f"{WORKFLOWS}{workflow_id}/change/"))
    job_reads = [q["sql"] for q in queries if '"django_taskmq_job"' in q["sql"] or "`django_taskmq_job`" in q["sql"]]
    assert job_reads
    for sql in job_reads:
        assert "payload" not in sql and "result_package" not in sql and "traceback" not in sql, sql


def test_a_big_workflow_draws_the_first_steps_says_how_many_are_left_out_and_reads_as_much(admin_client, broker,
                                                                                             monkeypatch):
    monkeypatch.setattr(workflow_graph, "MAX_NODES", 5)

    def fan(width: int) -> str:
        wf = Workflow(name=f"fan-{width}")
        root = wf.add(T, name="root")
        leaves = [wf.add(T, name=f"leaf-{i}", after=[root]) for i in range(width)]
        wf.add(T, name="merge", after=leaves)
        return wf.enqueue()

    small, big = fan(10), fan(30)
    with CaptureQueriesContext(connection) as small_queries:
        text(admin_client.get(f"{WORKFLOWS}{small}/change/"))
    with CaptureQueriesContext(connection) as big_queries:
        page = text(admin_client.get(f"{WORKFLOWS}{big}/change/"))
    assert len(big_queries) == len(small_queries)  # as many queries, whatever the size
    svg = svg_of(page)
    assert len(nodes(svg)) == 5 and "<title>root: QUEUED</title>" in svg and "merge: WAITING" not in svg
    assert svg.count('class="taskmq-edge"') == 4
    assert "27 steps are not drawn" in page and f"{JOBS}?workflow={big}" in page
    assert table_of(page).count(f'<a href="{JOBS}') == 5
    job_reads = [q["sql"] for q in big_queries if "in (" in q["sql"].lower() and "django_taskmq_job" in q["sql"]
                 and "workflowstep" not in q["sql"]]
    assert len(job_reads) == 1 and sum(job_id in job_reads[0] for job_id in ids(big).values()) == 5


def test_a_step_whose_job_was_deleted_is_drawn_without_a_link(admin_client, broker):
    workflow_id = diamond()
    Job.objects.filter(pk=ids(workflow_id)["cleanup"]).delete()
    svg = svg_of(text(admin_client.get(f"{WORKFLOWS}{workflow_id}/change/")))
    assert len(nodes(svg)) == 4 and svg.count("<a class=") == 3 and "cleanup: DELETED (runs on failure)" in svg


# -- the job page and the job list ---------------------------------------------------------------------

def test_the_job_page_of_a_step_links_its_workflow(admin_client, broker):
    workflow_id = diamond()
    page = text(admin_client.get(f"{JOBS}{ids(workflow_id)['merge']}/change/"))
    assert f"<a href='{WORKFLOWS}{workflow_id}/change/'>report-42</a> (step merge)" in page
    alone = async_task(T)
    page = text(admin_client.get(f"{JOBS}{alone}/change/"))
    assert "workflow" in page.lower() and not re.search(rf"{WORKFLOWS}\w+/change/", page) and "(step " not in page


def test_the_job_list_filters_by_workflow(admin_client, broker):
    workflow_id = diamond()
    diamond("other")
    async_task(T)
    response = admin_client.get(f"{JOBS}?workflow={workflow_id}")
    assert {row.pk for row in response.context["cl"].result_list} == set(ids(workflow_id).values())
    response = admin_client.get(f"{JOBS}?workflow={workflow_id}&state=WAITING")
    steps = ids(workflow_id)
    assert {row.pk for row in response.context["cl"].result_list} == {steps["merge"], steps["cleanup"]}
    assert "By workflow" in text(response)

