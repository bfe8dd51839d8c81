"""Paused queues in the admin: the list of what is paused, *Pause a queue…* (from the list and each
queue's row on the dashboard) and *Resume* (an action, and the dashboard's link).

Pausing adds a ``QueuePause`` row (``add paused queue``), resuming deletes it (``delete paused
queue``); both go through :func:`django_taskmq.api.pause_queue` as code would, after a confirmation page,
and leave a ``LogEntry``.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, LogEntry
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _

from .. import api
from ..conf import get_settings
from ..models import QueuePause
from . import confirm
from .jobs import ReadOnlyMixin, without_delete_selected


class PauseForm(forms.Form):
    queue = forms.ChoiceField(label=_("queue"))

    def __init__(self, *args, paused: frozenset[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["queue"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(q, q) for q in sorted(get_settings().queues) if q not in paused]


class QueuePauseAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("queue", "paused_at", "paused_by")
    actions = ["resume"]
    get_actions = without_delete_selected  # resuming is the action: it goes through the broker

    def get_urls(self):
        return [
            path("pause/", self.admin_site.admin_view(self.pause_view), name="django_taskmq_queuepause_pause"),
            path("resume/", self.admin_site.admin_view(self.resume_view), name="django_taskmq_queuepause_resume"),
            *super().get_urls(),
        ]

    def has_pause_permission(self, request) -> bool:
        return self.has_model_perm(request, "add")

    def has_resume_permission(self, request) -> bool:
        return self.has_model_perm(request, "delete")

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "title": _("Paused queues")}
        return super().changelist_view(request, extra_context)

    @admin.action(description=_("Resume selected queues"), permissions=["resume"])
    def resume(self, request, queryset):
        if not confirm.confirmed(request):
            return confirm.page(self, request, title=_("Resume queues"), verb=_("resume"), action="resume",
                                question=_("Let every cluster claim from these queues again?"), objects=queryset)
        self._resume(request, list(queryset))
        return None

    def _resume(self, request, rows: list[QueuePause]) -> int:
        confirm.log(request, rows, "Resumed", deletion=True)
        resumed = sum(api.resume_queue(row.queue, by=request.user.get_username()) for row in rows)
        self.message_user(request, _("%(n)d queue(s) resumed: %(q)s.") % {
            "n": resumed, "q": ", ".join(row.queue for row in rows)}, messages.SUCCESS)
        return resumed

    def pause_view(self, request):
        """Pause one queue (``?queue=`` preselects it), after a confirmation page."""
        if not self.has_pause_permission(request):
            raise PermissionDenied
        back = reverse("admin:django_taskmq_dashboard", current_app=self.admin_site.name)
        paused = api.paused_queues()
        initial = {"queue": request.GET.get("queue")} if request.GET.get("queue") else {}
        form = PauseForm(request.POST if confirm.confirmed(request) else None, paused=paused, initial=initial)
        if not confirm.confirmed(request) or not form.is_valid():
            return confirm.page(
                self, request, title=_("Pause a queue"), verb=_("pause"), form=form, objects=[], total=0,
                question=_("Stop every cluster from starting jobs of this queue until it is resumed? Running jobs "
                           "finish; new jobs are still accepted and wait."),
                note=_("Paused now: %s") % (", ".join(sorted(paused)) or "-"), selected=[], cancel_url=back)
        queue = form.cleaned_data["queue"]
        api.pause_queue(queue, by=request.user.get_username())
        row = QueuePause.objects.get(queue=queue)
        LogEntry.objects.log_actions(request.user.pk, [row], ADDITION, "Paused")
        self.message_user(request, _("Queue %(q)s paused: no cluster starts its jobs until it is resumed.")
                          % {"q": queue}, messages.SUCCESS)
        return HttpResponseRedirect(back)

    def resume_view(self, request):
        """Resume one queue (``?queue=``), after a confirmation page."""
        if not self.has_resume_permission(request):
            raise PermissionDenied
        back = reverse("admin:django_taskmq_dashboard", current_app=self.admin_site.name)
        rows = list(QueuePause.objects.filter(queue=request.GET.get("queue", "")))
        if not rows:
            self.message_user(request, _("That queue is not paused."), messages.INFO)
            return HttpResponseRedirect(back)
        if not confirm.confirmed(request):
            return confirm.page(self, request, title=_("Resume a queue"), verb=_("resume"), objects=rows,
                                question=_("Let every cluster claim from this queue again?"), selected=[],
                                cancel_url=back)
        self._resume(request, rows)
        return HttpResponseRedirect(back)
