"""``manage.py qconfig --check`` in a subprocess, as CI would run it before a deploy: a good
configuration passes; each kind of problem a cluster would refuse is one line and exit status 1."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pytest
from django.utils import timezone

from django_taskmq import schedule
from django_taskmq.models import Schedule

from ..conftest import ROOT, db_env, unreachable_database_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

QUEUES = {"default": {"weight": 1}, "a": {"weight": 1}, "b": {"weight": 2}, "emails": {"weight": 3},
          "reports": {"weight": 1}}


def qconfig_check(**overrides) -> tuple[int, list[str], str]:
    env = db_env({"TASKMQ_OVERRIDES": json.dumps(overrides)} if overrides else None)
    done = subprocess.run([sys.executable, "manage.py", "qconfig", "--check"], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stderr.strip().splitlines(), done.stdout


def test_a_good_configuration_passes():
    schedule("tests.tasks.add", 1, 2, name="adder", schedule_type=Schedule.CRON, cron="*/5 * * * *",
             tz="Europe/Berlin", queue="reports")
    code, lines, out = qconfig_check()
    assert (code, lines) == (0, []), lines
    assert "no problem found" in out


def test_each_problem_is_one_line():
    soon = timezone.now() + datetime.timedelta(hours=1)
    # (schedule() refuses these arguments at the call: written through the ORM, as the admin could)
    Schedule.objects.create(name="too-many-args", func="tests.tasks.add", args=[1, 2, 3], next_run=soon)
    schedule("tests.tasks.add", 1, 2, name="to-reports", queue="reports", next_run=soon)
    Schedule.objects.create(name="gone", func="tests.tasks.no_such_function", next_run=soon)
    Schedule.objects.create(name="bad-cron", func="tests.tasks.noop", schedule_type=Schedule.CRON, cron="61 * * * *",
                            next_run=soon)
    Schedule.objects.create(name="bad-zone", func="tests.tasks.noop", tz="Atlantis/Capital", next_run=soon)
    Schedule.objects.create(name="used-up", func="tests.tasks.no_such_function", repeats=0, next_run=soon)
    # "reports" removed, and "b", which tests.tasks declares a @task in.
    queues = {k: v for k, v in QUEUES.items() if k not in ("reports", "b")}
    code, lines, _ = qconfig_check(queues=queues)
    assert code == 1
    text = "\n".join(lines)
    assert any(line.startswith("schedule 'too-many-args': its arguments do not fit tests.tasks.add") for line in lines), text
    assert any(line.startswith("schedule 'to-reports': queue:") and "'reports'" in line for line in lines), text
    assert any(line.startswith("schedule 'gone': func:") for line in lines), text
    assert any(line.startswith("schedule 'bad-cron': cron:") for line in lines), text
    assert any(line.startswith("schedule 'bad-zone': tz:") for line in lines), text
    assert "used-up" not in text  # a schedule that will never fire again is not a problem
    assert any(line.startswith("@task tests.tasks.") and "queue 'b'" in line for line in lines), text


def test_bad_settings_are_named():
    code, lines, _ = qconfig_check(workers=0)
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("settings: TASKMQ['workers'] must be"), lines


def test_unapplied_migrations_are_named():
    from django.core.management import call_command

    call_command("migrate", "django_taskmq", "0008", verbosity=0)
    try:
        code, lines, _ = qconfig_check()
        assert code == 1, "\n".join(lines)
        assert any(line.startswith("database:") and "not applied" in line and "0009_schedule_tz" in line
                   and "run manage.py migrate" in line for line in lines), lines
    finally:
        call_command("migrate", "django_taskmq", verbosity=0)


def test_an_unreachable_database_is_one_line():
    env = unreachable_database_env()
    done = subprocess.run([sys.executable, "manage.py", "qconfig", "--check"], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("database: cannot reach"), lines
