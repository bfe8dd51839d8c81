"""The dashboard: ``admin/django_taskmq/dashboard/`` (URL name ``admin:django_taskmq_dashboard``).

For staff with the *view job* permission: per queue the ready jobs by priority, delayed, running
(executing on a worker), reserved (held by a cluster, not started), retrying, dead letters waiting
and the age of the oldest ready job; the clusters alive; jobs
succeeded and failed in the last minute and hour; a throughput chart of the last hour. It reloads
itself every :data:`REFRESH` seconds (a meta refresh). The numbers come from :mod:`..monitoring`.

The dashboard is not a model, so it has no ``ModelAdmin``: :func:`install` adds its URL to an admin
site, and a "Dashboard" row first among django_taskmq's models in the site's app list (the admin
index, the app's page and the navigation sidebar), for who may see it. ``django_taskmq.admin``
installs it on ``django.contrib.admin.site``; a project with its own ``AdminSite`` calls
``install(my_site)``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext as _

from ..observability import histograms, statistics
from ..brokers import get_broker
from ..models import Job
from ..policy.states import JobState
from . import progress_bar
from .chart import throughput_svg
from .display import duration
from .filters import EXECUTING, RESERVED

REFRESH = 10  # seconds between reloads of the page
URL_NAME = "django_taskmq_dashboard"


def can_view(request: HttpRequest) -> bool:
    """The dashboard is for active staff with the view permission on jobs."""
    opts = Job._meta
    user = request.user
    return bool(user.is_active and user.is_staff and user.has_perm(f"{opts.app_label}.view_{opts.model_name}"))


def dashboard_view(request: HttpRequest, site: admin.AdminSite) -> TemplateResponse:
    """Render the dashboard (through ``site.admin_view``: logged-in staff only)."""
    if not can_view(request):
        raise PermissionDenied
    snap = statistics.snapshot()
    jobs_url = reverse("admin:django_taskmq_job_changelist", current_app=site.name)
    letters_url = reverse("admin:django_taskmq_deadletter_changelist", current_app=site.name)
    pauses = (reverse("admin:django_taskmq_queuepause_pause", current_app=site.name),
              reverse("admin:django_taskmq_queuepause_resume", current_app=site.name))
    queues = [_queue_row(q, jobs_url, letters_url, pauses) for q in snap.queues]
    context: dict[str, Any] = {
        **site.each_context(request),
        "title": _("Task queue dashboard"),
        "opts": Job._meta,
        "app_label": Job._meta.app_label,
        "snapshot": snap,
        "queues": queues,
        "totals": {key: sum(row[key] for row in queues) for key in ("ready", "delayed", "retrying", "running",
                                                                    "reserved", "dead_letters")},
        "clusters": [_cluster_row(c) for c in snap.clusters],
        "running_jobs": progress_bar.running_rows(snap.clusters, site.name),
        "timings": timing_rows(),
        "workers_alive": snap.workers_alive,
        "throughput": snap.throughput,
        "chart": throughput_svg(snap.throughput.per_minute),
        "refresh": REFRESH,
        "replay_all_url": reverse("admin:django_taskmq_deadletter_replay_all", current_app=site.name),
        "flow": get_broker().flow_status(),
    }
    request.current_app = site.name
    return TemplateResponse(request, "admin/django_taskmq/dashboard.html", context)


def _queue_row(q: statistics.QueueStats, jobs_url: str, letters_url: str, pauses: tuple[str, str]) -> dict[str, Any]:
    def jobs(**params: str) -> str:
        return f"{jobs_url}?{urlencode({'queue': q.name, **params})}"

    return {
        "name": q.name,
        "ready": q.ready_total,
        "bands": list(q.ready.items()),
        "delayed": q.delayed,
        "retrying": q.retrying,
        "running": q.running,
        "reserved": q.reserved,
        "dead_letters": q.dead_letters,
        "oldest": duration(q.oldest_ready_age) if q.oldest_ready_age is not None else "-",
        "oldest_seconds": q.oldest_ready_age or 0,
        "queued_url": jobs(state=JobState.QUEUED.value),
        "retrying_url": jobs(state=JobState.RETRYING.value),
        "running_url": jobs(execution=EXECUTING),
        "reserved_url": jobs(execution=RESERVED),
        "dead_url": f"{letters_url}?{urlencode({'queue': q.name, 'replayed': 'no'})}",
        "paused": q.paused,
        "pause_url": f"{pauses[0]}?{urlencode({'queue': q.name})}",
        "resume_url": f"{pauses[1]}?{urlencode({'queue': q.name})}",
    }


def timing_rows() -> list[dict[str, Any]]:
    """Per task, the jobs that finished in the last hour and their wait and run time p50 and p95."""
    def seconds(value: float | None) -> str:
        return "-" if value is None else duration(value)

    return [{"task": task, "jobs": t.run.count,
             "wait_p50": seconds(t.wait.quantile(0.5)), "wait_p95": seconds(t.wait.quantile(0.95)),
             "run_p50": seconds(t.run.quantile(0.5)), "run_p95": seconds(t.run.quantile(0.95))}
            for task, t in histograms.by_task(histograms.last_hour()).items()]


def _cluster_row(c: statistics.ClusterInfo) -> dict[str, Any]:
    return {
        "name": c.name, "host": c.host, "pid": c.pid, "state": c.state, "workers": c.workers,
        "queues": ", ".join(c.queues), "heartbeat": duration(c.heartbeat_age),
        "clock_skew": "-" if c.clock_skew is None else f"{c.clock_skew:+.3f} s",
        "busy": len(c.tasks), "succeeded": c.count("succeeded"), "failed": c.count("failed"),
        "timeouts": c.count("timeouts"), "crashes": c.count("crashes"), "uptime": duration(c.counts.get("uptime")),
    }


def install(site: admin.AdminSite) -> None:
    """Add the dashboard's URL to ``site`` (once), ``<site>/django_taskmq/dashboard/``, and its row
    to the site's app list."""
    if getattr(site, "_taskmq_dashboard", False):
        return
    original = site.get_urls
    original_app_list = site.get_app_list

    def get_app_list(request: HttpRequest, app_label: str | None = None) -> list:
        apps = original_app_list(request, app_label)
        if can_view(request):
            for app in apps:
                if app["app_label"] == Job._meta.app_label:
                    app["models"].insert(0, {
                        "name": _("Dashboard"), "object_name": "Dashboard", "view_only": True, "add_url": None,
                        "admin_url": reverse(f"admin:{URL_NAME}", current_app=site.name),
                        "perms": {"add": False, "change": False, "delete": False, "view": True},
                    })
        return apps

    def get_urls() -> list:
        view = site.admin_view(lambda request: dashboard_view(request, site))
        return [
            path("django_taskmq/dashboard/", view, name=URL_NAME),
            *original(),
        ]

    setattr(site, "get_urls", get_urls)
    setattr(site, "get_app_list", get_app_list)
    setattr(site, "_taskmq_dashboard", True)
