"""Workflows through the public API, in process (sync mode runs the steps here, through the same
reserve/execute/record path as a cluster): validation at the call, all steps or none, failure
propagation, replays that resume, cancellation, the signal, chains as workflows and retention.
Real processes: tests/cluster/test_workflows.py."""

from __future__ import annotations

import time

import pytest

from django_taskmq import Chain, ConfigError, Workflow, async_chain, cancel, cancel_workflow, workflow
from django_taskmq.brokers import get_broker
from django_taskmq.models import Job, WorkflowEdge, WorkflowStep
from django_taskmq.models import Workflow as WorkflowRecord
from django_taskmq.signals import workflow_finished

pytestmark = pytest.mark.django_db(transaction=True)

T = "tests.tasks"


def states(workflow_id: str) -> dict[str, str]:
    return {name: step.state for name, step in workflow(workflow_id).steps.items()}


def run_ready(workflow_id: str) -> None:
    """Run the steps that are ready, in order, until none is (what a cluster would do)."""
    from django_taskmq.api import run_sync

    while True:
        ready = [s.job_id for s in workflow(workflow_id).steps.values() if s.state == "QUEUED"]
        if not ready:
            return
        for job_id in sorted(ready):
            run_sync(job_id)


@pytest.mark.parametrize("build, match", [
    (lambda wf: None, "at least one step"),
    (lambda wf: wf.add(f"{T}.noop", name="a", after=["x"]), r"step 'a' waits for unknown step\(s\) \['x'\]"),
    (lambda wf: (wf.add(f"{T}.noop", name="a", after=["b"]), wf.add(f"{T}.noop", name="b", after=["a"])),
     "cycle: (a -> b -> a|b -> a -> b)"),
])
def test_an_empty_workflow_an_unknown_name_and_a_cycle_are_refused_and_nothing_is_stored(build, match):
    wf = Workflow()
    build(wf)
    with pytest.raises(ConfigError, match=match):
        wf.enqueue()
    assert not Job.objects.exists() and not WorkflowRecord.objects.exists() and not WorkflowStep.objects.exists()


@pytest.mark.parametrize("call, match", [
    (lambda wf: wf.add(f"{T}.noop", name="a"), "already has a step named 'a'"),
    (lambda wf: wf.add(f"{T}.noop", name=""), "name must be a string"),
    (lambda wf: wf.add(f"{T}.noop", after="a"), "list of step names"),
    (lambda wf: wf.add(f"{T}.noop", after=["a", "a"]), "twice"),
    (lambda wf: wf.add(f"{T}.noop", run_on_failure=1), "run_on_failure must be True or False"),
    (lambda wf: wf.add(f"{T}.noop", key="k"), "does not take key"),
    (lambda wf: wf.add(f"{T}.noop", unique_key="k"), "does not take unique_key"),
    (lambda wf: wf.add(f"{T}.noop", sync=True), "does not take sync"),
    (lambda wf: wf.add(f"{T}.noop", queue="no-such-queue"), "no-such-queue"),
    (lambda wf: wf.add(f"{T}.noop", q_options=[1]), "q_options must be a dict"),
    (lambda wf: wf.add("not a path"), "func"),
])
def test_a_bad_step_is_a_config_error_at_add(call, match):
    wf = Workflow()
    wf.add(f"{T}.noop", name="a")
    with pytest.raises(ConfigError, match=match):
        call(wf)
    assert list(wf.steps) == ["a"]


def test_an_unpicklable_argument_fails_the_enqueue_and_stores_no_step():
    wf = Workflow()
    wf.add(f"{T}.noop", 1, name="a")
    wf.add(f"{T}.noop", lambda: None, name="b", after=["a"])
    with pytest.raises(ConfigError, match="cannot be pickled"):
        wf.enqueue()
    assert not Job.objects.exists() and not WorkflowRecord.objects.exists()


def test_a_workflow_is_queued_once():
    wf = Workflow()
    wf.add(f"{T}.noop")
    wf.enqueue()
    with pytest.raises(ConfigError, match="queued already"):
        wf.enqueue()


def test_a_workflow_key_queues_it_once_within_the_ttl_apart_from_job_keys():
    def build(key="report-42"):
        wf = Workflow(name="report", key=key)
        wf.add(f"{T}.noop", name="a")
        wf.add(f"{T}.noop", name="b", after=["a"])
        return wf

    first = build().enqueue()
    again = build()
    assert again.enqueue() == first and again.job_ids == {}
    assert WorkflowRecord.objects.count() == 1 and Job.objects.count() == 2
    assert build("other").enqueue() != first
    from django_taskmq import async_task

    job_id = async_task(f"{T}.noop", key="report-42")  # a job's key is another namespace
    assert job_id not in (first,) and Job.objects.filter(pk=job_id).exists()
    with pytest.raises(ConfigError, match="key must be a string"):
        Workflow(key="x" * 247)


