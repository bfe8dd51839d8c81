"""Admin: jobs (read-only), the dead-letter queue (replay, purge), schedules, cluster heartbeats.

Every change goes through the broker, as from code. List pages never load a job's payload or
result, and nothing shown is unpickled unless its signature verified.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _, ngettext

from .brokers import get_broker
from .exceptions import ConfigError
from .models import Cluster, DeadLetter, Job, Schedule

HEAVY = ("payload", "result_package", "traceback")  # never loaded by a list page
RESULT_SHOWN = 2000  # characters of a result's repr shown on the job page


def _without_delete_selected(self, request, action_location=None):
    """``ModelAdmin.get_actions`` without Django's "delete selected" (Django 6.1 passes
    ``action_location``; 5.2 does not)."""
    extra = {} if action_location is None else {"action_location": action_location}
    actions = admin.ModelAdmin.get_actions(self, request, **extra)
    actions.pop("delete_selected", None)
    return actions


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("id", "task_name", "queue", "priority", "state", "deliveries", "attempt", "yields",
                    "enqueued_at", "started_at", "finished_at")
    list_filter = ("state", "queue", "priority", "cluster")
    search_fields = ("id", "task_name", "func", "group", "key")
    ordering = ("-id",)
    # Everything but the signed package and the raw result, which is shown verified instead.
    readonly_fields = [f.name for f in Job._meta.fields if f.name not in ("payload", "result_package")] + [
        "return_value", "visible_time", "expires_time", "lease_until_time",
    ]
    exclude = ("payload", "result_package")
    actions = ["cancel_jobs"]

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.resolver_match and request.resolver_match.url_name.endswith("_changelist"):
            queryset = queryset.defer(*HEAVY)
        return queryset

    # Deleting rows bypasses the broker (a running job's lease, its dead letters): cancel instead.
    get_actions = _without_delete_selected

    @admin.display(description=_("result"))
    def return_value(self, job: Job) -> str:
        if job.result_package is None:
            return "-"
        error = job.result_error
        if error:
            return error
        text = repr(job.result)
        return text if len(text) <= RESULT_SHOWN else text[:RESULT_SHOWN] + " [...]"

    @admin.action(description=_("Cancel selected queued jobs"), permissions=["delete"])
    def cancel_jobs(self, request, queryset):
        count = get_broker().cancel(list(queryset.values_list("pk", flat=True)))
        self.message_user(request, ngettext("%d job cancelled.", "%d jobs cancelled.", count) % count, messages.SUCCESS)
        skipped = queryset.count() - count
        if skipped:
            self.message_user(request, ngettext(
                "%d job was not cancelled: it had started or finished.",
                "%d jobs were not cancelled: they had started or finished.", skipped) % skipped, messages.WARNING)


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("job", "queue", "reason", "deliveries", "failed_at", "replayed_at", "replay_count")
    list_filter = ("queue", ("replayed_at", admin.EmptyFieldListFilter))
    search_fields = ("job__id", "job__task_name", "reason", "error")
    readonly_fields = ("job", "queue", "reason", "error", "deliveries", "failed_at", "replayed_at", "replay_count")
    actions = ["replay", "purge"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("job").defer(*(f"job__{name}" for name in HEAVY))

    # Purge deletes letters with their jobs, through the broker.
    get_actions = _without_delete_selected

    def has_purge_permission(self, request) -> bool:
        """Purging deletes dead jobs too: it needs the delete permission on both models."""
        opts = Job._meta
        return self.has_delete_permission(request) and request.user.has_perm(f"{opts.app_label}.delete_{opts.model_name}")

    @admin.action(description=_("Replay selected dead letters"), permissions=["delete"])
    def replay(self, request, queryset):
        broker = get_broker()
        replayed, skipped = 0, []
        for letter in queryset:
            try:
                broker.replay_dead(letter.pk)
                replayed += 1
            except ConfigError as exc:  # replayed already, or its job is no longer dead
                skipped.append(str(exc))
        if replayed:
            self.message_user(request, ngettext("%d job replayed.", "%d jobs replayed.", replayed) % replayed,
                              messages.SUCCESS)
        if skipped:
            self.message_user(request, ngettext(
                "%(n)d dead letter not replayed: %(why)s", "%(n)d dead letters not replayed: %(why)s", len(skipped),
            ) % {"n": len(skipped), "why": "; ".join(skipped[:5])}, messages.WARNING)

    @admin.action(description=_("Purge selected dead letters and their jobs"), permissions=["purge"])
    def purge(self, request, queryset):
        count = get_broker().purge_dead(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, ngettext("%d dead letter purged.", "%d dead letters purged.", count) % count,
                          messages.SUCCESS)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = ("name", "func", "schedule_type", "minutes", "cron", "repeats", "next_run", "queue", "priority",
                    "last_job")
    list_filter = ("schedule_type", "queue")
    search_fields = ("name", "func")


@admin.register(Cluster)
class ClusterAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("name", "host", "pid", "state", "workers", "beat_at", "started_at")
    readonly_fields = ("id", "name", "host", "pid", "state", "workers", "queues", "counts", "started_at", "beat_at")
