"""django-tasks-db benchmark project: its defaults, two ``db_worker`` processes.

django-tasks-db is the ORM backend of Django's tasks framework (the ``django-tasks``
backport on Django 5.2). Its worker, ``manage.py db_worker``, is one process running one
task at a time; the benchmark starts two of them (``launcher="db_worker"`` in
systems.py) for the same 2 workers as the other systems. Everything else is default:
``--interval 1`` (seconds between polls when idle) and the random start-up delay of up to
one second included. The database comes from ``benchdb`` (BENCH_ENGINE etc.).
"""

from benchdb import databases

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False  # DEBUG=True would also make db_worker auto-reload
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django_tasks", "django_tasks_db"]

DATABASES = databases("dtdb_project", "bench_dtdb")

TASKS = {
    "default": {
        "BACKEND": "django_tasks_db.DatabaseBackend",
        "QUEUES": ["default"],
    }
}
