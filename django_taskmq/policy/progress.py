"""Progress reports of running jobs: their values checked, stored and read back (see ``progress.py``).

A stored report is ``{"done", "total", "message", "at" (epoch seconds), "delivery"}``: the delivery
that made it, so a redelivered job does not show its earlier delivery's progress.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from django_taskmq.exceptions import ConfigError
from django_taskmq.policy.storable import clip_head

INTERVAL = 1.0  # seconds between two writes of one job's progress
MESSAGE_LIMIT = 200  # characters of a progress message that are kept


def report(done: Any, total: Any = None, message: Any = "") -> dict[str, Any]:
    """Check a progress report's values; return it as stored (without its time and delivery)."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"set_progress({name}=...) must be a finite number >= 0, got {value!r}")
    if not isinstance(message, str):
        raise ConfigError(f"set_progress(message=...) must be a string, got {message!r}")
    return {"done": done, "total": total, "message": clip_head(message)[:MESSAGE_LIMIT]}


def read(stored: Any, deliveries: int) -> dict[str, Any] | None:
    """The public form of a stored report (``updated_at`` as an aware datetime); None when there
    is none, or it was made by an earlier delivery than the job's latest (``deliveries``)."""
    if not isinstance(stored, dict) or stored.get("delivery") != deliveries:
        return None
    try:
        updated = datetime.datetime.fromtimestamp(float(stored["at"]), tz=datetime.timezone.utc)
    except (KeyError, TypeError, ValueError, OverflowError):
        updated = None
    return {"done": stored.get("done"), "total": stored.get("total"), "message": stored.get("message", ""),
            "updated_at": updated}


def fraction(progress: dict[str, Any] | None) -> float | None:
    """``done / total`` clamped to [0, 1]; None without a report or a total."""
    if not progress or not progress.get("total"):
        return None
    return min(max(progress["done"] / progress["total"], 0.0), 1.0)
