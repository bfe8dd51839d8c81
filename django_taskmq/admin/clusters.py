"""Cluster heartbeats in the admin (read-only): who runs, where, since when, and their counts."""

from __future__ import annotations

import datetime

from django.contrib import admin
from django.db import connections
from django.db.models import DateTimeField
from django.db.models.expressions import RawSQL
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..brokers.clock import clock_for
from ..models import Cluster
from ..observability.statistics import ALIVE_WITHIN
from .display import duration
from .jobs import ReadOnlyMixin


def _now(cluster: Cluster) -> datetime.datetime:
    """The database's time when the page's query ran (see ``ClusterAdmin.get_queryset``)."""
    return getattr(cluster, "database_now")


class ClusterAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("name", "host_and_pid", "state", "alive", "workers", "heartbeat_and_skew", "outcomes",
                    "started_at")
    list_filter = ("state", "host")
    readonly_fields = ("id", "name", "host", "pid", "state", "workers", "queues", "counts", "started_at", "beat_at")

    def get_queryset(self, request):
        # Heartbeats are stamped by the database's clock: their age is read against it, in the same query.
        queryset = super().get_queryset(request)
        connection = connections[queryset.db]
        return queryset.annotate(database_now=RawSQL(*clock_for(connection).stamp(connection),
                                                     output_field=DateTimeField()))

    @admin.display(description=_("alive"), boolean=True)
    def alive(self, cluster: Cluster) -> bool:
        fresh = _now(cluster) - datetime.timedelta(seconds=ALIVE_WITHIN)
        return cluster.state != "stopped" and cluster.beat_at >= fresh

    @admin.display(description=_("heartbeat"), ordering="-beat_at")
    def heartbeat_age(self, cluster: Cluster) -> str:
        return duration((_now(cluster) - cluster.beat_at).total_seconds()) + " ago"

    @admin.display(description=_("clock skew"))
    def clock_skew(self, cluster: Cluster) -> str:
        value = (cluster.counts or {}).get("clock_skew")
        return "-" if not isinstance(value, (int, float)) else f"{value:+.3f} s"

    @admin.display(description=_("heartbeat / clock skew"), ordering="-beat_at")
    def heartbeat_and_skew(self, cluster: Cluster):
        return format_html("{}<span class='taskmq-quiet'>{}</span>", self.heartbeat_age(cluster),
                           self.clock_skew(cluster))

    @admin.display(description=_("host / pid"), ordering="host")
    def host_and_pid(self, cluster: Cluster) -> str:
        return f"{cluster.host} / {cluster.pid}"

    @admin.display(description=_("succeeded / failed"))
    def outcomes(self, cluster: Cluster) -> str:
        counts = cluster.counts or {}
        return f"{counts.get('succeeded', 0)} / {counts.get('failed', 0)}"
