"""A view that sends a signal to a durable job, as a project's webhook or approval view would."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.http import require_POST

from django_taskmq import ConfigError, send_signal


@require_POST
def approve(request: HttpRequest, job_id: str) -> JsonResponse:
    try:
        woke = send_signal(job_id, "approved", {"by": request.POST.get("by", "")})
    except ConfigError as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"woke": woke})


urlpatterns = [path("approve/<str:job_id>/", approve)]
