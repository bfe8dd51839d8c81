"""Django tasks defined in modules Django imports while it loads the apps (an app's package and its
``models.py``), with ``TASKS`` naming our backend: the project starts, and a real ``qcluster`` runs
them. Django's own backends allow this; ours must not import models when it is built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.django6.djtasks import FRAMEWORK

pytestmark = [pytest.mark.cluster, pytest.mark.sqlite_only]

TIMEOUT = 180


def env_for(db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TASKMQ_OVERRIDES"}
    env.update(DJANGO_SETTINGS_MODULE="tests.settings_early_tasks", TASKMQ_DB_NAME=str(db), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p))
    return env


def python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_and_building_the_backend_imports_no_model(tmp_path):
    out = python(f"""
import sys
from django.conf import settings
settings.INSTALLED_APPS  # configured, the app registry not populated
from django_taskmq.backends.tasks import TaskMQBackend
backend = TaskMQBackend("default", {{"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend", "OPTIONS": {{}}}})
print(sorted(m for m in ("django_taskmq.models", "django_taskmq.api", "django_taskmq.brokers.orm") if m in sys.modules))
""", env_for(tmp_path / "db.sqlite3"))
    assert out.strip() == "[]"


def test_tasks_defined_while_the_apps_load_run_on_qcluster(tmp_path):
    env = env_for(tmp_path / "db.sqlite3")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=str(ROOT), env=env, check=True,
                   timeout=TIMEOUT)
    ids = json.loads(python("""
import json
import django
django.setup()
from tests.django6 import early_app
from tests.django6.early_app.models import triple
print(json.dumps([early_app.double.enqueue(21).id, triple.enqueue(5).id]))
""", env))
    burst = subprocess.run([sys.executable, "manage.py", "qcluster", "--burst"], cwd=str(ROOT), env=env,
                           capture_output=True, text=True, timeout=TIMEOUT)
    assert burst.returncode == 0, burst.stderr
    out = python(f"""
import json
import django
django.setup()
from tests.django6 import early_app
from tests.django6.early_app.models import triple
double, tripled = early_app.double.get_result({ids[0]!r}), triple.get_result({ids[1]!r})
print(json.dumps([double.status, double.return_value, tripled.status, tripled.return_value, tripled.task.priority]))
""", env)
    assert json.loads(out) == ["SUCCESSFUL", 42, "SUCCESSFUL", 15, 50], FRAMEWORK
