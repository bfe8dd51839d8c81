"""TASKMQ['error_reporter'] in a real cluster: Sentry events (written to a file by the transport of
tests.observe), and reporters that raise or hang change no job's outcome."""

from __future__ import annotations

import json
import signal

import pytest

from django_taskmq import async_task
from tests.cluster.conftest import jobs
from tests.observe import SENTRY_FILE, read_events

pytestmark = [pytest.mark.cluster]

SECRET = "card-4242-4242"  # an argument that must not reach Sentry


def stop(cluster, qc) -> None:
    """Stop ``qc`` gracefully: its workers have reported (and flushed) everything when it exits."""
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()


def test_one_sentry_event_per_failed_execution(cluster, tmp_path, monkeypatch):
    events_file = str(tmp_path / "sentry.jsonl")
    monkeypatch.setenv(SENTRY_FILE, events_file)
    cluster.configure(error_reporter="django_taskmq.contrib.sentry.report")
    retried = async_task("tests.observe.failing", "retried", SECRET, max_deliveries=3, queue="a", priority=5)
    acked = async_task("tests.observe.failing", "acked", SECRET, ack_failure=True)
    succeeded = async_task("tests.tasks.noop", SECRET)
    qc = cluster.start("-w", "2")
    cluster.wait_final([retried, acked, succeeded], alive=[qc])
    stop(cluster, qc)

    events = read_events(events_file)
    seen = sorted((e["tags"]["taskmq.job_id"], e["tags"]["taskmq.attempt"], e["tags"]["taskmq.state"])
                  for e in events)
    assert seen == sorted([(retried, "1", "RETRYING"), (retried, "2", "RETRYING"), (retried, "3", "DEAD"),
                           (acked, "1", "FAILED")])
    for event in events:
        tags = event["tags"]
        job = retried if tags["taskmq.job_id"] == retried else acked
        assert tags["taskmq.task"] == "tests.observe.failing"
        assert (tags["taskmq.queue"], tags["taskmq.priority"]) == (("a", "5") if job == retried else ("default", "0"))
        assert event["contexts"]["taskmq"]["job_id"] == job
        assert "args" not in event["contexts"]["taskmq"]
        exception = event["exception"]["values"][-1]
        assert (exception["type"], exception["value"]) == ("Failed", "retried" if job == retried else "acked")
        assert exception["stacktrace"]["frames"][-1]["function"] == "failing"
    assert SECRET not in json.dumps(events)
    states = jobs([retried, acked, succeeded])
    assert [states[j].state for j in (retried, acked, succeeded)] == ["DEAD", "FAILED", "SUCCEEDED"]


def test_sentry_report_with_arguments(cluster, tmp_path, monkeypatch):
    events_file = str(tmp_path / "sentry.jsonl")
    monkeypatch.setenv(SENTRY_FILE, events_file)
    cluster.configure(error_reporter="django_taskmq.contrib.sentry.report_with_arguments")
    job = async_task("tests.observe.failing", "acked", SECRET, ack_failure=True)
    qc = cluster.start("-w", "1")
    cluster.wait_final([job], alive=[qc])
    stop(cluster, qc)
    [event] = read_events(events_file)
    assert event["contexts"]["taskmq"]["args"] == ["acked", SECRET]


@pytest.mark.parametrize("reporter", ["raising_reporter", "hanging_reporter"])
def test_a_reporter_that_raises_or_hangs_changes_nothing(cluster, reporter):
    # The tasks' timeout is shorter than the time a worker waits for a hung reporter: were that wait
    # part of the task's run, the job would end as a timeout.
    cluster.configure(error_reporter=f"tests.observe.{reporter}", timeout=2)
    dead = async_task("tests.observe.failing", "dead", max_deliveries=2)
    failed = async_task("tests.observe.failing", "failed", ack_failure=True)
    qc = cluster.start("-w", "1")
    cluster.wait_final([dead, failed], alive=[qc])
    after = async_task("tests.tasks.noop")
    cluster.wait_final([after], alive=[qc])
    found = jobs([dead, failed, after])
    assert [(found[j].state, found[j].deliveries) for j in (dead, failed, after)] == \
        [("DEAD", 2), ("FAILED", 1), ("SUCCEEDED", 1)]
    assert "TaskTimeout" not in (found[dead].error + found[failed].error)
    stop(cluster, qc)
    assert sorted(cluster.log()) == sorted([(dead, "reported:1:RETRYING"), (dead, "reported:2:DEAD"),
                                            (failed, "reported:1:FAILED")])


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_timeout_is_reported_once_as_it_is_recorded(cluster, tmp_path, monkeypatch, threads):
    events_file = str(tmp_path / "sentry.jsonl")
    monkeypatch.setenv(SENTRY_FILE, events_file)
    cluster.configure(error_reporter="django_taskmq.contrib.sentry.report")
    job = async_task("tests.cluster.tasks_cluster.spin", 30, timeout=1, max_deliveries=1)
    qc = cluster.start("-w", "1", "--threads", threads)
    cluster.wait_final([job], alive=[qc])
    stop(cluster, qc)
    [event] = read_events(events_file)
    assert (event["tags"]["taskmq.job_id"], event["tags"]["taskmq.state"], event["tags"]["taskmq.attempt"]) == \
        (job, "DEAD", "1")
    exception = event["exception"]["values"][-1]
    assert exception["type"] == "TaskTimeout" and "timeout of 1" in exception["value"]


def test_a_crash_is_reported_as_it_is_recorded(cluster, tmp_path, monkeypatch):
    events_file = str(tmp_path / "sentry.jsonl")
    monkeypatch.setenv(SENTRY_FILE, events_file)
    cluster.configure(error_reporter="django_taskmq.contrib.sentry.report")
    job = async_task("tests.tasks.crash", 3, max_deliveries=2)
    qc = cluster.start("-w", "1")
    cluster.wait_final([job], alive=[qc])
    stop(cluster, qc)
    seen = sorted((e["tags"]["taskmq.attempt"], e["tags"]["taskmq.state"], e["exception"]["values"][-1]["type"])
                  for e in read_events(events_file))
    assert seen == [("1", "RETRYING", "WorkerDied"), ("2", "DEAD", "WorkerDied")]
