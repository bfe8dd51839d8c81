"""Django's own tests/tasks suite against TaskMQBackend.

The suite comes from the sdist of the Django that runs it, fetched by pip when the suite runs
(``scripts/suites django6-sqlite`` and ``django6-postgresql``: its ``django_tasks_suite``), never
copied here; ``TASKMQ_DJANGO_TESTS`` names the directory that holds its ``tasks`` package.
Each of its test classes is subclassed here, changing only settings and ``setUp``:

* settings: ``TASKS['default']`` is TaskMQBackend (the other aliases the class names stay theirs),
  its ``QUEUES`` in ``TASKMQ['queues']``; the classes of the ImmediateBackend run in sync mode
  (``TASKMQ['sync']``, failures final: ``ack_failures``), those of the DummyBackend without;
  ``databases``, since the jobs live in the database;
* ``setUp``: their ``setUp`` empties the DummyBackend's list of results; ours starts a transaction
  that is rolled back when the test ends.

A test listed in ``tests.django_suite.expected.EXPECTED_FAILURES`` must fail (strict xfail: one that
starts passing breaks the run), every other test must pass; docs/api.rst lists the same tests with
the same reasons. The conftest marks them, and the database is the test database pytest-django made.
"""

from __future__ import annotations

import os
import sys

import pytest

DIRECTORY = os.environ.get("TASKMQ_DJANGO_TESTS")
if not DIRECTORY:
    pytest.skip("Django's tests/tasks suite runs through scripts/suites django6-sqlite / django6-postgresql "
                "(TASKMQ_DJANGO_TESTS is not set)", allow_module_level=True)

from django.conf import settings  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import override_settings  # noqa: E402

sys.path.insert(0, DIRECTORY)
from tasks import test_dummy_backend, test_immediate_backend, test_tasks  # noqa: E402


# Tells pytest-django to create the test database (it looks at markers and TransactionTestCase
# classes only); the subclasses' setUp isolates each test.
pytestmark = pytest.mark.django_db

BACKEND = "django_taskmq.backends.tasks.TaskMQBackend"


def _taskmq_settings(cls: type, sync: bool) -> dict:
    """The class's own settings with TASKS['default'] replaced by ours."""
    theirs = dict(cls._overridden_settings or {})  # type: ignore[attr-defined]
    tasks = dict(theirs.get("TASKS") or {})
    queues = list((tasks.get("default") or {}).get("QUEUES") or [])
    tasks["default"] = {"BACKEND": BACKEND, **({"QUEUES": queues} if queues else {})}
    known = dict(settings.TASKMQ["queues"])
    known.update({name: {"weight": 1} for name in queues if name not in known})
    return {**theirs, "TASKS": tasks,
            "TASKMQ": {**settings.TASKMQ, "queues": known, "sync": sync, "ack_failures": sync}}


def _set_up(self) -> None:
    atomic = transaction.atomic()
    atomic.__enter__()

    def rollback() -> None:
        transaction.set_rollback(True)
        atomic.__exit__(None, None, None)

    self.addCleanup(rollback)


def ours(cls: type, sync: bool) -> type:
    subclass = type(f"TaskMQ{cls.__name__}", (cls,), {
        "__module__": __name__, "__qualname__": f"TaskMQ{cls.__name__}",
        "databases": {"default"}, "setUp": _set_up,
    })
    return override_settings(**_taskmq_settings(cls, sync))(subclass)


# The TransactionTestCase classes of test_dummy_backend and test_immediate_backend are not run:
# each of their tests names its backend with override_settings on the method, which wins over any
# setting of a subclass, so they would test Django's backends, never ours. test_custom_backend
# tests backends of its own.
TaskMQTaskTestCase = ours(test_tasks.TaskTestCase, sync=False)
TaskMQDummyBackendTestCase = ours(test_dummy_backend.DummyBackendTestCase, sync=False)
TaskMQImmediateBackendTestCase = ours(test_immediate_backend.ImmediateBackendTestCase, sync=True)
