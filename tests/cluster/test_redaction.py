"""Redaction with a real cluster: a failing task's ``password`` (a name ``TASKMQ['redact']`` lists)
and its encrypted arguments reach neither the Sentry event (captured by the file transport of
tests.observe), nor the cluster's log records (the documented JSON configuration), nor the
OpenTelemetry spans of the enqueue and the run."""

from __future__ import annotations

import json
import signal

import pytest

from django_taskmq import async_task
from django_taskmq.encryption import generate_key
from tests.observe import JSON_LOGS, SENTRY_FILE, SPANS_FILE, export_spans_to, read_events, read_spans

pytestmark = [pytest.mark.cluster]

PASSWORD = "hunter2"
MARKER = "marker-0be7f1"  # an encrypted argument


@pytest.mark.parametrize("reporter", ["report", "report_with_arguments"])
def test_a_failing_tasks_password_reaches_neither_sentry_nor_the_log(cluster, tmp_path, monkeypatch, reporter):
    events_file = str(tmp_path / "sentry.jsonl")
    monkeypatch.setenv(SENTRY_FILE, events_file)
    monkeypatch.setenv(JSON_LOGS, "1")
    cluster.configure(error_reporter=f"django_taskmq.contrib.sentry.{reporter}", encryption_keys=[generate_key()])
    plain = async_task("tests.observe.logs_in", "ada", password=PASSWORD, options={"api_key": PASSWORD},
                       max_deliveries=1)
    sealed = async_task("tests.observe.logs_in", "bob", password=PASSWORD, email=MARKER, encrypt=True,
                        max_deliveries=1)
    qc = cluster.start("-w", "1")
    cluster.wait_final([plain, sealed], alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()

    events = read_events(events_file)
    assert sorted(e["tags"]["taskmq.job_id"] for e in events) == sorted([plain, sealed])
    records = [json.loads(line) for line in qc.stderr_path.read_text().splitlines() if line.strip()]
    assert {r.get("job_id") for r in records} >= {plain, sealed}
    for what, text in (("events", json.dumps(events)), ("log records", json.dumps(records))):
        for secret in (PASSWORD, MARKER):
            assert secret not in text, (what, text[max(text.index(secret) - 300, 0):text.index(secret) + 100])
    by_job = {e["tags"]["taskmq.job_id"]: e for e in events}
    frames = by_job[plain]["exception"]["values"][-1]["stacktrace"]["frames"]
    if reporter == "report_with_arguments":
        # The arguments are sent, redacted: the user's name is there, the password masked.
        assert by_job[plain]["contexts"]["taskmq"]["args"] == ["ada"]
        assert by_job[plain]["contexts"]["taskmq"]["kwargs"]["password"] == "‹redacted›"
        assert "ada" in json.dumps(frames[-1]["vars"])
        # The encrypted job sends none, and no local variables.
        assert by_job[sealed]["contexts"]["taskmq"]["args"] == ["‹encrypted›"]
    else:
        assert "args" not in by_job[plain]["contexts"]["taskmq"]
        assert "vars" not in frames[-1]
    assert "vars" not in by_job[sealed]["exception"]["values"][-1]["stacktrace"]["frames"][-1]


def test_no_span_carries_a_password_or_an_encrypted_argument(cluster, tmp_path, monkeypatch):
    web, worker = str(tmp_path / "web-spans.jsonl"), str(tmp_path / "cluster-spans.jsonl")
    export_spans_to(web)
    monkeypatch.setenv(SPANS_FILE, worker)
    cluster.configure(opentelemetry=True, encryption_keys=[generate_key()])
    plain = async_task("tests.observe.logs_in", "ada", password=PASSWORD, max_deliveries=1)
    sealed = async_task("tests.observe.logs_in", "bob", email=MARKER, encrypt=True, max_deliveries=1)
    qc = cluster.start("-w", "1")
    cluster.wait_final([plain, sealed], alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
    spans = read_spans(web) + read_spans(worker)
    assert {s["attributes"].get("taskmq.job_id") for s in spans} >= {plain, sealed}
    text = json.dumps(spans)
    assert PASSWORD not in text and MARKER not in text
