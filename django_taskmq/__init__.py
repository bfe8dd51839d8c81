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
    "schedule": "scheduler", "Chain": "chains", "async_chain": "chains",
    "Batch": "batches", "batch": "batches",
    "Workflow": "workflows", "workflow": "workflows", "cancel_workflow": "workflows",
    "pause_queue": "pausing", "resume_queue": "pausing", "paused_queues": "pausing",
}

__all__ = sorted(_EXPORTS)

# Objects frozen for the garbage collector before the project could freeze any (CPython 3.12.1
# freezes a few hundred of its own at start-up): the sentinel tells the project's freeze from these.
FROZEN_AT_IMPORT = gc.get_freeze_count()


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
