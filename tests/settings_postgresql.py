"""Test settings on PostgreSQL (127.0.0.1:5432, user postgres, trust auth)."""

import os

from tests.settings_sqlite import *  # noqa: F401,F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("TASKMQ_DB_NAME", "taskmq"),
        "USER": os.environ.get("PGUSER", "postgres"),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
        "TEST": {"NAME": os.environ.get("TASKMQ_DB_NAME", "test_taskmq")},
    }
}
