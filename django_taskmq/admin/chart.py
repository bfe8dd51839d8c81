"""The dashboard's throughput chart: an SVG drawn on the server, no JavaScript.

One bar per minute of the last hour: succeeded in green, failed stacked above in red, with the
highest minute on the scale. Numbers and times are the only data written into the markup.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 720, 160
LEFT, BOTTOM, TOP = 44, 20, 10  # margins for the scale and the time labels
OK_COLOUR, FAILED_COLOUR, AXIS_COLOUR = "#2e7d32", "#c62828", "#999"


def throughput_svg(per_minute: Sequence[tuple[datetime.datetime, int, int]]) -> SafeString:
    """Return an SVG bar chart of ``(minute, succeeded, failed)``, oldest first."""
    bars = list(per_minute)
    peak = max([ok + failed for _, ok, failed in bars] + [1])
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    step = plot_w / max(len(bars), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="taskmq-chart" width="100%" style="max-width: {WIDTH * 1.4:.0f}px" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="jobs finished per minute, last hour">',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - 4}" y2="{TOP + plot_h}" stroke="{AXIS_COLOUR}"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="{AXIS_COLOUR}"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 8}" font-size="10" text-anchor="end" fill="currentColor">{peak}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" font-size="10" text-anchor="end" fill="currentColor">0</text>',
    ]
    for i, (minute, ok, failed) in enumerate(bars):
        x = LEFT + i * step + 1
        width = max(step - 2, 1)
        label = escape(f"{_hhmm(minute)}: {ok} succeeded, {failed} failed")
        ok_h = plot_h * ok / peak
        failed_h = plot_h * failed / peak
        y_ok = TOP + plot_h - ok_h
        parts.append(f'<g><title>{label}</title>'
                     f'<rect x="{x:.1f}" y="{y_ok:.1f}" width="{width:.1f}" height="{ok_h:.1f}" fill="{OK_COLOUR}"/>'
                     f'<rect x="{x:.1f}" y="{y_ok - failed_h:.1f}" width="{width:.1f}" height="{failed_h:.1f}" '
                     f'fill="{FAILED_COLOUR}"/></g>')
        last = i == len(bars) - 1
        if i % 15 == 0 or last:  # the last label ends at the right edge
            anchor, at = ("end", x + width) if last else ("start", x)
            parts.append(f'<text x="{at:.1f}" y="{HEIGHT - 4}" font-size="10" text-anchor="{anchor}" '
                         f'fill="currentColor">{escape(_hhmm(minute))}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - built from numbers and escaped labels only


def _hhmm(minute: datetime.datetime) -> str:
    local = timezone.localtime(minute) if timezone.is_aware(minute) else minute
    return local.strftime("%H:%M")
