"""The cluster's log with the documented JSON configuration (example/json_logging.py, python-json-logger):
every line is a JSON object, and every record about a job carries the job's fields."""

from __future__ import annotations

import json
import signal

import pytest

from django_taskmq import async_task
from django_taskmq.observability.joblog import FIELDS
from tests.observe import JSON_LOGS

pytestmark = [pytest.mark.cluster]


def test_the_cluster_log_parses_as_json_lines_with_the_job_fields(cluster, monkeypatch):
    monkeypatch.setenv(JSON_LOGS, "1")
    ok = async_task("tests.tasks.noop", queue="b", priority=3)
    dead = async_task("tests.observe.failing", "dead", max_deliveries=2)
    said = async_task("tests.observe.logs_a_line", "hello")
    qc = cluster.start("-w", "2")
    cluster.wait_final([ok, dead, said], alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()

    text = qc.stderr_path.read_text()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # fails on any other line
    assert any(r["message"].startswith("cluster ") and " stopped: " in r["message"] for r in records)
    about_jobs = [r for r in records if "job_id" in r]
    for record in about_jobs:
        assert set(FIELDS) <= record.keys(), record
        assert record["cluster"].startswith("tests:"), record
    by_job = {}
    for record in about_jobs:
        by_job.setdefault(record["job_id"], []).append(record)

    [success] = by_job[ok]
    assert (success["levelname"], success["name"], success["state"], success["task"]) == \
        ("DEBUG", "django_taskmq.jobs", "SUCCEEDED", "tests.tasks.noop")
    assert (success["queue"], success["priority"], success["attempt"]) == ("b", 3, 1)

    failures = [(r["levelname"], r["attempt"], r["status"], r["state"]) for r in by_job[dead]]
    assert sorted(failures) == [("ERROR", 2, "failure", "DEAD"), ("WARNING", 1, "failure", "RETRYING")]
    assert all(r["task"] == "tests.observe.failing" for r in by_job[dead])

    done, own = sorted(by_job[said], key=lambda r: r["name"])  # django_taskmq.jobs < tests.observe
    assert (own["name"], own["message"], own["task"], own["attempt"]) == \
        ("tests.observe", "task says hello", "tests.observe.logs_a_line", 1)
    assert done["state"] == "SUCCEEDED"
