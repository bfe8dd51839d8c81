"""The django-q2 suite needs django-q2 installed and listed in INSTALLED_APPS: run it with
``--ds=tests.settings_djangoq`` (or ``tests.settings_djangoq_postgresql``), as ``scripts/suites`` does.
Under other settings its tests are skipped."""

from __future__ import annotations

import shutil

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    if "django_q" in settings.INSTALLED_APPS:
        return
    skip = pytest.mark.skip(reason="needs django-q2 in INSTALLED_APPS: --ds=tests.settings_djangoq")
    for item in items:
        if "tests/djangoq/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def empty_cache():
    """Each test starts with an empty cache (a directory shared with its qcluster subprocesses)."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture(scope="session", autouse=True)
def cache_directory():
    """Remove the cache directory of this run at its end."""
    yield
    from django.conf import settings

    location = settings.CACHES["default"].get("LOCATION")
    if "django_q" in settings.INSTALLED_APPS and location:
        shutil.rmtree(location, ignore_errors=True)
