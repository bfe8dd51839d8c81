"""Durable Django tasks: ``@durable`` above Django's ``@task`` (see ``docs/durable.rst``).

    from django.tasks import task
    from django_taskmq import durable

    @durable(max_deliveries=3)
    @task(queue_name="orders")
    def fulfil(ctx, order_id): ...

    fulfil.enqueue(42)

``@durable`` marks the Django task's function (``taskmq_durable``, read by
:func:`~django_taskmq.runtime.loading.is_durable`) and keeps its django_taskmq options on it
(``taskmq_options``, applied by :meth:`TaskMQBackend.enqueue`); it returns the same Django task.
The mark is on the function because Django's ``Task.using()`` makes a new task around the same
function. Imported only when ``@durable`` is given a Django task, so Django's tasks framework is
there.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..exceptions import ConfigError
from ..options import check_names, validate_options
from .tasks import BACKEND_OPTIONS, TaskMQBackend

__all__ = ["mark"]


def mark(django_task: Any, name: str | None, options: dict[str, Any]) -> Any:
    """Make ``django_task`` durable with ``options`` (those ``TASKS[...]["OPTIONS"]`` takes); return it.

    Raises :class:`ConfigError` when it cannot run as one: its backend is not a ``TaskMQBackend``,
    it takes Django's context (``takes_context=True``: the first argument is the durable context),
    its function is a coroutine function, or an option is one Django's ``@task`` sets (``queue``,
    ``priority``: ``queue_name`` and ``priority`` there) or ``name``.
    """
    label = f"@durable on the Django task {django_task.module_path}"
    if name is not None:
        raise ConfigError(f"{label}: name= is not for Django tasks (their path is their name)")
    taken = sorted(set(options) & {"queue", "priority"})
    if taken:
        raise ConfigError(f"{label}: {', '.join(taken)} is set by Django's @task (queue_name=, priority=), not here")
    check_names(options, BACKEND_OPTIONS, f"{label} got ")
    validate_options(options)
    backend = django_task.get_backend()
    if not isinstance(backend, TaskMQBackend):
        raise ConfigError(f"{label}: its backend {django_task.backend!r} is {type(backend).__name__}; durable tasks "
                          "run only on django_taskmq.backends.tasks.TaskMQBackend")
    if django_task.takes_context:
        raise ConfigError(f"{label}: takes_context=True; a durable task's first argument is its DurableContext "
                          "(ctx.step, ctx.sleep, ctx.wait_for), not Django's TaskContext")
    func = django_task.func
    if inspect.iscoroutinefunction(func):
        raise ConfigError(f"{label}: {func.__qualname__} is a coroutine function; durable tasks are plain functions")
    if not list(inspect.signature(func).parameters):
        raise ConfigError(f"{label}: {func.__qualname__} takes no argument; its first is the DurableContext")
    func.taskmq_durable = True
    func.taskmq_options = dict(options)
    return django_task
