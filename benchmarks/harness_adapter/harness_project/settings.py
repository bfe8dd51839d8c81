"""The harness adapter's project: django_taskmq's defaults on the database the harness names.

``DATABASE_URL`` is the harness's (``postgres://user:password@host:port/name``). The harness's
``WORKER_COUNT`` is the cluster's concurrency: ``HARNESS_PROCESSES`` worker processes (default 2,
one per core of the machine measured) of ``WORKER_COUNT / HARNESS_PROCESSES`` threads each, as a
deployment on such a machine would configure it. Everything else is django_taskmq's default.
"""

import math
import os
from urllib.parse import unquote, urlparse

_url = urlparse(os.environ["DATABASE_URL"])

SECRET_KEY = "harness-only-not-secret"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django_taskmq"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
    }
}

_concurrency = int(os.environ.get("WORKER_COUNT", "2"))
_processes = max(1, min(_concurrency, int(os.environ.get("HARNESS_PROCESSES", "2"))))

TASKMQ = {
    # One name for every replica: the name salts the jobs' signatures, so replicas named apart
    # would dead-letter each other's jobs ("bad signature"), as two deployments would.
    "name": "harness",
    "workers": _processes,
    "threads": math.ceil(_concurrency / _processes),
}
