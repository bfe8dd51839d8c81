"""Settings for the driver of the Dramatiq system: Dramatiq needs no Django, and no database.

The workloads set Django up for every system, so this project exists only to make that
work; the worker (``dramatiq dramatiqapp``) does not load Django at all.
"""

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
INSTALLED_APPS: list[str] = []
DATABASES: dict = {}
