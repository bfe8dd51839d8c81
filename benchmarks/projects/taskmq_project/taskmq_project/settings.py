"""django_taskmq benchmark project: django_taskmq's defaults apart from 2 workers.

The database comes from ``benchdb`` (BENCH_ENGINE etc.), exactly as for django-q2.
Queues ``a`` (weight 3) and ``b`` (weight 1) serve the mixed workload.
"""

import os

from benchdb import databases

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False  # DEBUG=True would keep every query in memory and skew RSS and speed
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django_taskmq"]

# If django_taskmq's documentation asks users for SQLite options (for example
# {"transaction_mode": "IMMEDIATE"}), put them here: the benchmark runs each system
# as its docs tell users to run it.
# As django_taskmq's docs recommend for SQLite (docs/settings.rst): take the write lock at BEGIN, wait
# up to 20 s for it. WAL is set on the template database for both systems.
SQLITE_OPTIONS: dict = {"transaction_mode": "IMMEDIATE", "timeout": 20}

DATABASES = databases("taskmq_project", "bench_taskmq", sqlite_options=SQLITE_OPTIONS)

TASKMQ = {
    "name": "bench",
    "workers": 2,
    "queues": {
        "default": {"weight": 1},
        "a": {"weight": 3},
        "b": {"weight": 1},
    },
}

# The scale workload keeps every finished job (save_limit 0), on the empty table and with 1M
# finished rows alike: with the default (250) the monitor would spend the drain deleting the
# million rows, and a table that holds them is one whose owner keeps results.
if os.environ.get("BENCH_TASKMQ_SAVE_LIMIT"):
    TASKMQ["save_limit"] = int(os.environ["BENCH_TASKMQ_SAVE_LIMIT"])

# BENCH_TASKMQ_DURABLE_OUTCOMES=0: the cluster's own commits skip the disk flush (docs/settings.rst,
# durable_outcomes), to compare with the default.
if os.environ.get("BENCH_TASKMQ_DURABLE_OUTCOMES"):
    TASKMQ["durable_outcomes"] = os.environ["BENCH_TASKMQ_DURABLE_OUTCOMES"] not in ("0", "false", "False")

# BENCH_THREADS=16: the memory workload's second configuration, 16 threads as 2 workers of 8.
if os.environ.get("BENCH_THREADS"):
    TASKMQ["threads"] = int(os.environ["BENCH_THREADS"]) // TASKMQ["workers"]
