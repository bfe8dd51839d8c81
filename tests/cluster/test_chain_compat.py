"""One chain mechanism, workflows: django-q2's ``async_task(..., chain=[...])`` is a chain from the
start, and a package queued before 0.2 with a ``chain`` key still runs its chain once, by a real
cluster (``qcluster --burst``)."""

from __future__ import annotations

import collections

import pytest

from django_taskmq.runtime import legacy_chains
from django_taskmq.compat.django_q import async_task as q_async_task
from django_taskmq.models import Job, Workflow, WorkflowStep
from tests.legacy_packages import queue_chained

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"
RECORD = "tests.tasks.record_run"


def states(job_ids: list[str]) -> list[tuple[str, str]]:
    jobs = Job.objects.in_bulk(job_ids)
    return [(jobs[j].func, jobs[j].state) for j in job_ids]


def steps(first: str) -> list[str]:
    """The job ids of the workflow whose step ``first`` is, in link order."""
    workflow_id = WorkflowStep.objects.get(job_id=first).workflow_id
    return list(WorkflowStep.objects.filter(workflow_id=workflow_id).order_by("name").values_list("job_id", flat=True))


def test_compat_async_task_with_a_chain_is_one_workflow_stopped_by_a_failed_first_link(cluster):
    failing = q_async_task(f"{TASKS}.boom", "first", ack_failure=True, group="bad",
                           chain=[(RECORD, ("second",)), (RECORD, ("third",))])
    passing = q_async_task(RECORD, "one", group="good", chain=[(RECORD, ("two",)), (RECORD, ("three",), {})])
    # Every link exists from the start, waiting for the one before it; the task's own id is returned.
    bad, good = steps(failing), steps(passing)
    assert bad[0] == failing and good[0] == passing and len(bad) == len(good) == 3

    cluster.burst("-w", "2")

    tags = collections.Counter(tag for _, tag in cluster.log())
    assert tags == {"start:first": 1, "one": 1, "two": 1, "three": 1}, tags
    assert states(bad) == [(f"{TASKS}.boom", "FAILED"), (RECORD, "CANCELLED"), (RECORD, "CANCELLED")]
    assert states(good) == [(RECORD, "SUCCEEDED")] * 3
    assert set(Job.objects.filter(pk__in=bad).values_list("group", flat=True)) == {"bad"}  # the chain shares its group
    assert [j for j, tag in cluster.log() if tag in ("one", "two", "three")] == good


def test_a_package_queued_before_0_2_with_a_chain_runs_its_chain_once(cluster):
    rest = [(RECORD, ("second",), {}, {"group": "old"}), (RECORD, ("third",), {}, {"group": "old"})]
    first = queue_chained(RECORD, ("first",), rest, group="old")
    broken = queue_chained(RECORD, ("b-first",), [(f"{TASKS}.boom", ("b-second",), {}, {"ack_failure": True}),
                                                  (RECORD, ("b-third",), {}, {})])
    dead_end = queue_chained(f"{TASKS}.boom", ("d-first",), [(RECORD, ("d-second",), {}, {})], ack_failure=True)

    qc = cluster.burst("-w", "2")

    log = cluster.log()
    tags = collections.Counter(tag for _, tag in log)
    assert tags == {"first": 1, "second": 1, "third": 1, "b-first": 1, "start:b-second": 1, "start:d-first": 1}, tags
    assert [tag for _, tag in log if tag in ("first", "second", "third")] == ["first", "second", "third"]
    # Each success queued the rest of its chain as one workflow, once; its links are a chain's.
    workflows = list(Workflow.objects.filter(name=legacy_chains.NAME))
    assert len(workflows) == 2 and {w.steps.count() for w in workflows} == {2}
    assert sorted(Job.objects.filter(group="old").values_list("state", flat=True)) == ["SUCCEEDED"] * 3
    # A link of the rest that fails ends the links after it CANCELLED, as in every chain.
    after_broken = Job.objects.filter(workflow_step__workflow__in=workflows, func=RECORD, state="CANCELLED")
    assert [j.func for j in after_broken] == [RECORD]
    # A first job that fails for good ends its chain there: nothing more was queued.
    assert Job.objects.get(pk=dead_end).state == "FAILED"
    assert not Job.objects.filter(func=RECORD, state__in=["QUEUED", "WAITING"]).exists()
    assert Job.objects.get(pk=broken).state == Job.objects.get(pk=first).state == "SUCCEEDED"
    warnings = [line for line in qc.output(tail=10**6).splitlines() if "queued with a 'chain' in its package" in line]
    assert len(warnings) == 2, qc.output()