def test_steps_are_rows_from_the_start_and_options_apply_per_step():
    wf = Workflow(name="report-42")
    a = wf.add(f"{T}.add", 1, 2, name="a", queue="reports", priority=7, max_deliveries=3)
    wf.add(f"{T}.echo", name="b", after=[a], q_options={"queue": "emails"}, queue="a function argument")
    workflow_id = wf.enqueue()
    assert workflow_id == wf.id
    jobs = {s.name: Job.objects.get(pk=s.job_id) for s in workflow(workflow_id).steps.values()}
    assert (jobs["a"].state, jobs["a"].queue, jobs["a"].priority, jobs["a"].max_deliveries) == ("QUEUED", "reports", 7, 3)
    assert (jobs["b"].state, jobs["b"].queue) == ("WAITING", "emails")
    assert jobs["b"].kwargs == {"queue": "a function argument"}
    assert WorkflowEdge.objects.get().upstream == jobs["a"].pk
    info = workflow(workflow_id)
    assert (info.name, info.state, info.steps["b"].after) == ("report-42", "RUNNING", ("a",))
    assert workflow("no-such-id") is None
    with pytest.raises(ConfigError):
        workflow(None)


def test_a_diamond_runs_inline_with_upstream_results_and_the_signal_says_how_it_ended():
    ended = []

    def listener(sender, workflow_id, state, **kwargs):
        ended.append((workflow_id, state))

    workflow_finished.connect(listener)
    try:
        wf = Workflow()
        wf.add(f"{T}.add", 1, 2, name="a")
        wf.add(f"{T}.add", 3, 4, name="b")
        wf.add("tests.cluster.tasks_workflow.total", "c", name="c", after=["a", "b"])
        wf.add("tests.cluster.tasks_workflow.merge", "d", name="d", after=["c"])
        workflow_id = wf.enqueue(sync=True)
    finally:
        workflow_finished.disconnect(listener)
    info = workflow(workflow_id)
    assert info.state == "SUCCEEDED" and set(states(workflow_id).values()) == {"SUCCEEDED"}
    assert info.steps["c"].result == 10 and info.steps["d"].result == {"c": 10}
    assert ended == [(workflow_id, "SUCCEEDED")]
    assert WorkflowRecord.objects.get().open_steps == 0


def test_failure_propagates_transitively_a_run_on_failure_step_runs_and_a_replay_resumes():
    wf = Workflow()
    wf.add(f"{T}.fail", "no", name="a", max_deliveries=1)
    wf.add(f"{T}.add", 1, 1, name="b")
    wf.add(f"{T}.noop", name="c", after=["a", "b"])
    wf.add(f"{T}.noop", name="d", after=["c"])
    wf.add("tests.cluster.tasks_workflow.cleanup", name="e", after=["c"], run_on_failure=True)
    workflow_id = wf.enqueue(sync=True)
    assert states(workflow_id) == {"a": "DEAD", "b": "SUCCEEDED", "c": "CANCELLED", "d": "CANCELLED",
                                   "e": "SUCCEEDED"}
    info = workflow(workflow_id)
    assert info.state == "FAILED" and info.finished_at is not None
    assert info.steps["c"].error == "upstream step 'a' ended DEAD"
    assert info.steps["d"].error == "upstream step 'c' ended CANCELLED"

    letter = get_broker().dead_letters().get(job_id=info.steps["a"].job_id)
    Job.objects.filter(pk=letter.job_id).update(func=f"{T}.noop")  # (the fix is deployed: same id, now it works)
    # A package is signed: the fixed function goes in a new one, as a deploy would change the code.
    from django_taskmq.options import JobTemplate
    from django_taskmq.conf import get_settings

    Job.objects.filter(pk=letter.job_id).update(
        payload=JobTemplate(f"{T}.noop", {"workflow": workflow_id}, get_settings()).values((), {})["payload"])
    get_broker().replay_dead(letter.pk)
    assert workflow(workflow_id).state == "RUNNING"
    assert states(workflow_id) == {"a": "QUEUED", "b": "SUCCEEDED", "c": "WAITING", "d": "WAITING", "e": "SUCCEEDED"}
    assert WorkflowRecord.objects.get().open_steps == 3

    run_ready(workflow_id)
    assert states(workflow_id) == dict.fromkeys("abcde", "SUCCEEDED")
    assert workflow(workflow_id).state == "SUCCEEDED"


