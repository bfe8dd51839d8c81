"""Mark the expected failures of Django's tests/tasks suite (strict: one that passes breaks the run),
and refuse a listed name that no longer names a test."""

from __future__ import annotations

import sys

import pytest


def pytest_collection_modifyitems(config, items):
    from tests.django_suite.expected import EXPECTED_FAILURES as expected
    from tests.django_suite.expected import SUBTESTS

    runner = sys.modules.get("tests.django_suite.test_django_tasks")
    if runner is None or not hasattr(runner, "ours"):  # skipped: the suite was not fetched
        return
    seen = set()
    for item in items:
        if item.module is not runner or item.cls is None:
            continue
        name = f"{item.cls.__name__}.{item.name}"
        if name in expected:
            seen.add(name)
            # A test whose failures are its subtests' passes itself: strict there would fail it.
            strict = name not in SUBTESTS
            item.add_marker(pytest.mark.xfail(reason=expected[name], strict=strict))
    missing = sorted(set(expected) - seen)
    if missing and not config.getoption("keyword"):  # (a -k selection is made before this hook)
        raise pytest.UsageError(f"EXPECTED_FAILURES names tests the suite does not have: {missing}")


@pytest.fixture(autouse=True)
def _database(request, django_db_setup, django_db_blocker):
    """The test database for Django's SimpleTestCase classes (pytest-django sets it up for its own
    marker and for TestCase classes only); the subclasses' setUp isolates each test in a transaction."""
    with django_db_blocker.unblock():
        yield
