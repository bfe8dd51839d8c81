"""Generic task functions for the test suites (importable as ``tests.tasks`` by workers).

The contract, API and cluster tests enqueue these by reference or by dotted path
(``"tests.tasks.add"``). They are plain module-level functions so a spawned worker can import
them; keep them generic and side-effect free except where the docstring says otherwise.

Run log: :func:`record_run` appends one line per run to the file named by the environment
variable ``TASKMQ_RUN_LOG`` (set it in the environment of the process that runs the task, e.g.
the qcluster subprocess). A line is ``"<job id>\\n"`` or ``"<job id> <tag>\\n"`` when a tag is
given; :func:`read_run_log` parses the file back. Writes use ``O_APPEND`` with one ``write``
call per line, so concurrent workers never interleave parts of lines.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from django_taskmq import Task, current_job, task
from django_taskmq.exceptions import Defer, Reject, RetryLater

RUN_LOG_ENV = "TASKMQ_RUN_LOG"


def noop(*args: Any, **kwargs: Any) -> None:
    """Do nothing; accept any arguments."""


def add(a: Any, b: Any) -> Any:
    """Return ``a + b``."""
    return a + b


def echo(*args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Return the call's arguments as ``(args, kwargs)``."""
    return args, kwargs


def takes_options(queue: Any = None, priority: Any = None, delay: Any = None, hook: Any = None) -> dict:
    """Return the arguments it got; its parameter names collide with ``async_task`` options."""
    return {"queue": queue, "priority": priority, "delay": delay, "hook": hook}


class TaskFailed(Exception):
    """The error :func:`fail` raises."""


def fail(message: str = "boom") -> None:
    """Raise :class:`TaskFailed` with ``message``."""
    raise TaskFailed(message)


def fail_with(message: str = "boom", **details: Any) -> None:
    """Raise :class:`TaskFailed` with ``message``; ``details`` are only stored (a dead letter's payload)."""
    raise TaskFailed(message)


def reject(reason: str = "rejected by task") -> None:
    """Ask for the dead-letter queue by raising :class:`~django_taskmq.Reject`."""
    raise Reject(reason)


def retry_later(delay: float | None = None) -> None:
    """Fail this delivery by raising :class:`~django_taskmq.RetryLater` (optionally after ``delay`` s)."""
    raise RetryLater("asked to retry", delay=delay)


def defer(delay: float = 0) -> None:
    """Put the message back by raising :class:`~django_taskmq.Defer` (not a delivery)."""
    raise Defer(delay)


def record_run(tag: Any = "") -> str | None:
    """Append the current job id (and ``tag``) to the file named by ``TASKMQ_RUN_LOG``; return the id.

    Without ``TASKMQ_RUN_LOG`` in the environment nothing is written.
    """
    job_id = current_job()
    path = os.environ.get(RUN_LOG_ENV)
    if path:
        line = f"{job_id} {tag}\n" if tag != "" else f"{job_id}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    return job_id


def read_run_log(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Return the runs :func:`record_run` logged in ``path`` as ``(job_id, tag)`` pairs, in order.

    A missing file means no run; ``tag`` is ``""`` for runs logged without one.
    """
    file = Path(path)
    if not file.exists():
        return []
    runs = []
    for line in file.read_text().splitlines():
        if line:
            job_id, _, tag = line.partition(" ")
            runs.append((job_id, tag))
    return runs


def sleep(seconds: float) -> float:
    """Sleep ``seconds`` and return them (a long-running task)."""
    time.sleep(seconds)
    return seconds


def crash(code: int = 1) -> None:
    """Kill the process running the task at once with ``os._exit(code)`` (a worker crash)."""
    os._exit(code)


def current() -> str | None:
    """Return the id of the job this runs in (``django_taskmq.current_job()``)."""
    return current_job()


async def current_in_subtasks() -> list[str | None]:
    """Return ``current_job()`` as this coroutine, two asyncio tasks it starts and a thread of
    ``asyncio.to_thread`` see it."""
    import asyncio

    async def seen() -> str | None:
        await asyncio.sleep(0)
        return current_job()

    here = current_job()
    gathered = await asyncio.gather(seen(), seen())
    return [here, *gathered, await asyncio.to_thread(current_job)]


def unpicklable_result() -> Any:
    """Return a value that cannot be pickled (a lock)."""
    return threading.Lock()


@task(queue="b", priority=5)
def multiply(x: Any, y: Any) -> Any:
    """Return ``x * y``; a ``@task`` with defaults queue "b" and priority 5."""
    return x * y


@task
def plain_task(*args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Return ``(args, kwargs)``; a bare ``@task`` with no defaults."""
    return args, kwargs


@task
def task_with_option_names(queue: Any = None, priority: Any = None) -> dict:
    """Return the arguments it got; a ``@task`` whose parameters are named like options."""
    return {"queue": queue, "priority": priority}


class Power(Task):
    """The class form: ``run(base, exp)`` returns ``base ** exp``; default queue "a", priority 3."""

    queue = "a"
    priority = 3

    def run(self, base: Any, exp: Any) -> Any:
        return base**exp


power = Power()


def exits(code: int = 3) -> None:
    """Call ``sys.exit(code)``: a task's failure, not the end of its worker."""
    import sys

    sys.exit(code)


def grow_unpicklable(items: list) -> int:
    """Append a lock (which does not pickle) to the argument list; return its new length."""
    import threading

    items.append(threading.Lock())
    return len(items)


def fail_with_unstorable_text(name: str = "report-\udcff.csv") -> None:
    """Raise an error whose text holds a NUL byte and a lone surrogate (no column stores either)."""
    raise ValueError(f"cannot open {name}\x00 (NUL above)")


def leave_autocommit_off() -> str:
    """Turn autocommit off on this thread's connection and return: a transaction left open."""
    from django.db import transaction

    transaction.set_autocommit(False)
    return "left open"


def blob(size: int) -> bytes:
    """Return ``size`` bytes (a large result from a small call)."""
    return b"y" * size


@task(concurrency_key=lambda customer, *args, **kwargs: f"import:{customer}")
def import_customer(customer: Any, *rows: Any) -> Any:
    """One import per customer at a time: the key is computed from the call's first argument."""
    return customer


def cancels_itself() -> None:
    """Log a run (``record_run``), then raise JobCancelled: a task may cancel its own job."""
    from django_taskmq import JobCancelled

    record_run("cancels-itself")
    raise JobCancelled("the task gave up")


def hook_log(job: Any) -> None:
    """A hook: log ``hook:<state>`` for the finished job to the run log."""
    path = os.environ.get(RUN_LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{job.id} hook:{job.state}\n")


def record_secret(secret: Any = "", *, token: Any = "") -> dict:
    """Log the run (with ``secret`` and ``token`` as its tag, see :func:`record_run`); return both in a dict."""
    record_run(f"{secret}{token}")
    return {"secret": secret, "token": token}


@task(encrypt=["token"])
def signs_in(user: str, *, token: str = "") -> str:
    """A task whose ``token`` argument is always encrypted (its ``@task`` option)."""
    return f"{user} signed in"
