"""The attempt history of a job: one entry per failed execution, capped.

A job's ``attempt_log`` column holds ``{"dropped": n, "attempts": [entry, ...]}`` (JSON), oldest
entry first; NULL until its first failed execution (a job that succeeds at once never writes one).
An entry is ``{"attempt": execution number, "started_at": ISO 8601, "error": "pkg.Error: message",
"traceback": "..."}``. Django's ``TaskResult.errors`` is built from it.

The cap: only the newest :data:`KEEP` entries are kept and ``dropped`` counts those removed, so a
job retried forever (replays of a dead job, ``max_deliveries`` set high) does not grow its row
without bound. Each entry's error keeps its first :data:`ERROR_LIMIT` characters and its traceback
its last :data:`TRACEBACK_LIMIT` (the frame that raised): at most about 100 KB per row. The job's
own ``error`` and ``traceback`` columns keep the latest failure at full size (64 000 characters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .storable import clip_head, clip_tail

KEEP = 20  # entries kept: the newest
ERROR_LIMIT = 1_000  # characters of an entry's error line (its start)
TRACEBACK_LIMIT = 4_000  # characters of an entry's traceback (its end)


def entries(log: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Return the kept entries of ``log`` (a column value; None or malformed: none), oldest first."""
    if not isinstance(log, Mapping):
        return []
    found = log.get("attempts")
    return [dict(e) for e in found if isinstance(e, Mapping)] if isinstance(found, list) else []


def dropped(log: Mapping[str, Any] | None) -> int:
    """Return how many entries the cap removed from ``log``."""
    value = log.get("dropped") if isinstance(log, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def record(log: Mapping[str, Any] | None, attempt: int, started_at: str, error: str, traceback: str,
           keep: int = KEEP) -> dict[str, Any]:
    """Return ``log`` with one more failed execution at its end, the oldest entries beyond ``keep`` dropped.

    ``attempt`` is the execution's number, ``started_at`` when it started (ISO 8601); the error and
    the traceback are clipped to storable text.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    kept = entries(log) + [{"attempt": attempt, "started_at": started_at, "error": clip_head(error or "", ERROR_LIMIT),
                            "traceback": clip_tail(traceback or "", TRACEBACK_LIMIT)}]
    extra = max(len(kept) - keep, 0)
    return {"dropped": dropped(log) + extra, "attempts": kept[extra:]}
