"""Test settings with django-q2 installed beside django_taskmq, on SQLite: the ``tests/djangoq`` suite.

``django_taskmq`` comes before ``django_q`` in ``INSTALLED_APPS``, so ``qcluster`` and ``qinfo``
are django_taskmq's (``taskmq.W003`` warns about the other order). ``Q_CLUSTER`` makes django-q2
use the ORM broker on the same database, so its API queues tasks in ``django_q_ormq`` without any
django-q2 cluster running. ``TASKMQ`` is set too, and wins. The cache is a directory, so results
cached by a qcluster subprocess are seen by the test.
"""

import os
import tempfile

from tests.settings_sqlite import *  # noqa: F401,F403

INSTALLED_APPS = [*INSTALLED_APPS, "django_q"]  # noqa: F405

Q_CLUSTER = {"name": "legacy", "orm": "default", "timeout": 60, "retry": 120, "workers": 1, "catch_up": False}

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
        # A qcluster subprocess gets the test's directory in TASKMQ_CACHE_DIR.
        "LOCATION": os.environ.get("TASKMQ_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                       f"taskmq-test-cache-{os.getpid()}"),
    }
}
