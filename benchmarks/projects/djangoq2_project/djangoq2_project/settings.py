"""django-q2 benchmark project: django-q2's defaults, ORM broker, 2 workers.

The database comes from ``benchdb`` (BENCH_ENGINE etc.); the ``djangoq2-tuned`` system
sets BENCH_CONN_MAX_AGE=60, everything else is identical.
"""

from benchdb import databases

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False  # DEBUG=True would keep every query in memory and skew RSS and speed
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django_q"]

DATABASES = databases("djangoq2_project", "bench_dq2")

# Only what the comparison needs: 2 workers and the ORM broker on the default database.
# Everything else (poll 0.2 s, bulk 1, save_limit 250, recycle 500, ...) stays default.
Q_CLUSTER = {
    "name": "bench",
    "workers": 2,
    "orm": "default",
}
