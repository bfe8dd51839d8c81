from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("enqueue/", views.enqueue),
    path("jobs/<str:job_id>/", views.status),
]
