"""Small formatting helpers of the admin pages: coloured states, shortened text, durations, times."""

from __future__ import annotations

import datetime
import re
import reprlib

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..models import State
from ..policy import durations

#: Background colour of each state's badge (white text).
STATE_COLOURS = {
    State.WAITING: "#8d6e63",
    State.QUEUED: "#5b6f80",
    State.RUNNING: "#1f6fb2",
    State.RETRYING: "#c27a00",
    State.SUSPENDED: "#6a5acd",
    State.SUCCEEDED: "#2e7d32",
    State.FAILED: "#c62828",
    State.DEAD: "#7b1010",
    State.EXPIRED: "#757575",
    State.CANCELLED: "#9e9e9e",
}
MONOSPACE = "white-space: pre-wrap; font-family: monospace; margin: 0; max-height: 40em; overflow: auto;"

_repr = reprlib.Repr()
_repr.maxstring = 300
_repr.maxother = 300
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 20
_repr.maxlevel = 4


class FitsTheWindow:
    """The stylesheet of our admin pages, for their ``ModelAdmin``: lists and pages that fit the
    window (``static/django_taskmq/admin.css``)."""

    class Media:
        css = {"all": ["django_taskmq/admin.css"]}


#: Colour of a RUNNING job a cluster holds and no worker has started (prefetched): see :func:`reserved_badge`.
RESERVED_COLOUR = "#6a8caf"


def _badge(css: str, colour: str, label: str, title: str = "") -> SafeString:
    return format_html(
        '<span class="taskmq-state taskmq-state-{}" style="background: {}; color: #fff; padding: 1px 6px; '
        'border-radius: 3px; font-size: 0.85em; white-space: nowrap;" title="{}">{}</span>', css, colour, title, label)


def state_badge(state: str) -> SafeString:
    """Return a job state as a coloured badge."""
    colour = STATE_COLOURS.get(state, "#555")  # type: ignore[call-overload]
    label = State(state).label if state in State.values else state
    return _badge(state.lower(), colour, str(label))


def reserved_badge(cluster: str) -> SafeString:
    """Return the state of a RUNNING job no worker has started: "reserved by CLUSTER, not started"
    (a long cluster name shortened, the whole of it on hover)."""
    return _badge("reserved", RESERVED_COLOUR, f"reserved by {shorten(cluster, 24)}, not started",
                  f"stored state RUNNING: held by cluster {cluster}, waiting for one of its workers")


def shorten(text: str, limit: int) -> str:
    """Return ``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    text = text or ""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


#: Where a dotted or snake_case name may break across lines (after each of these characters).
NAME_BREAKS = re.compile(r"([._/:,-])")


def shortened(text: str, limit: int) -> SafeString:
    """Return ``text`` cut to ``limit`` characters for a list column, the whole of it on hover, with
    line breaks allowed after dots, underscores and the like: a task name is one long "word", which
    would otherwise widen the table to its length."""
    text = text or ""
    parts = NAME_BREAKS.split(shorten(text, limit))
    body = format_html_join("", "{}{}", ((part, mark_safe("<wbr>") if NAME_BREAKS.fullmatch(part) else "")
                                        for part in parts))
    return format_html('<span class="taskmq-shortened" title="{}">{}</span>', text if len(text) > limit else "", body)


def short_repr(value: object, limit: int = 500) -> str:
    """Return a readable, bounded ``repr`` of a task's argument or result."""
    try:
        text = _repr.repr(value)
    except Exception as exc:  # a broken __repr__ must not break the page
        text = f"<unrepresentable {type(value).__name__}: {exc}>"
    return shorten(text, limit)


def monospace(text: str) -> SafeString:
    """Return ``text`` in a monospace block (escaped)."""
    return format_html('<pre style="{}">{}</pre>', MONOSPACE, text)


def duration(seconds: float | None) -> str:
    """Return a duration for people: ``850 ms``, ``12.5 s``, ``4 min 10 s``, ``3 h 5 min``, ``2 d 4 h``."""
    return durations.duration(seconds)


def between(start: datetime.datetime | None, end: datetime.datetime | None) -> float | None:
    """Return the seconds from ``start`` to ``end`` (None unless both are known)."""
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def short_time(value: datetime.datetime | None) -> str | SafeString:
    """Return a time for a list column: ``2026-01-31 12:34:56`` in the project's time zone, unbroken."""
    if value is None:
        return "-"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return format_html('<span style="white-space: nowrap;">{}</span>', local.strftime("%Y-%m-%d %H:%M:%S"))


def when(value: datetime.datetime | None, now: datetime.datetime | None = None) -> str:
    """Return a time in the project's time zone, with how long ago or from now it is."""
    if value is None:
        return "-"
    now = now or timezone.now()
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    text = date_format(local, "DATETIME_FORMAT")
    delta = (value - now).total_seconds()
    return f"{text} ({'in ' + duration(delta) if delta > 0 else duration(-delta) + ' ago'})"
