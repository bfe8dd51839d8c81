"""URLs a project mounts for scrapers: ``path("taskmq/", include("django_taskmq.urls"))``.

``taskmq/metrics/`` (URL name ``django_taskmq:metrics``): the Prometheus metrics, for a staff
session or a bearer token (``TASKMQ['metrics_token']``).
"""

from django.urls import path

from .observability import metrics

app_name = "django_taskmq"

urlpatterns = [
    path("metrics/", metrics.view, name="metrics"),
]
