"""Admin: jobs (read-only), the dead-letter queue (replay, purge), schedules, cluster heartbeats."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils import timezone
from django.utils.translation import gettext_lazy as _, ngettext

from .brokers import get_broker
from .models import Cluster, DeadLetter, Job, Schedule, State


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("id", "task_name", "queue", "priority", "state", "deliveries", "yields", "enqueued_at",
                    "started_at", "finished_at")
    list_filter = ("state", "queue", "priority", "cluster")
    search_fields = ("id", "task_name", "func", "group", "key")
    ordering = ("-id",)
    readonly_fields = [f.name for f in Job._meta.fields] + ["visible_time", "expires_time", "lease_until_time"]
    exclude = ("payload",)
    actions = ["cancel_jobs"]

    @admin.action(description=_("Cancel selected queued jobs"), permissions=["delete"])
    def cancel_jobs(self, request, queryset):
        count = queryset.filter(state__in=[State.QUEUED, State.RETRYING]).update(
            state=State.CANCELLED, finished_at=timezone.now()
        )
        self.message_user(request, ngettext("%d job cancelled.", "%d jobs cancelled.", count) % count, messages.SUCCESS)


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("job", "queue", "reason", "deliveries", "failed_at", "replayed_at", "replay_count")
    list_filter = ("queue", ("replayed_at", admin.EmptyFieldListFilter))
    search_fields = ("job__id", "job__task_name", "reason", "error")
    readonly_fields = ("job", "queue", "reason", "error", "deliveries", "failed_at", "replayed_at", "replay_count")
    actions = ["replay", "purge"]

    @admin.action(description=_("Replay selected dead letters"), permissions=["delete"])
    def replay(self, request, queryset):
        broker = get_broker()
        count = 0
        for letter in queryset.filter(replayed_at__isnull=True):
            broker.replay_dead(letter.pk)
            count += 1
        self.message_user(request, ngettext("%d job replayed.", "%d jobs replayed.", count) % count, messages.SUCCESS)

    @admin.action(description=_("Purge selected dead letters and their jobs"), permissions=["delete"])
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
