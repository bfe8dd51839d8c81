"""Cluster heartbeats in the admin (read-only): who runs, where, since when, and their counts."""

from __future__ import annotations

import datetime

from django.contrib import admin
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..models import Cluster
from ..monitoring import ALIVE_WITHIN
from .display import duration
from .jobs import ReadOnlyMixin


class ClusterAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("name", "host", "pid", "state", "alive", "workers", "heartbeat_age", "succeeded", "failed",
                    "started_at")
    list_filter = ("state", "host")
    readonly_fields = ("id", "name", "host", "pid", "state", "workers", "queues", "counts", "started_at", "beat_at")

    @admin.display(description=_("alive"), boolean=True)
    def alive(self, cluster: Cluster) -> bool:
        fresh = timezone.now() - datetime.timedelta(seconds=ALIVE_WITHIN)
        return cluster.state != "stopped" and cluster.beat_at >= fresh

    @admin.display(description=_("heartbeat"), ordering="-beat_at")
    def heartbeat_age(self, cluster: Cluster) -> str:
        return duration((timezone.now() - cluster.beat_at).total_seconds()) + " ago"

    @admin.display(description=_("succeeded"))
    def succeeded(self, cluster: Cluster):
        return (cluster.counts or {}).get("succeeded", 0)

    @admin.display(description=_("failed"))
    def failed(self, cluster: Cluster):
        return (cluster.counts or {}).get("failed", 0)
