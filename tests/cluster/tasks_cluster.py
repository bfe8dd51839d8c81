"""Tasks of the cluster suite (imported by qcluster workers as ``tests.cluster.tasks_cluster``).

They write to the same run log as :func:`tests.tasks.record_run` (the file named by
``TASKMQ_RUN_LOG``, one ``"<job id> <tag>"`` line per event, one ``write`` per line) so
:func:`tests.tasks.read_run_log` reads them back. Tasks that must stay running until the test says
so wait for a *gate* file to exist instead of sleeping a guessed time.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from django_taskmq import current_job

RUN_LOG_ENV = "TASKMQ_RUN_LOG"


def log(tag: str, job_id: str | None = None) -> None:
    """Append ``"<job id> <tag>"`` to the run log (nothing without ``TASKMQ_RUN_LOG``)."""
    path = os.environ.get(RUN_LOG_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job_id or current_job()} {tag}\n".encode())
    finally:
        os.close(fd)


def wait_for(path: str, cap: float) -> bool:
    """Wait until ``path`` exists, at most ``cap`` seconds; return whether it appeared."""
    deadline = time.monotonic() + cap
    while not os.path.exists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def gated(tag: str, gate: str, cap: float = 60.0) -> str:
    """Log ``start:<tag>``, wait for the file ``gate`` (at most ``cap`` s), log ``end:<tag>``."""
    log(f"start:{tag} {os.getpid()}")
    wait_for(gate, cap)
    log(f"end:{tag}")
    return tag


def slow(tag: str, seconds: float) -> str:
    """Log ``start:<tag>``, sleep ``seconds``, log ``end:<tag>``."""
    log(f"start:{tag} {os.getpid()}")
    time.sleep(seconds)
    log(f"end:{tag}")
    return tag


def victim(pid_file: str, cap: float = 60.0) -> int:
    """First delivery: write this worker's pid to ``pid_file`` and hang (the test kills it).

    Later deliveries (``pid_file`` exists) log ``end:victim`` and return at once.
    """
    log(f"start:victim {os.getpid()}")
    if not os.path.exists(pid_file):
        tmp = f"{pid_file}.tmp"
        Path(tmp).write_text(str(os.getpid()))
        os.replace(tmp, pid_file)
        time.sleep(cap)
    log("end:victim")
    return os.getpid()


def crash_logged(code: int = 3) -> None:
    """Log ``start:crash``, then kill the worker process with ``os._exit(code)``."""
    log(f"start:crash {os.getpid()}")
    os._exit(code)


def database_time() -> float:
    """Return the database server's clock now (epoch seconds), read by this worker's connection."""
    from django.db import connection

    from tests.clock_probe import server_time

    return server_time(connection)


def clocked(tag: str, seconds: float = 0.0) -> str:
    """Log ``start:<tag> <pid> <database time>``, wait ``seconds``, log ``end:<tag>`` (a server engine).

    It waits on an event, not with ``time.sleep``: under libfaketime 0.9.10 with
    ``DONT_FAKE_MONOTONIC=1`` (the clock-skew tests) ``clock_nanosleep`` on an absolute monotonic
    deadline, which ``time.sleep`` uses, fails with EINVAL; waits with a timeout work.
    """
    log(f"start:{tag} {os.getpid()} {database_time():.3f}")
    threading.Event().wait(seconds)
    log(f"end:{tag}")
    return tag


def sleeper(seconds: float) -> float:
    """Log ``start:sleep``, sleep ``seconds`` (longer than its timeout, in the tests)."""
    log(f"start:sleep {os.getpid()}")
    time.sleep(seconds)
    log("end:sleep")
    return seconds


class Boom(Exception):
    """Raised by :func:`boom`."""


def boom(tag: str = "boom") -> None:
    """Log ``start:<tag>`` and raise :class:`Boom`."""
    log(f"start:{tag}")
    raise Boom(tag)


def hook(job: Any) -> None:
    """A hook: log ``hook:<state>`` for the finished job (runs in the monitor)."""
    log(f"hook:{job.state}", job_id=job.id)


def held_in(tag: str, cap: float = 120.0) -> int:
    """Log ``start:<tag> <pid>``; in a cluster started with ``TASKMQ_TEST_HOLD`` (a file path) wait for
    that file (at most ``cap`` s); log ``end:<tag>``; return the worker's pid (which cluster ran it)."""
    log(f"start:{tag} {os.getpid()}")
    hold = os.environ.get("TASKMQ_TEST_HOLD")
    if hold:
        wait_for(hold, cap)
    log(f"end:{tag}")
    return os.getpid()


