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

#: Modules that moved (old -> new, under ``django_taskmq.``). Importing an old path warns
#: (DeprecationWarning) and gives the new module itself, so pickles and dotted settings that name
#: the old path keep working; the old paths go in the release after next. No file stands at an old
#: path (a finder answers for them), so that git follows each moved file when branches merge.
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
    "signing": "envelope",
}


class _Moved:
    """The import system's finder and loader for the old paths of :data:`MOVED`."""

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        package, _, old = fullname.rpartition(".")
        if package != __name__ or old not in MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(fullname, _Moved)  # type: ignore[arg-type]

    @staticmethod
    def create_module(spec: Any) -> Any:
        import importlib
        import warnings

        new = f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}"
        warnings.warn(f"{spec.name} is deprecated: import {new} instead (the old path is removed in the release "
                      "after next)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to this spec: put it back
        return module

    @staticmethod
    def exec_module(module: Any) -> None:
        module.__spec__ = module.__spec__.loader_state


import sys as _sys  # noqa: E402

if not any(finder is _Moved for finder in _sys.meta_path):
    _sys.meta_path.append(_Moved)


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
