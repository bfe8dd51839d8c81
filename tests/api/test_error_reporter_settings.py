"""TASKMQ['error_reporter']: a wrong value fails the system checks (and so qcluster's start) with its
name; sync mode reports a failure as the cluster does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from django_taskmq import ConfigError, async_task
from django_taskmq.checks import check_settings
from django_taskmq.conf import from_mapping
from tests.conftest import ROOT, db_env

reports = []


def collecting_reporter(exc, job):
    reports.append((type(exc).__name__, job.id, job.attempt, job.state, job.final))


@pytest.mark.parametrize("value", ["report", "a..b", 3, "a.b-c"])
def test_a_malformed_path_is_a_config_error(value):
    with pytest.raises(ConfigError, match="'error_reporter'"):
        from_mapping({"error_reporter": value})


@pytest.mark.parametrize("value, problem", [("tests.nowhere.report", "cannot be imported"),
                                            ("tests.api.test_error_reporter_settings.JOB_LIMIT", "not callable")])
def test_a_path_that_is_not_a_callable_fails_the_checks(taskmq_settings, value, problem):
    taskmq_settings(error_reporter=value)
    [error] = [m for m in check_settings() if m.id == "taskmq.E004"]
    assert "TASKMQ['error_reporter']" in error.msg and problem in error.msg


JOB_LIMIT = 3


@pytest.mark.slow
def test_qcluster_refuses_to_start_with_a_reporter_that_does_not_import(transactional_db):
    env = db_env({"TASKMQ_OVERRIDES": json.dumps({"error_reporter": "tests.nowhere.report"})})
    done = subprocess.run([sys.executable, "manage.py", "qcluster", "--burst"], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "taskmq.E004" in done.stderr and "TASKMQ['error_reporter'] 'tests.nowhere.report'" in done.stderr


def test_sync_mode_reports_each_failed_execution(taskmq_settings, transactional_db):
    taskmq_settings(error_reporter="tests.api.test_error_reporter_settings.collecting_reporter", sync=True)
    reports.clear()
    job = async_task("tests.tasks.fail", "x", ack_failure=True)
    assert reports == [("TaskFailed", job, 1, "FAILED", True)]
    async_task("tests.tasks.noop")
    assert len(reports) == 1


def test_django_q2_sentry_reporter_maps_to_the_sentry_reporter():
    from django_taskmq.compat.q_cluster import translate

    taskmq, notes = translate({"error_reporter": {"sentry": {"dsn": "https://key@sentry.example/1"}, "rollbar": {}}})
    assert taskmq == {"error_reporter": "django_taskmq.contrib.sentry.report"}
    assert [where for where, _ in notes] == ["Q_CLUSTER['error_reporter']['sentry']",
                                             "Q_CLUSTER['error_reporter']['rollbar']"]
    assert "sentry_sdk.init" in notes[0][1]
    from_mapping(taskmq)  # a valid TASKMQ
