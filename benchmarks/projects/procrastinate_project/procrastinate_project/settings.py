"""Procrastinate benchmark project: its Django integration with its defaults; PostgreSQL only.

``procrastinate.contrib.django`` installs Procrastinate's schema as Django migrations and runs
the worker as ``manage.py procrastinate worker``; the benchmark passes ``--concurrency 2``
(one process running up to two jobs at once: Procrastinate's own unit of scaling; 16 for the
memory workload's 16-thread configuration). The database comes from ``benchdb``.
"""

from benchdb import databases

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# This package is an app so that Procrastinate's autodiscovery finds its tasks module.
INSTALLED_APPS = ["procrastinate.contrib.django", "procrastinate_project"]

DATABASES = databases("procrastinate_project", "bench_procrastinate")
