"""Fixtures of the packaging suite: the built distributions, and a fresh virtualenv outside the
repository with the wheel (not the tree) installed.

``dist``        the directory holding one sdist and one wheel: ``TASKMQ_DIST`` when set (``scripts/suites
                package`` builds them once and checks them with twine and check-wheel-contents), else
                built here with ``python -m build`` (the wheel from the sdist, as ``pip`` would).
``wheel_venv``  a :class:`Venv` made with this Python in a temporary directory, the wheel installed.
``site``        ``django-admin startproject mysite`` made by that virtualenv, in a fresh directory.

The virtualenv installs the wheel's dependencies from the package index as a user's would (pip's
cache makes that quick after the first run).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

INSTALL_TIMEOUT = 600


def one(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {directory}, found {[p.name for p in found]}"
    return found[0]


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("TASKMQ_DIST")
    if given:
        return Path(given).resolve()
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "-q", "--outdir", str(out), str(ROOT)], check=True,
                   timeout=INSTALL_TIMEOUT, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def wheel(dist: Path) -> Path:
    return one(dist, "django_taskmq-*.whl")


@pytest.fixture(scope="session")
def sdist(dist: Path) -> Path:
    return one(dist, "django_taskmq-*.tar.gz")


@dataclass
class Venv:
    """A virtualenv outside the repository: its bin/ comes first on PATH, and nothing of the
    repository is importable from it (no PYTHONPATH, a working directory elsewhere)."""

    path: Path
    wheel: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> str:
        return str(self.bin / "python")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "TASKMQ_OVERRIDES")
               and not k.startswith("TASKMQ_")}
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(self.path),
                   PYTHONUNBUFFERED="1", **extra)
        return env

    def run(self, args: list[str], cwd: Path, timeout: float = 300, check: bool = True,
            **extra: str) -> subprocess.CompletedProcess[str]:
        """Run ``args`` with this virtualenv first on PATH; fail with its output when it fails."""
        done = subprocess.run(args, cwd=str(cwd), env=self.env(**extra), text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            pytest.fail(f"{' '.join(args)} exited {done.returncode} in {cwd}:\n{done.stdout}")
        return done


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
    home = tmp_path_factory.mktemp("wheel-venv")
    venv.EnvBuilder(with_pip=True).create(home / "venv")
    env = Venv(home / "venv", wheel)
    env.run([env.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)], cwd=home,
            timeout=INSTALL_TIMEOUT)
    return env


@pytest.fixture
def site(wheel_venv: Venv, tmp_path: Path) -> Path:
    """A new ``startproject`` site (``tmp_path/mysite``, holding manage.py), as Django makes it."""
    wheel_venv.run(["django-admin", "startproject", "mysite"], cwd=tmp_path)
    return tmp_path / "mysite"
