"""Test settings on SQLite with Django's default options: no transaction_mode, default timeout.

What a project gets from ``startproject``: a rollback journal (not WAL), deferred transactions and
a 5 s busy timeout. The cluster must run quietly on it (``tests/cluster/test_sqlite_defaults.py``).
``TASKMQ_DB_NAME`` names the database file.
"""

import os
import tempfile

from tests.settings_sqlite import *  # noqa: F401,F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("TASKMQ_DB_NAME") or os.path.join(tempfile.gettempdir(), f"taskmq-defaults-{os.getpid()}.sqlite3"),
    }
}
