"""A cluster says what it does without any ``LOGGING`` setting: a new ``startproject`` site's
``qcluster --burst`` prints that it started, what it drained and that it stopped; ``-v 0`` only
warnings and errors. (The package suite runs the same site from the wheel, tests/packaging.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Its own site on Django's default SQLite settings, whatever this run's engine: run once.
pytestmark = [pytest.mark.cluster, pytest.mark.sqlite_only]

TASKS = "def add(a, b):\n    return a + b\n"


def run(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE") and not k.startswith("TASKMQ_")}
    done = subprocess.run(args, cwd=str(cwd), env={**env, "PYTHONUNBUFFERED": "1"}, text=True,
                          capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
    if check:
        assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A new startproject site with the app and a tasks app added, nothing else: no LOGGING."""
    django_admin = str(Path(sys.executable).with_name("django-admin"))
    run([django_admin, "startproject", "mysite"], cwd=tmp_path)
    site = tmp_path / "mysite"
    run([sys.executable, "manage.py", "startapp", "shop"], cwd=site)
    (site / "shop" / "tasks.py").write_text(TASKS)
    settings = site / "mysite" / "settings.py"
    assert "LOGGING" not in settings.read_text()
    settings.write_text(settings.read_text() + '\nINSTALLED_APPS += ["django_taskmq", "shop"]\n')
    run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=site)
    return site


def enqueue(site: Path, count: int) -> None:
    run([sys.executable, "manage.py", "shell", "-c",
         f"from django_taskmq import enqueue_many; enqueue_many('shop.tasks.add', [(i, 1) for i in range({count})])"],
        cwd=site)


def test_a_burst_in_a_new_site_prints_started_drained_and_stopped(site):
    enqueue(site, 3)
    burst = run([sys.executable, "manage.py", "qcluster", "--burst", "-w", "1"], cwd=site)
    lines = burst.stderr.splitlines()

    def one(pattern: str) -> str:
        found = [line for line in lines if re.search(pattern, line)]
        assert len(found) == 1, f"{pattern!r} once in:\n{burst.stderr}"
        return found[0]

    started = one(r"cluster default started \(default:")
    assert "1 workers, queues default, database 'default' (sqlite " in started and "burst" in started
    assert "drained queue(s) default: 3 succeeded, 0 failed, 0 timeouts, 0 crashes" in one(r"cluster default drained")
    assert "(burst drained)" in one(r"cluster default stopping")
    assert "3 succeeded" in one(r"cluster default stopped: ")
    steps = r"cluster default (started|drained|stopping|stopped)"
    order = [i for i, line in enumerate(lines) if re.search(steps, line)]
    assert order == sorted(order) and len(order) == 4


def test_verbosity_0_is_quiet(site):
    enqueue(site, 1)
    burst = run([sys.executable, "manage.py", "qcluster", "--burst", "-w", "1", "-v", "0"], cwd=site)
    assert burst.stderr == "" and burst.stdout == "", burst.stderr
