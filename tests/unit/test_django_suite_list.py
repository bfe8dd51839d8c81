"""The expected failures of Django's tests/tasks suite (tests/django_suite/expected.py) are the
ones docs/api.rst lists, name for name."""

from __future__ import annotations

import re
from pathlib import Path

from tests.django_suite.expected import EXPECTED_FAILURES, SUBTESTS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.rst"


def test_the_docs_list_every_expected_failure_and_no_other():
    text = DOCS.read_text()
    section = text.split(".. _django-suite:", 1)[1].split("\nErrors\n", 1)[0]
    listed = set(re.findall(r"``((?:Task|DummyBackend|ImmediateBackend)TestCase\.test_\w+)``", section))
    assert listed == {name.removeprefix("TaskMQ") for name in EXPECTED_FAILURES}
    assert SUBTESTS <= set(EXPECTED_FAILURES)
    assert all(reason.strip() for reason in EXPECTED_FAILURES.values())
