"""oban-py benchmark project: Django for the driver and to install oban's schema; PostgreSQL only.

oban-py is not a Django app: its worker is ``oban start --dsn ... --queues default:2`` (one
asyncio process running up to two jobs at once; the open-source edition has no multi-process
execution), which imports ``oban_project.jobs`` when it meets a job. Its schema is installed as a
Django migration with ``oban.schema.install_sql()``, the way oban's docs show for Django. The
database comes from ``benchdb``.
"""

from benchdb import databases

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["oban_project"]

DATABASES = databases("oban_project", "bench_oban")
