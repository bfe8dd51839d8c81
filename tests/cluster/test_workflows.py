"""Workflows run by real clusters: fan-out, fan-in and a diamond in order, failure that propagates
and a replay that resumes, and a fan-in that runs once however often a cluster is killed."""

from __future__ import annotations

import collections
import random
import time

import pytest

from django_taskmq import Workflow, cancel_workflow, workflow
from django_taskmq.brokers import get_broker
from django_taskmq.models import DeadLetter, Job, WorkflowStep

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

T = "tests.cluster.tasks_workflow"


def tags(cluster) -> list[str]:
    return [tag for _, tag in cluster.log()]


def test_a_diamond_runs_in_order_and_each_step_sees_its_upstream_results(cluster):
    wf = Workflow(name="diamond")
    a = wf.add(f"{T}.fetch", 2, name="a")
    b = wf.add(f"{T}.fetch", 3, name="b")
    c = wf.add(f"{T}.merge", "c", name="c", after=[a, b])
    wf.add(f"{T}.merge", "d", name="d", after=[c])
    workflow_id = wf.enqueue()
    assert workflow(workflow_id).state == "RUNNING"
    assert {n: s.state for n, s in workflow(workflow_id).steps.items()} == {
        "a": "QUEUED", "b": "QUEUED", "c": "WAITING", "d": "WAITING"}

    cluster.burst("-w", "2")

    seen = tags(cluster)
    assert sorted(seen[:2]) == ["fetch:2", "fetch:3"] and seen[2:] == ["c:2", "d:1"]
    info = workflow(workflow_id)
    assert info.state == "SUCCEEDED" and info.finished_at is not None
    assert {n: s.state for n, s in info.steps.items()} == dict.fromkeys("abcd", "SUCCEEDED")
    assert info.steps["c"].result == {"a": 4, "b": 9}
    assert info.steps["d"].result == {"c": {"a": 4, "b": 9}}
    assert info.steps["c"].after == ("a", "b")


def test_fifty_fetches_fan_in_to_one_merge_that_runs_once_and_sees_fifty_results(cluster):
    wf = Workflow()
    fetches = [wf.add(f"{T}.fetch", n, name=f"fetch-{n}") for n in range(50)]
    wf.add(f"{T}.merge", "merge", name="merge", after=fetches)
    workflow_id = wf.enqueue()

    cluster.burst("-w", "4")

    seen = tags(cluster)
    assert seen.count("merge:50") == 1 and seen[-1] == "merge:50"
    assert sorted(t for t in seen if t.startswith("fetch:")) == sorted(f"fetch:{n}" for n in range(50))
    info = workflow(workflow_id)
    assert info.state == "SUCCEEDED"
    assert info.steps["merge"].result == {f"fetch-{n}": n * n for n in range(50)}


def test_a_failed_step_cancels_its_dependents_and_a_replay_resumes_the_workflow(cluster, tmp_path):
    flag = tmp_path / "flag"
    wf = Workflow(name="report")
    a = wf.add(f"{T}.flaky", str(flag), "a", name="a", max_deliveries=1)
    b = wf.add(f"{T}.fetch", 2, name="b")
    c = wf.add(f"{T}.merge", "c", name="c", after=[a, b])
    wf.add(f"{T}.total", "d", name="d", after=[c])
    wf.add(f"{T}.cleanup", "e", name="e", after=[c], run_on_failure=True)
    workflow_id = wf.enqueue()

    cluster.burst("-w", "2")

    info = workflow(workflow_id)
    assert {n: s.state for n, s in info.steps.items()} == {
        "a": "DEAD", "b": "SUCCEEDED", "c": "CANCELLED", "d": "CANCELLED", "e": "SUCCEEDED"}
    assert info.steps["c"].error == "upstream step 'a' ended DEAD"
    assert info.steps["d"].error == "upstream step 'c' ended CANCELLED"
    assert info.steps["e"].result == {"c": None}  # the cleanup ran, seeing c did not succeed
    assert info.state == "FAILED"
    assert sorted(tags(cluster)) == ["a", "e", "fetch:2"]

    flag.touch()
    letter = DeadLetter.objects.get(job_id=info.steps["a"].job_id)
    get_broker().replay_dead(letter.pk)  # what the admin's "replay" action calls
    resumed = workflow(workflow_id)
    assert resumed.state == "RUNNING"
    assert {n: s.state for n, s in resumed.steps.items()} == {
        "a": "QUEUED", "b": "SUCCEEDED", "c": "WAITING", "d": "WAITING", "e": "SUCCEEDED"}

    cluster.burst("-w", "2")

    done = workflow(workflow_id)
    assert done.state == "SUCCEEDED"
    assert {n: s.state for n, s in done.steps.items()} == dict.fromkeys("abcde", "SUCCEEDED")
    assert done.steps["d"].result == 0  # c's result is a dict: nothing to add up
    assert done.steps["c"].result == {"a": "a", "b": 4}
    assert tags(cluster)[3:] == ["a", "c:2", "d"]  # the cleanup did not run again


