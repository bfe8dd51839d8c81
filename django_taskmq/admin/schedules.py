"""Schedules in the admin: a checked form, the next runs, the last job, pause and resume.

The form refuses a function outside the allowed task modules, arguments that are not JSON, a
cron expression croniter does not accept and a Minutes schedule without its interval (see
:mod:`.forms`). The change page shows the next five runs in the project's time zone and links the
last job. Pausing and resuming (``change schedule``) is an action of the list and a button of the
page, each with its confirmation step.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _, ngettext

from ..brokers import get_broker
from ..conf import get_settings
from ..exceptions import ConfigError
from ..models import Job, Schedule
from ..scheduler import stored_arguments
from ..policy import cron as cron_policy
from . import confirm
from .display import FitsTheWindow, shortened, state_badge
from .forms import ScheduleForm

NEXT_RUNS = 5
NAME_SHOWN = 48  # characters of a schedule's name and function in the list (the whole on hover)


def next_runs(schedule: Schedule, count: int = NEXT_RUNS) -> list:
    """Return the schedule's next ``count`` run times (fewer when its repeats run out), in UTC."""
    if schedule.repeats == 0 or schedule.next_run is None:
        return []
    limit = count if schedule.repeats < 0 else min(count, schedule.repeats)
    try:
        tz = schedule.zone()
    except ConfigError:
        return [schedule.next_run]
    runs = [schedule.next_run]
    while len(runs) < limit:
        try:
            following = cron_policy.next_after(schedule.schedule_type, runs[-1], minutes=schedule.minutes,
                                               cron=schedule.cron, tz=tz)
        except ConfigError:
            break
        if following is None:
            break
        runs.append(following)
    return runs


