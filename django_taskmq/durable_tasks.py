"""Durable tasks: ``@durable`` and :func:`send_signal` (see ``docs/durable.rst``).

A durable task gets a :class:`~.durable_context.DurableContext` as its first argument; its steps
run once per job whatever happens to the runs, and its sleeps and waits hold no worker.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .api import run_sync
from .brokers import get_broker
from .conf import get_settings
from .runtime.durable_context import MAX_SIGNAL
from .exceptions import BadPackage, ConfigError
from .runtime.loading import is_django_task
from .models import Job
from .options import check_names
from .envelope import seal_result, verify
from .tasks import OPTION_NAMES, Task


class DurableTask(Task):
    """A :class:`~django_taskmq.Task` whose function takes a ``DurableContext`` first; enqueue it as
    any task (``.delay()``, ``async_task``, a workflow step). Call it only with a context."""

    taskmq_durable = True  # how the execution recognises it without importing this module


def durable(func: Callable | None = None, /, *, name: str | None = None, **options: Any) -> Any:
    """Make a function a durable task: ``@durable`` or ``@durable(queue=..., retry=...)``, with the
    options :func:`~django_taskmq.task` takes; a wrong one raises :class:`ConfigError` here.

    The function's first parameter is the context (``ctx.step``, ``ctx.sleep``, ``ctx.sleep_until``,
    ``ctx.wait_for``); the arguments of the enqueue follow it.

    Above Django's ``@task`` (``django.tasks``), it makes that Django task durable and returns it;
    its options are then those of ``TASKS[...]["OPTIONS"]`` (queue and priority are Django's).
    """
    check_names(options, OPTION_NAMES, "@durable got ")

    def wrap(f: Callable) -> Any:
        if is_django_task(f):  # @durable above Django's @task: see backends/durable.py
            from .backends.durable import mark

            return mark(f, name, options)
        if inspect.iscoroutinefunction(f):
            raise ConfigError(f"@durable: {f.__qualname__} is a coroutine function; durable tasks are plain functions")
        return DurableTask(f, name=name, **options)

    return wrap(func) if func is not None else wrap


def send_signal(job_id: str, signal_name: str, payload: Any = None) -> bool:
    """Send ``signal_name`` with ``payload`` to the job ``job_id``: its ``ctx.wait_for(signal_name)``
    returns the payload. A signal sent before the task reaches its wait is kept for it; signals of
    one name are taken in the order they were sent, one per wait.

    Callable from anywhere (a view, a shell, another task, the admin). Returns True when the job was
    waiting for it and wakes now. Raises :class:`ConfigError` for an unknown or finished job, a bad
    name, or a payload that cannot be stored (it is pickled and signed like a result). In sync mode
    (``TASKMQ['sync']``) the job it wakes runs here, before this returns.
    """
    if not isinstance(job_id, str) or not job_id:
        raise ConfigError(f"send_signal() takes a job id (a non-empty string), got {job_id!r}")
    if not isinstance(signal_name, str) or not signal_name or len(signal_name) > MAX_SIGNAL:
        raise ConfigError(f"a signal's name is a string of 1 to {MAX_SIGNAL} characters, got {signal_name!r}")
    settings = get_settings()
    try:
        package = seal_result(payload, settings.name, settings.compress, settings.max_result_size,
                              _encrypted(job_id, settings))
    except ValueError as exc:
        raise ConfigError(f"send_signal(): the payload {exc}") from None
    woke = get_broker().send_signal(job_id, signal_name, package)
    if woke and settings.sync:
        run_sync(job_id)
    return woke


def _encrypted(job_id: str, settings: Any) -> bool:
    """Whether the job's arguments are encrypted (its ``encrypt`` option): a signal's payload is then
    encrypted too, like its result. An unknown job is the broker's to refuse."""
    package = Job.objects.using(settings.database).filter(pk=job_id).values_list("payload", flat=True).first()
    if package is None:
        return False
    try:
        return bool(verify(package, settings.name, decrypt=False).options.get("encrypt"))
    except BadPackage:  # a tampered package: its job never runs, the broker still keeps the signal
        return False