def test_cancel_workflow_cancels_what_has_not_ended(cluster):
    wf = Workflow()
    a = wf.add(f"{T}.fetch", 1, name="a")
    wf.add(f"{T}.merge", name="b", after=[a])
    workflow_id = wf.enqueue()
    assert cancel_workflow(workflow_id) == 2
    info = workflow(workflow_id)
    assert info.state == "CANCELLED"
    assert {n: s.state for n, s in info.steps.items()} == {"a": "CANCELLED", "b": "CANCELLED"}
    assert cancel_workflow(workflow_id) == 0

    cluster.burst("-w", "1")
    assert tags(cluster) == []


def test_a_fan_in_runs_once_while_clusters_are_killed_again_and_again(cluster):
    """Two clusters serve a 200-step fan-in; one is SIGKILLed (its whole process group) and
    restarted every few tenths of a second until every fetch has ended. The merge then runs once,
    seeing 200 results: the dependencies were counted in the database, once each."""
    cluster.configure(lease=2)
    wf = Workflow(name="fan-in")
    # Each kill costs the killed cluster's prefetched reservations a delivery: many kills must not
    # dead-letter them (the poison guard), so they may have many.
    fetches = [wf.add(f"{T}.fetch", n, 0.05, name=f"f{n}", max_deliveries=1000) for n in range(200)]
    wf.add(f"{T}.merge", "merge", name="merge", after=fetches)
    workflow_id = wf.enqueue()
    step_ids = [s.job_id for s in workflow(workflow_id).steps.values() if s.name != "merge"]

    rng = random.Random(7)
    clusters = [cluster.start("-w", "2"), cluster.start("-w", "2")]
    kills = 0

    def succeeded() -> int:
        return Job.objects.filter(pk__in=step_ids, state="SUCCEEDED").count()

    # A kill each time a few more steps succeeded (not on a timer: a cluster killed before it
    # got going would make no progress at all), at a random moment of the next steps.
    done = succeeded()
    while done < len(step_ids):
        target = min(done + rng.randint(5, 25), len(step_ids))
        done = cluster.wait_until(lambda: (n := succeeded()) >= target and n, f"{target} fetches to succeed")
        if done < len(step_ids):
            victim = rng.randrange(2)
            clusters[victim].kill_all()
            kills += 1
            clusters[victim] = cluster.start("-w", "2")
    cluster.wait_until(lambda: workflow(workflow_id).state != "RUNNING", "the workflow to end")

    assert kills >= 3
    info = workflow(workflow_id)
    assert info.state == "SUCCEEDED"
    assert tags(cluster).count("merge:200") == 1
    assert collections.Counter(t for t in tags(cluster) if t.startswith("merge")) == {"merge:200": 1}
    assert WorkflowStep.objects.get(job_id=info.steps["merge"].job_id).waiting_for == 0