def test_a_step_reopened_by_one_replay_is_cancelled_again_by_another_failed_dependency():
    wf = Workflow()
    wf.add(f"{T}.fail", name="a", ack_failure=True)
    wf.add(f"{T}.fail", name="b", ack_failure=True)
    wf.add(f"{T}.noop", name="c", after=["a", "b"])
    workflow_id = wf.enqueue(sync=True)
    first = workflow(workflow_id).steps["c"].error
    assert states(workflow_id) == {"a": "FAILED", "b": "FAILED", "c": "CANCELLED"}
    assert first == "upstream step 'a' ended FAILED"

    get_broker().retry_jobs([workflow(workflow_id).steps["a"].job_id])  # the admin's "retry"
    assert states(workflow_id) == {"a": "QUEUED", "b": "FAILED", "c": "CANCELLED"}
    assert workflow(workflow_id).steps["c"].error == "upstream step 'b' ended FAILED"
    assert workflow(workflow_id).state == "RUNNING"
    run_ready(workflow_id)  # a fails again
    assert workflow(workflow_id).state == "FAILED"
    assert WorkflowRecord.objects.get().open_steps == 0


def test_cancelling_a_waiting_step_cancels_its_dependents_and_cancel_workflow_ends_cancelled():
    wf = Workflow()
    wf.add(f"{T}.noop", name="a")
    wf.add(f"{T}.noop", name="b", after=["a"])
    wf.add(f"{T}.noop", name="c", after=["b"])
    workflow_id = wf.enqueue()
    assert cancel(workflow(workflow_id).steps["b"].job_id)
    assert states(workflow_id) == {"a": "QUEUED", "b": "CANCELLED", "c": "CANCELLED"}
    assert workflow(workflow_id).steps["c"].error == "upstream step 'b' ended CANCELLED"
    assert cancel_workflow(workflow_id) == 1
    assert states(workflow_id) == dict.fromkeys("abc", "CANCELLED")
    assert workflow(workflow_id).state == "CANCELLED"


def test_a_chain_is_a_workflow_whose_links_wait_for_each_other():
    first = Chain(group="g").append(f"{T}.add", 1, 2).append(f"{T}.fail", "x", q_options={"max_deliveries": 1}) \
        .append(f"{T}.noop").run()
    step = WorkflowStep.objects.get(job_id=first)
    assert step.name == "link-1" and step.workflow.name == "chain g"
    jobs = list(Job.objects.order_by("id").values_list("state", "group"))
    assert jobs == [("QUEUED", "g"), ("WAITING", "g"), ("WAITING", "g")]
    run_ready(step.workflow_id)
    assert states(step.workflow_id) == {"link-1": "SUCCEEDED", "link-2": "DEAD", "link-3": "CANCELLED"}

    first = async_chain([(f"{T}.add", (2, 3)), (f"{T}.add", (4, 5))], group="inline", sync=True)
    assert Job.objects.get(pk=first).result == 5
    assert sorted(Job.objects.filter(group="inline").values_list("state", flat=True)) == ["SUCCEEDED"] * 2


def test_retention_keeps_the_steps_of_a_running_workflow():
    wf = Workflow()
    wf.add(f"{T}.add", 1, 2, name="a")
    wf.add(f"{T}.noop", name="b", after=["a"])
    workflow_id = wf.enqueue()
    from django_taskmq.api import run_sync

    run_sync(workflow(workflow_id).steps["a"].job_id)
    broker = get_broker()
    assert broker.prune(keep=0) == 0
    assert broker.delete_finished("SUCCEEDED", before=time.time() + 3600) == 0
    assert Job.objects.filter(pk=workflow(workflow_id).steps["a"].job_id).exists()
    run_ready(workflow_id)
    assert workflow(workflow_id).state == "SUCCEEDED"
    assert broker.delete_finished("SUCCEEDED", before=time.time() + 3600) == 2


def test_an_ended_workflow_goes_once_retention_took_its_last_job():
    finished, running = Workflow(name="finished"), Workflow(name="running")
    finished.add(f"{T}.add", 1, 2, name="a")
    finished.add(f"{T}.noop", name="b", after=["a"])
    finished_id = finished.enqueue(sync=True)
    running.add(f"{T}.noop", name="a")
    running_id = running.enqueue()
    broker = get_broker()
    assert broker.prune_workflows() == 0  # the finished one still has its jobs
    Job.objects.filter(pk=running.job_ids["a"]).delete()  # (a running workflow is kept, jobs or not)
    assert broker.delete_finished("SUCCEEDED", before=time.time() + 3600) == 2
    assert broker.prune_workflows() == 1
    assert list(WorkflowRecord.objects.values_list("pk", flat=True)) == [running_id]
    assert not WorkflowStep.objects.filter(workflow_id=finished_id).exists()
    assert not WorkflowEdge.objects.filter(workflow_id=finished_id).exists()
    assert workflow(finished_id) is None
