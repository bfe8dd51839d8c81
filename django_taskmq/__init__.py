"""django_taskmq: a Django task queue with priorities, leases, a dead-letter queue and idempotency keys.

The public names are imported lazily so that ``django_taskmq.policy`` stays usable without Django.
"""

from __future__ import annotations

import gc
from typing import Any

__version__ = "0.2.0"  # the one place the version is written (pyproject.toml reads it)

_EXPORTS = {
    "async_task": "api", "enqueue_many": "api", "result": "api", "fetch": "api",
    "result_group": "api", "count_group": "api", "cancel": "api",
    "task": "tasks", "Task": "tasks",
    "durable": "durable_tasks", "send_signal": "durable_tasks", "DurableTask": "durable_tasks",
    "DurableContext": "runtime.durable_context", "StepMismatch": "runtime.durable_context",
    "Priority": "policy.priority", "Retry": "policy.backoff",
    "ConfigError": "exceptions", "TaskMQError": "exceptions", "LeaseLost": "exceptions",
    "BadPackage": "exceptions", "RetryLater": "exceptions", "Defer": "exceptions", "Reject": "exceptions",
    "JobCancelled": "exceptions",
    "current_job": "runtime.execution",
    "schedule": "scheduler", "Chain": "workflows", "async_chain": "workflows",
    "Batch": "batches", "batch": "batches",
    "Workflow": "workflows", "workflow": "workflows", "cancel_workflow": "workflows",
    "pause_queue": "api", "resume_queue": "api", "paused_queues": "api",
}

__all__ = sorted(_EXPORTS)

# Objects frozen for the garbage collector before the project could freeze any (CPython 3.12.1
# freezes a few hundred of its own at start-up): the sentinel tells the project's freeze from these.
FROZEN_AT_IMPORT = gc.get_freeze_count()

#: Modules that moved (old -> new, under ``django_taskmq.``): each old path is a small module that
#: warns (DeprecationWarning) and hands over the new one; they go in the release after next.
#: tests/unit/test_architecture.py reads this to tell these shims from the package's modules.
MOVED = {
    "execution": "runtime.execution",
    "progress": "runtime.progress",
    "recorder": "runtime.recorder",
    "sync": "runtime.inline",
    "monitoring": "observability.statistics",
    "metrics": "observability.metrics",
    "joblog": "observability.joblog",
    "reporting": "observability.reporting",
    "tracing": "observability.tracing",
    "failures": "brokers.outage",
    "ids": "policy.ids",
    "pausing": "api",
    "chains": "workflows",
}


def _moved_here(old: str) -> None:
    """Called by the deprecated module ``old``: warn, and make the new module answer for it (the same
    objects under both names, so pickles and dotted paths naming the old one keep working)."""
    import importlib
    import sys
    import warnings

    new = f"django_taskmq.{MOVED[old.rpartition('.')[2]]}"
    warnings.warn(f"{old} is deprecated: import {new} instead (the old path is removed in the release after next)",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'django_taskmq' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"django_taskmq.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
