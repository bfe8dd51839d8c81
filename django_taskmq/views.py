"""HTTP views of django_taskmq for scrapers: the Prometheus metrics (see :mod:`.urls`)."""

from __future__ import annotations

import hmac

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .observability import metrics as metrics_module
from .conf import get_settings


def allowed(request: HttpRequest) -> bool:
    """A staff session, or ``Authorization: Bearer <TASKMQ['metrics_token']>`` when a token is set."""
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token = get_settings().metrics_token
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The metrics in the Prometheus text format; 403 for anyone else."""
    if not allowed(request):
        raise PermissionDenied("a staff session or the metrics bearer token is needed")
    return HttpResponse(metrics_module.exposition(), content_type=metrics_module.CONTENT_TYPE)
