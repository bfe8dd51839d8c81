"""TASKMQ['opentelemetry']: checked as a flag; in sync mode the run span is the enqueue span's child."""

from __future__ import annotations

import pytest

from django_taskmq import ConfigError, async_task
from django_taskmq.conf import from_mapping
from tests.observe import export_spans_to, read_spans


def test_the_setting_is_a_flag():
    with pytest.raises(ConfigError, match="'opentelemetry'"):
        from_mapping({"opentelemetry": "yes"})
    assert from_mapping({"opentelemetry": True}).opentelemetry is True


def test_sync_mode_runs_the_task_in_a_child_of_the_enqueue_span(taskmq_settings, transactional_db, tmp_path):
    path = str(tmp_path / "spans.jsonl")
    export_spans_to(path)
    taskmq_settings(opentelemetry=True, sync=True)
    job = async_task("tests.tasks.fail", "no", ack_failure=True)
    run, enqueue = read_spans(path)  # the run span ends first, inside the enqueue span
    assert (enqueue["name"], run["name"]) == ("taskmq enqueue tests.tasks.fail", "taskmq run tests.tasks.fail")
    assert run["parent_id"] == enqueue["context"]["span_id"]
    assert run["attributes"]["taskmq.job_id"] == enqueue["attributes"]["taskmq.job_id"] == job
    assert run["status"]["status_code"] == "ERROR"
