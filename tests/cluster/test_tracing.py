"""OpenTelemetry in a real cluster: the SDK exports spans to a file in the web process (this one) and
in the cluster (tests.observe); the worker's span joins the trace of the enqueue span."""

from __future__ import annotations

import signal

import pytest

from django_taskmq import async_task
from tests.conftest import finish, start_script
from tests.observe import SPANS_FILE, export_spans_to, read_spans

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def spans(cluster, tmp_path, monkeypatch):
    """Turn tracing on; return (web spans file, cluster spans file)."""
    web, worker = str(tmp_path / "web-spans.jsonl"), str(tmp_path / "cluster-spans.jsonl")
    export_spans_to(web)
    monkeypatch.setenv(SPANS_FILE, worker)
    cluster.configure(opentelemetry=True)
    return web, worker


def run_and_stop(cluster, ids, *args):
    qc = cluster.start("-w", "2", *args)
    cluster.wait_final(ids, alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()


def test_the_run_span_is_a_child_of_the_enqueue_span(cluster, spans):
    from opentelemetry import trace

    web, worker = spans
    with trace.get_tracer("tests").start_as_current_span("POST /orders") as request:
        job = async_task("tests.tasks.noop", queue="a", priority=5)
    [enqueue] = [s for s in read_spans(web) if s["name"] == "taskmq enqueue tests.tasks.noop"]
    assert enqueue["kind"] == "SpanKind.PRODUCER"
    assert enqueue["parent_id"] == f"0x{request.get_span_context().span_id:016x}"
    assert enqueue["attributes"]["taskmq.job_id"] == job
    assert enqueue["attributes"]["messaging.destination.name"] == "a"

    run_and_stop(cluster, [job])
    [run] = [s for s in read_spans(worker) if s["name"] == "taskmq run tests.tasks.noop"]
    assert run["context"]["trace_id"] == enqueue["context"]["trace_id"]
    assert run["parent_id"] == enqueue["context"]["span_id"]
    assert run["kind"] == "SpanKind.CONSUMER"
    attributes = run["attributes"]
    assert {k: attributes[k] for k in ("messaging.system", "messaging.operation.type", "messaging.message.id",
                                       "taskmq.job_id", "taskmq.queue", "taskmq.priority", "taskmq.attempt",
                                       "taskmq.deliveries", "taskmq.outcome")} == \
        {"messaging.system": "taskmq", "messaging.operation.type": "process", "messaging.message.id": job,
         "taskmq.job_id": job, "taskmq.queue": "a", "taskmq.priority": 5, "taskmq.attempt": 1,
         "taskmq.deliveries": 1, "taskmq.outcome": "success"}
    assert run["status"]["status_code"] == "UNSET"


def test_every_attempt_of_a_retried_job_is_in_the_enqueue_trace(cluster, spans):
    web, worker = spans
    job = async_task("tests.observe.failing", "again", max_deliveries=2)
    [enqueue] = read_spans(web)[-1:]
    run_and_stop(cluster, [job])
    runs = sorted((s for s in read_spans(worker) if s["attributes"].get("taskmq.job_id") == job),
                  key=lambda s: s["attributes"]["taskmq.attempt"])
    assert [s["attributes"]["taskmq.attempt"] for s in runs] == [1, 2]
    for attempt, span in enumerate(runs, 1):
        assert (span["context"]["trace_id"], span["parent_id"]) == \
            (enqueue["context"]["trace_id"], enqueue["context"]["span_id"])
        [link] = span["links"]  # each attempt links to the creation context
        assert (link["context"]["span_id"], link["attributes"]["taskmq.attempt"]) == \
            (enqueue["context"]["span_id"], attempt)
        assert span["status"]["status_code"] == "ERROR"
        assert span["attributes"]["taskmq.outcome"] == "failure"
        [event] = span["events"]
        assert (event["name"], event["attributes"]["exception.type"], event["attributes"]["exception.message"]) == \
            ("exception", "tests.observe.Failed", "again")


def test_nothing_of_opentelemetry_is_imported_when_it_is_off(transactional_db):
    out = finish(start_script("""
        import sys
        from django_taskmq import async_task, fetch
        job = async_task("tests.tasks.noop", sync=True)
        print(fetch(job).state, any(m.split(".")[0] == "opentelemetry" for m in sys.modules))
    """))
    assert out.split() == ["SUCCEEDED", "False"]


def test_a_chain_runs_in_the_trace_of_its_enqueue(cluster, spans):
    """A chain is a workflow: one producer span for the whole of it, each link's run its child."""
    from django_taskmq import async_chain

    web, worker = spans
    async_chain([("tests.tasks.add", (1, 2), {}), ("tests.tasks.noop", (), {})])
    [enqueue] = [s for s in read_spans(web) if s["name"].startswith("taskmq enqueue")]
    assert enqueue["name"].startswith("taskmq enqueue workflow chain")
    assert enqueue["attributes"]["messaging.batch.message_count"] == 2
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: len([s for s in read_spans(worker) if s["name"].startswith("taskmq run")]) == 2,
                       "both links ran", alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
    runs = [s for s in read_spans(worker) if s["name"].startswith("taskmq run")]
    assert sorted(s["name"] for s in runs) == ["taskmq run tests.tasks.add", "taskmq run tests.tasks.noop"]
    assert {s["context"]["trace_id"] for s in runs} == {enqueue["context"]["trace_id"]}
    assert {s["parent_id"] for s in runs} == {enqueue["context"]["span_id"]}