class ScheduleAdmin(FitsTheWindow, admin.ModelAdmin):
    form = ScheduleForm
    # Facts that belong together share a column, so the list fits beside the sidebar and the filters.
    list_display = ("name_and_func", "when", "next_run", "queue_and_priority", "status", "last_job_link")
    list_filter = ("schedule_type", "paused", "queue")
    search_fields = ("name", "func")
    actions = ["pause", "resume"]
    readonly_fields = ("upcoming", "last_job_link")
    fieldsets = (
        (None, {"fields": ("name", "func", "args", "kwargs")}),
        (_("When"), {"fields": ("schedule_type", "minutes", "cron", "tz", "repeats", "next_run", "catch_up",
                                "paused", "upcoming")}),
        (_("Where"), {"fields": ("queue", "priority")}),
        (_("More"), {"fields": ("hook", "intended_date_kwarg", "options"), "classes": ("collapse",)}),
        (_("Last run"), {"fields": ("last_job_link",)}),
    )
    change_form_template = "admin/django_taskmq/schedule/change_form.html"

    def save_model(self, request, obj, form, change):
        # As schedule() stores them: with encrypt in its options, the arguments it names encrypted.
        try:
            obj.args, obj.kwargs = stored_arguments(obj.args, obj.kwargs, obj.options or {}, get_settings())
        except ConfigError as exc:  # sealed under a key no longer listed: kept as they are
            self.message_user(request, f"The arguments were left as stored: {exc}", messages.WARNING)
        get_broker().save_schedule(obj)

    def delete_model(self, request, obj):
        get_broker().delete_schedules([obj.pk])

    def delete_queryset(self, request, queryset):
        get_broker().delete_schedules(list(queryset.values_list("pk", flat=True)))

    def get_urls(self):
        return [
            path("<path:object_id>/pause/", self.admin_site.admin_view(self.pause_view),
                 name="django_taskmq_schedule_pause"),
            path("<path:object_id>/resume/", self.admin_site.admin_view(self.resume_view),
                 name="django_taskmq_schedule_resume"),
            *super().get_urls(),
        ]

    # -- columns ------------------------------------------------------------------------------
    @admin.display(description=_("name / function"), ordering="name")
    def name_and_func(self, schedule: Schedule):
        return format_html("{}<span class='taskmq-quiet'>{}</span>", shortened(schedule.name, NAME_SHOWN),
                           shortened(schedule.func, NAME_SHOWN))

    @admin.display(description=_("type / every / repeats"), ordering="schedule_type")
    def when(self, schedule: Schedule):
        repeats = _("for ever") if schedule.repeats < 0 else schedule.repeats
        return format_html("{}<span class='taskmq-quiet'>{}</span><span class='taskmq-quiet'>{} {}</span>",
                           schedule.get_schedule_type_display(), self.every(schedule), _("repeats"), repeats)

    @admin.display(description=_("queue / priority"), ordering="queue")
    def queue_and_priority(self, schedule: Schedule):
        return format_html("{}<span class='taskmq-quiet'>{} {}</span>", schedule.queue or "-", _("priority"),
                           schedule.priority)

    @admin.display(description=_("every"))
    def every(self, schedule: Schedule) -> str:
        if schedule.schedule_type == Schedule.CRON:
            return schedule.cron or "-"
        if schedule.schedule_type == Schedule.MINUTES:
            return f"{schedule.minutes} min"
        return "-"

    @admin.display(description=_("status"), ordering="paused")
    def status(self, schedule: Schedule) -> str:
        if schedule.paused:
            return str(_("paused"))
        return str(_("done")) if schedule.repeats == 0 else str(_("active"))

    @admin.display(description=_("last job"))
    def last_job_link(self, schedule: Schedule):
        if not schedule.last_job:
            return "-"
        state = Job.objects.filter(pk=schedule.last_job).values_list("state", flat=True).first()
        url = reverse("admin:django_taskmq_job_change", args=[schedule.last_job])
        if state is None:
            return format_html("{} (deleted)", schedule.last_job)
        return format_html("<a class='taskmq-id' href='{}'>{}</a> {}", url, schedule.last_job, state_badge(state))

    @admin.display(description=_("next runs"))
    def upcoming(self, schedule: Schedule):
        if schedule.pk is None:
            return "-"
        runs = next_runs(schedule)
        if not runs:
            return str(_("none: the schedule is used up"))
        try:
            zone = schedule.zone()
        except ConfigError:
            zone = timezone.get_current_timezone()
        items = format_html_join("", "<li>{}</li>", ((date_format(timezone.localtime(r, zone), "DATETIME_FORMAT"),)
                                                     for r in runs))
        paused = _(" (paused: none of these fires until it is resumed)") if schedule.paused else ""
        return format_html("<ol style='margin: 0; padding-left: 1.5em;'>{}</ol><div class='help'>{}{}</div>", items,
                           _("in the schedule's time zone, {}").format(zone), paused)

    # -- pause and resume ---------------------------------------------------------------------
    @admin.action(description=_("Pause selected schedules"), permissions=["change"])
    def pause(self, request, queryset: QuerySet):
        return self._set_paused(request, queryset, True)

    @admin.action(description=_("Resume selected schedules"), permissions=["change"])
    def resume(self, request, queryset: QuerySet):
        return self._set_paused(request, queryset, False)

    def _set_paused(self, request, queryset: QuerySet, paused: bool, action: str | None = None, cancel_url: str = ""):
        verb = _("pause") if paused else _("resume")
        if not confirm.confirmed(request):
            return confirm.page(
                self, request, title=_("Pause schedules") if paused else _("Resume schedules"), verb=verb,
                action=("pause" if paused else "resume") if action is None else action, objects=queryset,
                total=queryset.count(), cancel_url=cancel_url,
                question=_("Pause the selected schedules? A paused schedule does not fire until it is resumed.")
                if paused else _("Resume the selected schedules? Each fires again at its next run time."),
                selected=None if action is None else [])
        changing = list(queryset.exclude(paused=paused))
        get_broker().pause_schedules([s.pk for s in changing], paused)
        confirm.log(request, changing, "Paused" if paused else "Resumed")
        self.message_user(request, (ngettext("%d schedule paused.", "%d schedules paused.", len(changing)) if paused
                                    else ngettext("%d schedule resumed.", "%d schedules resumed.", len(changing)))
                          % len(changing), messages.SUCCESS)
        return None

    def _object_view(self, request, object_id: str, paused: bool):
        schedule = get_object_or_404(Schedule, pk=object_id) if str(object_id).isdigit() else None
        if schedule is None:
            raise Http404
        if not self.has_change_permission(request, schedule):
            raise PermissionDenied
        change_url = reverse("admin:django_taskmq_schedule_change", args=[schedule.pk])
        response = self._set_paused(request, Schedule.objects.filter(pk=schedule.pk), paused, action="",
                                    cancel_url=change_url)
        return response or HttpResponseRedirect(change_url)

    def pause_view(self, request, object_id: str):
        """Pause one schedule (its page's button), after a confirmation page."""
        return self._object_view(request, object_id, True)

    def resume_view(self, request, object_id: str):
        """Resume one schedule (its page's button), after a confirmation page."""
        return self._object_view(request, object_id, False)
