from django.contrib import admin
from django.urls import include, path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("taskmq/", include("django_taskmq.urls")),  # taskmq/metrics/: Prometheus
    path("enqueue/", views.enqueue),
    path("jobs/<str:job_id>/", views.status),
]
