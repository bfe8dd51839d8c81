"""Each policy module imports neither Django nor multiprocessing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import django_taskmq.policy

POLICY_DIR = Path(django_taskmq.policy.__file__).parent
ROOT = POLICY_DIR.parent.parent
MODULES = sorted(
    "django_taskmq.policy" if path.stem == "__init__" else f"django_taskmq.policy.{path.stem}"
    for path in POLICY_DIR.glob("*.py")
)

CHECK = """
import importlib, sys
importlib.import_module({module!r})
bad = sorted(name for name in ("django", "multiprocessing") if name in sys.modules)
if bad:
    sys.exit("importing {module} imported " + ", ".join(bad))
"""


def test_modules_found():
    assert {"django_taskmq.policy.pick", "django_taskmq.policy.cron"} <= set(MODULES)


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES)
def test_pure(module):
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(module=module)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
