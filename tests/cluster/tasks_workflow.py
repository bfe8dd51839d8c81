"""Tasks of the workflow tests (imported by qcluster workers as ``tests.cluster.tasks_workflow``).

Each logs ``"<job id> <tag>"`` to the run log (see :mod:`tests.cluster.tasks_cluster`) so the tests
can count runs and read their order.
"""

from __future__ import annotations

import time
from typing import Any

from django_taskmq import current_job

from .tasks_cluster import log


def fetch(n: int, pause: float = 0.0) -> int:
    """A fan-out step: sleeps ``pause`` seconds, logs ``fetch:<n>``, returns ``n * n``."""
    time.sleep(pause)
    log(f"fetch:{n}")
    return n * n


def merge(tag: str = "merge") -> dict[str, Any]:
    """A fan-in step: logs ``<tag>:<number of upstream results>``, returns the upstream results."""
    upstream = dict(current_job().upstream)
    log(f"{tag}:{len(upstream)}")
    return upstream


def total(tag: str = "total") -> int:
    """Logs ``<tag>``; returns the sum of the upstream results that are numbers."""
    upstream = current_job().upstream
    log(tag)
    return sum(v for v in upstream.values() if isinstance(v, int))


def flaky(flag: str, tag: str = "flaky") -> str:
    """Fails while the file ``flag`` does not exist, succeeds once it does (logs ``<tag>`` each run)."""
    import os

    log(tag)
    if not os.path.exists(flag):
        raise RuntimeError(f"{tag}: {flag} is missing")
    return tag


def cleanup(tag: str = "cleanup") -> dict[str, Any]:
    """A run_on_failure step: logs ``<tag>`` and returns what it saw upstream."""
    upstream = dict(current_job().upstream)
    log(tag)
    return upstream
