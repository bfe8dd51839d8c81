"""Schedules may name only the project's tasks: checked at save and again when they fire."""

from __future__ import annotations

import datetime
import os

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_taskmq import ConfigError, schedule
from django_taskmq.runtime.allowed_tasks import allowed_prefixes, check_allowed
from django_taskmq.models import Job, Schedule
from django_taskmq.scheduler import tick

pytestmark = pytest.mark.django_db

DANGEROUS = [
    "os.system",
    "subprocess.getoutput",
    "builtins.eval",
    "tests.tasks.os.system",  # os imported into an allowed module is still os
    "tests.tasks.task",  # a Python function imported into an allowed module, defined elsewhere
]


@pytest.mark.parametrize("path", DANGEROUS)
def test_schedule_refuses_functions_outside_the_task_modules(path):
    with pytest.raises(ConfigError, match="allowed task modules|not a Python function|not in an allowed"):
        schedule(path, "echo pwned")
    assert not Schedule.objects.exists()


def test_schedule_refuses_a_callable_from_the_standard_library():
    with pytest.raises(ConfigError):
        schedule(os.system, "echo pwned")


@pytest.mark.parametrize("path", DANGEROUS)
def test_model_validation_refuses_them(path):
    with pytest.raises(ValidationError) as info:
        Schedule(name="x", func=path).full_clean()
    assert "func" in info.value.message_dict


def test_a_row_written_into_the_table_never_fires_and_is_disabled(broker, run_log, caplog):
    """A disallowed row (the admin bypassed, or raw SQL) is disabled and logged at fire time; no job."""
    due = timezone.now() - datetime.timedelta(minutes=1)
    bad = Schedule.objects.create(name="bad", func="os.system", args=["touch /tmp/pwned"], next_run=due)
    good = Schedule.objects.create(name="good", func="tests.tasks.record_run", args=["ok"], next_run=due)

    fired = tick()

    assert list(Job.objects.values_list("func", flat=True)) == ["tests.tasks.record_run"]
    assert fired == [Job.objects.get().pk]
    bad.refresh_from_db()
    good.refresh_from_db()
    assert bad.repeats == 0 and good.last_job == fired[0]
    assert any("bad" in r.getMessage() and "disabled" in r.getMessage() for r in caplog.records)


def test_project_functions_and_declared_tasks_are_allowed():
    assert check_allowed("tests.tasks.record_run") == "tests.tasks.record_run"
    assert check_allowed("tests.tasks.multiply") == "tests.tasks.multiply"  # a @task
    assert "tests" in allowed_prefixes() and "django_taskmq" in allowed_prefixes()


def test_task_modules_narrows_and_widens(taskmq_settings):
    taskmq_settings(task_modules=["example"])
    with pytest.raises(ConfigError, match="not in an allowed"):
        check_allowed("tests.tasks.record_run")
    # A @task declared in an imported module stays allowed wherever it lives.
    assert check_allowed("tests.tasks.multiply") == "tests.tasks.multiply"
    taskmq_settings(task_modules=["json"])
    assert check_allowed("json.dumps") == "json.dumps"


def test_a_module_outside_the_prefixes_is_not_imported():
    """Refused by its name alone: naming a module must not run its import-time code."""
    import sys

    assert "this_module_does_not_exist_anywhere" not in sys.modules
    with pytest.raises(ConfigError, match="not in an allowed"):
        check_allowed("this_module_does_not_exist_anywhere.f")


def test_task_modules_setting_is_checked():
    from django_taskmq.conf import from_mapping

    with pytest.raises(ConfigError, match="task_modules"):
        from_mapping({"task_modules": "tests"})
    with pytest.raises(ConfigError, match="task_modules"):
        from_mapping({"task_modules": ["not a module"]})


def test_admin_add_form_refuses_a_disallowed_function(admin_client):
    response = admin_client.post("/admin/django_taskmq/schedule/add/", {
        "name": "evil", "func": "os.system", "args": '["id"]', "kwargs": "{}", "schedule_type": "O",
        "repeats": -1, "next_run_0": "2030-01-01", "next_run_1": "00:00:00", "priority": 0,
    })
    assert response.status_code == 200  # the form again, with its error
    assert "not in an allowed task module" in response.content.decode()
    assert not Schedule.objects.exists()


def test_admin_add_form_saves_an_allowed_function(admin_client):
    response = admin_client.post("/admin/django_taskmq/schedule/add/", {
        "name": "fine", "func": "tests.tasks.noop", "args": "[]", "kwargs": "{}", "schedule_type": "C",
        "cron": "*/5 * * * *", "repeats": -1, "next_run_0": "2030-01-01", "next_run_1": "00:00:00", "priority": 0,
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Schedule.objects.get().func == "tests.tasks.noop"


def test_admin_add_form_refuses_a_broken_cron(admin_client):
    response = admin_client.post("/admin/django_taskmq/schedule/add/", {
        "name": "broken", "func": "tests.tasks.noop", "args": "[]", "kwargs": "{}", "schedule_type": "C",
        "cron": "61 * * * *", "repeats": -1, "next_run_0": "2030-01-01", "next_run_1": "00:00:00", "priority": 0,
    })
    assert response.status_code == 200
    assert not Schedule.objects.exists()
