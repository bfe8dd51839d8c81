"""The confirmation step every admin action takes, in the style of Django's delete confirmation.

An action first answers with a page that lists what it will touch (and asks for its options, such
as a replay's target queue); only the POST of that page's "Yes" button (``post=yes``) does it. Each
action that changed something writes one ``LogEntry`` per object.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.db import models
from django.http import HttpRequest
from django.template.response import TemplateResponse

TEMPLATE = "admin/django_taskmq/confirm_action.html"
SHOWN = 100  # objects listed on a confirmation page; the rest are counted


def confirmed(request: HttpRequest) -> bool:
    """Return True when this POST is the confirmation page's "Yes" (not the first action POST)."""
    return request.method == "POST" and request.POST.get("post") == "yes"


def page(model_admin: admin.ModelAdmin, request: HttpRequest, *, title: str, question: str, verb: str,
         objects: Sequence[Any], total: int | None = None, action: str = "", selected: Iterable[Any] | None = None,
         form: forms.Form | None = None, note: str = "", cancel_url: str = "") -> TemplateResponse:
    """Render the confirmation page of ``action`` for ``objects`` (the first :data:`SHOWN` listed).

    ``action`` and ``selected`` (by default the rows ticked on the changelist) are posted back as
    the changelist's action and checkboxes, with "select all across pages" when it was chosen, so
    the "Yes" button runs the same action on the same rows; a page of its own (no ``action``) posts
    to its own URL. ``form`` holds the action's options.
    """
    opts = model_admin.model._meta
    shown = list(objects[:SHOWN])
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "question": question,
        "verb": verb,
        "note": note,
        "opts": opts,
        "objects": shown,
        "total": len(objects) if total is None else total,
        "more": (len(objects) if total is None else total) - len(shown),
        "action": action,
        "selected": [str(pk) for pk in (request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
                                         if selected is None else selected)],
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "form": form,
        "media": model_admin.media + (form.media if form is not None else forms.Media()),
        "cancel_url": cancel_url,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, TEMPLATE, context)


def log(request: HttpRequest, objects: Iterable[models.Model], message: str, deletion: bool = False) -> None:
    """Write one ``LogEntry`` per object (before a deletion, so the objects still exist)."""
    objects = list(objects)
    if objects:
        LogEntry.objects.log_actions(request.user.pk, objects, DELETION if deletion else CHANGE, message)