def queried(tag: str) -> int:
    """Log ``start:<tag>``, count the jobs (one query on the worker's own connection), log ``end:<tag>``."""
    from django_taskmq.models import Job

    log(f"start:{tag} {os.getpid()}")
    count = Job.objects.count()
    log(f"end:{tag}")
    return count


def stamped(tag: str) -> str:
    """Log ``start:<tag> <epoch time>`` (the rate-limit tests count starts per window)."""
    log(f"start:{tag} {time.time():.6f}")
    return tag


def spin(seconds: float) -> str:
    """Log ``start:spin``, run Python code for ``seconds`` (interruptible in its thread), log ``end:spin``."""
    log(f"start:spin {os.getpid()}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass
    log("end:spin")
    return "spun"


def starts_threads(seconds: float) -> int:
    """Log ``start:threads``, start and join threads one after another for ``seconds`` (an
    interruption comes while one is being started, or between two), log ``end:threads``."""
    log(f"start:threads {os.getpid()}")
    deadline = time.monotonic() + seconds
    started = 0
    while time.monotonic() < deadline:
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
        started += 1
    log("end:threads")
    return started


async def async_sleeper(seconds: float) -> float:
    """A coroutine task: log ``start:async-sleep``, ``await asyncio.sleep(seconds)``, log ``end:async-sleep``."""
    import asyncio

    log(f"start:async-sleep {os.getpid()}")
    await asyncio.sleep(seconds)
    log("end:async-sleep")
    return seconds


def _log_recorded(sender, job_id, status, **kwargs) -> None:
    """``post_execute`` receiver: log which process recorded the outcome (see :func:`ran_by`)."""
    log(f"recorded-by:{os.getpid()}:{status}", job_id)


def ran_by() -> int:
    """Log ``ran-by:<pid>`` and, from now on in this process, every outcome it records.

    The receiver is connected in the worker that runs this task; the monitor never imports this
    module, so a ``recorded-by`` line can only come from a worker that recorded an outcome itself.
    """
    from django_taskmq.signals import post_execute

    post_execute.connect(_log_recorded, dispatch_uid="tests.cluster.tasks_cluster.recorded_by")
    log(f"ran-by:{os.getpid()}")
    return os.getpid()


def nap(gate: str, seconds: float) -> str:
    """Log ``start:nap``; unless the file ``gate`` exists, sleep ``seconds`` in one C call (an
    interruption of its thread lands only when it returns); log ``end:nap``."""
    log(f"start:nap {os.getpid()}")
    if not os.path.exists(gate):
        time.sleep(seconds)
    log("end:nap")
    return "napped"


def ignores_cancel(seconds: float) -> str:
    """Log ``start:ignores``; run ``seconds`` in short sleeps without looking at a cancellation (it is
    stopped only by the interruption after ``cancel_grace``); log ``end:ignores``."""
    log(f"start:ignores {os.getpid()}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    log("end:ignores")
    return "ignored"


def cooperative(seconds: float) -> str:
    """Log ``start:cooperative``; loop until ``current_job().cancelled`` (at most ``seconds``), then log
    ``saw-cancel`` and raise JobCancelled through ``raise_if_cancelled()``."""
    log(f"start:cooperative {os.getpid()}")
    job = current_job()
    assert job is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if job.cancelled:
            log("saw-cancel")
            job.raise_if_cancelled()
        time.sleep(0.02)
    log("end:cooperative")
    return "not cancelled"


async def async_waits(seconds: float) -> str:
    """A coroutine task: log ``start:async``, ``await asyncio.sleep(seconds)``; log ``cancelled-error``
    when that raises CancelledError (and let it through)."""
    import asyncio

    log(f"start:async {os.getpid()}")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        log("cancelled-error")
        raise
    log("end:async")
    return "awaited"


def notices_cancel(seconds: float) -> str:
    """Log ``start:notices``; loop ``seconds``, logging ``saw-cancel`` once when the job is cancelled,
    without stopping for it."""
    log(f"start:notices {os.getpid()}")
    job = current_job()
    assert job is not None
    seen = False
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if job.cancelled and not seen:
            seen = True
            log("saw-cancel")
        time.sleep(0.02)
    log("end:notices")
    return "noticed"


def stubborn(seconds: float) -> str:
    """Log ``start:stubborn``; run ``seconds`` in short sleeps without looking at a cancellation; log
    ``interrupted:stubborn`` when the cluster's interruption lands (then let it end the task)."""
    log(f"start:stubborn {os.getpid()}")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
    except BaseException as exc:
        log(f"interrupted:stubborn {type(exc).__name__}")
        raise
    log("end:stubborn")
    return "not interrupted"
