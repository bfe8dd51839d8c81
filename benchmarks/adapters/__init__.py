"""Adapters: the only code that knows each system's API.

The workloads talk to a system through this small interface, imported inside the
system's own venv after ``django.setup()``:

``enqueue(tag=None, queue=None, priority=None) -> str``
    one job the way an application would (``async_task``); returns its id.
``enqueue_bulk(count) -> None``
    ``count`` untagged jobs through the system's bulk API; only if ``supports_bulk``.
``prefill(jobs) -> None``
    put ``jobs`` (a list of :class:`JobSpec`) in the queue as fast as the system allows,
    before a cluster starts; not timed, but what is stored must be exactly what the
    system's own enqueue stores.
``pending() -> int``
    jobs not finished yet (queued, reserved or running).
``failed() -> int``
    jobs that ended in any unsuccessful state.
``versions() -> dict``
    package versions to put in the report.

Priorities are the strings ``"LOW"``, ``"NORMAL"``, ``"CRITICAL"``; queues ``None``
(the default queue), ``"a"`` or ``"b"``.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

TASK = "benchtasks.noop"


class JobSpec(NamedTuple):
    tag: str | None = None
    queue: str | None = None
    priority: str | None = None


def load(name: str):
    """Return a fresh adapter instance from ``adapters/<name>.py``."""
    return importlib.import_module(f"adapters.{name}").Adapter()
