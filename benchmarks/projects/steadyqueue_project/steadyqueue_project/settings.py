"""Steady Queue benchmark project: Django 6's ``django.tasks`` with the Steady Queue backend.

``manage.py steady_queue`` starts its supervisor, which forks a dispatcher (defaults) and the
workers configured here: ``processes: 2, threads: 1`` for the 2 workers of the others (its
default worker is one process of 3 threads); ``processes: 2, threads: 8`` for the memory
workload's 16 threads (BENCH_THREADS=16). Everything else stays default. The database comes
from ``benchdb``.
"""

import os
from datetime import timedelta

from steady_queue.configuration import Configuration

from benchdb import databases

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django.contrib.contenttypes", "steady_queue", "steadyqueue_project"]

DATABASES = databases("steadyqueue_project", "bench_steadyqueue")

TASKS = {
    "default": {
        "BACKEND": "steady_queue.backend.SteadyQueueBackend",
        "QUEUES": ["default"],
        "OPTIONS": {},
    }
}

_THREADS = int(os.environ.get("BENCH_THREADS") or 2)
STEADY_QUEUE = Configuration.Options(
    workers=[Configuration.Worker(queues=["*"], threads=_THREADS // 2, processes=2,
                                  polling_interval=timedelta(seconds=0.1))],
)
