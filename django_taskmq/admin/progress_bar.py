"""Progress of running jobs in the admin: an HTML ``<progress>`` bar with the report's numbers and
message (the job page), and the rows of the dashboard's running jobs."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..observability import statistics
from ..policy.progress import fraction
from .display import duration


def bar(progress: dict[str, Any] | None) -> SafeString | str:
    """``<progress value=done max=total>`` and "done / total (n %) message"; without a total an
    indeterminate bar and "done"; "-" without a report."""
    if progress is None:
        return "-"
    done, total, message = progress["done"], progress["total"], progress.get("message") or ""
    share = fraction(progress)
    if share is None:
        return format_html('<progress class="taskmq-progress"></progress> {} {}', _number(done), message)
    return format_html('<progress class="taskmq-progress" value="{}" max="{}">{} %</progress> {} / {} ({} %) {}',
                       done, total, round(share * 100), _number(done), _number(total), round(share * 100), message)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def running_rows(clusters: list[statistics.ClusterInfo], site_name: str) -> list[dict[str, Any]]:
    """One row per busy worker of the clusters alive: where, what, for how long, and its progress."""
    rows = []
    for c in clusters:
        for t in sorted(c.tasks, key=lambda t: t.worker):
            rows.append({
                "where": f"{c.host}:{c.pid}", "worker": t.worker, "task": t.task_name or "?", "job_id": t.job_id,
                "url": reverse("admin:django_taskmq_job_change", args=[t.job_id], current_app=site_name),
                "queue": t.queue, "for": duration(t.seconds), "progress": bar(t.progress),
            })
    return rows
