"""Finding the code a path names: ``resolve`` imports it, ``callable_for`` says what to call.

A leaf module: tasks, options, execution and the allow-list all use it, and it imports none of
them. ``Task`` objects are recognised by their ``taskmq_task`` marker, not by class, for that reason.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

# Import paths of every Task declared in this process (@task, Task(...), Task subclasses):
# schedules may name these wherever they live (see allowed_tasks.py).
DECLARED: set[str] = set()


def is_task_class(target: Any) -> bool:
    """Return True for a ``Task`` subclass (the class form)."""
    return isinstance(target, type) and getattr(target, "taskmq_task", False)


def is_task(target: Any) -> bool:
    """Return True for a ``Task`` instance (``@task`` or ``Task(func)``)."""
    return not isinstance(target, type) and getattr(target, "taskmq_task", False)


def is_django_task(target: Any) -> bool:
    """Return True for a ``django.tasks`` Task (Django 6.0+)."""
    return hasattr(target, "call") and hasattr(target, "get_backend")


@functools.lru_cache(maxsize=1024)
def resolve(path: str) -> Any:
    """Import ``package.module.attr`` (the longest importable module prefix wins).

    Raises ImportError saying what could not be found, with the real cause chained.
    """
    module_path, _, attr = path.rpartition(".")
    if not module_path or not attr:
        raise ImportError(f"{path!r} is not a dotted path like 'app.tasks.send'")
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        if "." not in module_path or exc.name != module_path:
            raise  # the module itself is missing, or it imports something missing: say which
        owner = resolve(module_path)  # "module.Class.method": the prefix is an attribute
    else:
        owner = module
    try:
        return getattr(owner, attr)
    except AttributeError:
        raise ImportError(f"{module_path!r} has no attribute {attr!r}") from None


def callable_for(path: str) -> Any:
    """Return what to call for a task path: a function, a @task's function or a Task's run()."""
    target = resolve(path)
    if is_task_class(target):
        return target().run
    if is_task(target):
        return target.run
    if is_django_task(target):
        return target.call
    return target


def runnable(target: Any) -> bool:
    """Return True when :func:`callable_for` can run ``target`` (a callable or a django.tasks Task)."""
    return callable(target) or is_django_task(target)


def is_durable(target: Any) -> bool:
    """Return True for a durable task: a ``@durable`` Task, or a Django task ``@durable`` marked
    (its function carries the mark: Django's ``Task.using()`` copies the task, not the function)."""
    if is_django_task(target):
        return bool(getattr(target.func, "taskmq_durable", False))
    return bool(getattr(target, "taskmq_durable", False))
