"""Test settings on SQLite: a file database so that cluster subprocesses share it."""

import os
import tempfile

from example.settings import *  # noqa: F401,F403

_db = os.environ.get("TASKMQ_DB_NAME") or os.path.join(tempfile.gettempdir(), f"taskmq-test-{os.getpid()}.sqlite3")

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _db,
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        # A file, not the in-memory default, so other processes see the same test database.
        "TEST": {"NAME": _db},
    }
}

INSTALLED_APPS = [*INSTALLED_APPS, "tests"]  # noqa: F405

TASKMQ = {
    "name": "tests",
    "workers": 2,
    "lease": 30,
    "save_limit": 0,
    "retry": {"base": 0.05, "max_delay": 0.5, "jitter": False},
    "queues": {"default": {"weight": 1}, "a": {"weight": 1}, "b": {"weight": 2}, "emails": {"weight": 3},
               "reports": {"weight": 1}},
}
# Cluster tests start qcluster subprocesses with some TASKMQ keys changed (lease, timeout, ...):
# TASKMQ_OVERRIDES holds a JSON object merged into TASKMQ.
if os.environ.get("TASKMQ_OVERRIDES"):
    import json

    TASKMQ = {**TASKMQ, **json.loads(os.environ["TASKMQ_OVERRIDES"])}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Django 6.0+: django.tasks enqueues through django_taskmq (ignored by Django 5.2).
TASKS = {"default": {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend"}}

# Observability tests switch Sentry, JSON logs or OpenTelemetry on through the environment.
if any(os.environ.get(k) for k in ("TASKMQ_TEST_SENTRY_FILE", "TASKMQ_TEST_JSON_LOGS", "TASKMQ_TEST_SPANS_FILE")):
    from tests.observe import configure

    configure(globals())
