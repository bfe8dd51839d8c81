"""What the wheel and the sdist hold: every file of ``django_taskmq/`` the package needs (modules,
migrations, templates, static files, ``py.typed``) is in the wheel, the wheel holds nothing else
but its metadata and the licence, and the sdist adds the docs, the tests and the licence."""

from __future__ import annotations

import email.parser
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

import django_taskmq
from tests.conftest import ROOT

pytestmark = pytest.mark.packaging

PACKAGE = ROOT / "django_taskmq"


def package_files() -> set[str]:
    """The files under django_taskmq/ that git tracks (the tree when this is not a git checkout),
    as paths relative to the repository: what an installation needs."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "django_taskmq"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.split("\0")
        files = {name for name in listed if name}
    except (OSError, subprocess.CalledProcessError):
        files = {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
    return {f for f in files if not f.endswith((".pyc", ".pyo"))}


def test_the_package_tree_has_what_the_check_is_about():
    """The check below is worth something only if the tree has each kind of file."""
    files = package_files()
    assert "django_taskmq/py.typed" in files
    assert any(f.startswith("django_taskmq/migrations/0001_") for f in files)
    assert any(f.startswith("django_taskmq/templates/") and f.endswith(".html") for f in files)


def test_every_file_of_the_package_is_in_the_wheel(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = sorted(package_files() - names)
    assert missing == [], f"files of django_taskmq/ missing from {wheel.name}: {missing}"


def test_the_wheel_holds_the_package_its_metadata_and_the_licence_only(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    info = f"django_taskmq-{django_taskmq.__version__}.dist-info/"
    assert sorted({n.split("/", 1)[0] for n in names}) == ["django_taskmq", info.rstrip("/")]
    assert f"{info}licenses/LICENSE" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith(("tests/", "docs/", "example/"))]


def test_the_wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as archive:
        info = f"django_taskmq-{django_taskmq.__version__}.dist-info/METADATA"
        meta = email.parser.Parser().parsestr(archive.read(info).decode())
    assert meta["Name"] == "django-taskmq"
    assert meta["Version"] == django_taskmq.__version__
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.11"
    classifiers = meta.get_all("Classifier")
    for wanted in ("Framework :: Django :: 5.2", "Framework :: Django :: 6.0", "Framework :: Django :: 6.1",
                   "Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.13",
                   "Typing :: Typed"):
        assert wanted in classifiers
    assert {url.split(",")[0] for url in meta.get_all("Project-URL")} == {
        "Documentation", "Changelog", "Source", "Issues"}
    assert "postgres" in meta.get_all("Provides-Extra")
    assert meta.get_payload().startswith("# django_taskmq")  # the README, as the long description


def test_the_sdist_holds_the_licence_the_docs_and_the_tests(sdist):
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    for wanted in ("LICENSE", "README.md", "pyproject.toml", "docs/conf.py", "docs/changelog.rst",
                   "tests/conftest.py", "tests/packaging/test_distributions.py", "django_taskmq/py.typed"):
        assert f"{top}/{wanted}" in names, wanted
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".sqlite3"))]
    assert not [n for n in names if "/docs/_build/" in n]
    package = {f"{top}/{f}" for f in package_files()}
    assert sorted(package - names) == []
