"""Ordinary Django tasks (``django.tasks``, or the ``django_tasks`` backport on Django 5.2), as a
project written for Django's own backends or django-tasks-db declares them."""

import asyncio
import json
import multiprocessing
import os

from tests.django6.djtasks import task, task_finished, task_started


@task(priority=5)
def multiply(a, b):
    return a * b


@task
def explode():
    raise ValueError("django task failed")


@task(takes_context=True)
def with_context(context, value):
    """Return what the context says: the execution number, the live result's id, status and attempts."""
    result = context.task_result
    return {"attempt": context.attempt, "id": result.id, "status": str(result.status),
            "attempts": result.attempts, "value": value, "started": result.started_at is not None}


@task(takes_context=True)
def fails_first(context):
    """Fail on the first execution, succeed on the second: the retry policy in action."""
    if context.attempt == 1:
        raise KeyError("first attempt")
    return context.attempt


class Flaky(Exception):
    """An exception class of the project's own (its path is reported, not ``builtins.Exception``)."""


@task(takes_context=True)
def fails_twice(context):
    """Raise KeyError, then Flaky, then succeed on the third execution."""
    if context.attempt == 1:
        raise KeyError("first attempt")
    if context.attempt == 2:
        raise Flaky("second attempt")
    return context.attempt


@task
async def async_add(a, b):
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
async def async_with_context(context):
    await asyncio.sleep(0)
    return context.attempt


@task
async def async_explode():
    raise RuntimeError("async task failed")


@task(priority=-100)
def lowest(name):
    return name


@task(priority=100)
def highest(name):
    return name


@task(queue_name="emails")
def on_emails(name):
    return name


@task
def echo(value):
    return value


def _log(event, sender, task_result, **kwargs):
    """Append the signal to ``TASKMQ_SIGNAL_LOG`` (JSON lines): which process sent it, in which state."""
    path = os.environ.get("TASKMQ_SIGNAL_LOG")
    if not path:
        return
    line = {"event": event, "id": task_result.id, "status": str(task_result.status), "pid": os.getpid(),
            "process": multiprocessing.current_process().name, "attempts": task_result.attempts}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def _started(sender, task_result, **kwargs):
    _log("started", sender, task_result)


def _finished(sender, task_result, **kwargs):
    _log("finished", sender, task_result)


task_started.connect(_started, dispatch_uid="tests_task_started")
task_finished.connect(_finished, dispatch_uid="tests_task_finished")


@task
def reports_progress(total):
    """Report ``total`` steps through ``django_taskmq.current_job()``; return once they are written."""
    import time

    from django_taskmq import current_job
    from django_taskmq.runtime import progress

    job = current_job()
    for done in range(1, total + 1):
        job.set_progress(done, total, "django task")
    deadline = time.monotonic() + 30
    while not progress.writer().idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    return str(job)


@task
def noop(*args, **kwargs):
    return None


@task
def interrupted():
    raise KeyboardInterrupt("the user pressed Ctrl-C")


@task
def returns_a_lambda():
    """Return what neither JSON nor pickle can store."""
    return lambda: True


@task
def returns_a_tuple():
    return (1, "two", {"three": (3,)})
