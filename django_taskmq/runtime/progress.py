"""Progress of long jobs: ``current_job().set_progress(done, total=None, message="")``.

A call stores the report in memory and returns: it costs a task a lock and a dict entry, however
often it is called. A writer thread of the process (started at the first report, with its own
database connection, so a report is neither part of the task's transaction nor undone with it)
writes each job's latest report at once, then at most once every :data:`INTERVAL` seconds while
reports keep coming; its connection is closed whenever no report waits. The write is fenced like every other: it changes the row only while the
delivery that made the report holds its lease, so a report that arrives after the job ended, or
from a cut-off host, changes nothing. Tasks that never report cost nothing.

The report carries the delivery it belongs to: a job redelivered after a failure shows no
progress until its new delivery reports (see :attr:`Job.progress <django_taskmq.models.Job.progress>`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from . import context
from ..brokers.base import Reservation
from ..exceptions import JobCancelled
from ..policy.progress import INTERVAL, report

logger = logging.getLogger(__name__)


class Writer:
    """The writer thread of one process: the latest report of each job, written at most once per
    :data:`INTERVAL` per job."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.lock = threading.Condition()
        self.latest: dict[str, tuple[Reservation, dict[str, Any]]] = {}  # job id -> report not written yet
        self.written: dict[str, float] = {}  # job id -> monotonic time of its last write
        self.writes = 0  # counted for tests and benchmarks
        self.writing = 0  # reports taken but not written yet
        self.thread = threading.Thread(target=self._run, name="taskmq-progress", daemon=True)
        self.thread.start()

    def idle(self) -> bool:
        """True when every report is written (or dropped)."""
        with self.lock:
            return not self.latest and not self.writing

    def put(self, reservation: Reservation, values: dict[str, Any]) -> None:
        with self.lock:
            self.latest[reservation.job_id] = (reservation, values)
            self.lock.notify()

    def _due(self, now: float) -> tuple[list[tuple[Reservation, dict[str, Any]]], float | None]:
        """Take the reports due now; return them and how long until the next one is due."""
        due, wait = [], None
        for job_id in list(self.latest):
            ready_at = self.written.get(job_id, -math.inf) + INTERVAL
            if ready_at <= now:
                due.append(self.latest.pop(job_id))
                self.written[job_id] = now
            else:
                wait = ready_at - now if wait is None else min(wait, ready_at - now)
        # Forget jobs that have not reported for a while (they ended): the dict stays small.
        for job_id in [j for j, t in self.written.items() if now - t > 60 * INTERVAL and j not in self.latest]:
            del self.written[job_id]
        return due, wait

    def _run(self) -> None:
        while True:
            with self.lock:
                due, wait = self._due(time.monotonic())
                if not due:
                    self.lock.wait(wait)
                    continue
                self.writing = len(due)
            for reservation, values in due:
                self._write(reservation, values)
            with self.lock:
                quiet = not self.latest
            if quiet:
                # No report waits: the next may be long in coming (or never, when the jobs of this
                # process stop reporting), so hold no connection meanwhile.
                self._close()
            with self.lock:
                self.writing = 0

    def _close(self) -> None:
        from django.db import connections

        try:
            connections[self.database].close()
        except Exception:
            logger.debug("closing the progress writer's connection failed", exc_info=True)

    def _write(self, reservation: Reservation, values: dict[str, Any]) -> None:
        from django.db import close_old_connections

        from ..brokers import get_broker

        stored = {**values, "at": time.time(), "delivery": reservation.deliveries}
        try:
            get_broker(self.database).report_progress(reservation, stored)
            self.writes += 1
        except Exception:
            # A report is worth less than the job: drop it; a broken connection is replaced.
            logger.warning("job %s: progress not written", reservation.job_id, exc_info=True)
            close_old_connections()


_writer: Writer | None = None
_writer_lock = threading.Lock()


def writer() -> Writer:
    """This process's writer (started at the first report; a forked child starts its own)."""
    global _writer
    with _writer_lock:
        if _writer is None or not _writer.thread.is_alive():
            from ..conf import get_settings

            _writer = Writer(get_settings().database)
        return _writer


def set_progress(reservation: Reservation, done: Any, total: Any = None, message: Any = "") -> None:
    """Record the progress of the delivery ``reservation`` (see :meth:`CurrentJob.set_progress`)."""
    writer().put(reservation, report(done, total, message))


def cancel_requested() -> bool:
    """True when the task the calling code runs in was asked to stop (see :attr:`CurrentJob.cancelled`)."""
    probe = context.get().cancel_probe
    return probe is not None and probe()


class CurrentJob(str):
    """The job the calling code runs in: its id (a ``str``, as before) that can also report progress
    and say whether it was cancelled."""

    reservation: Reservation

    def __new__(cls, reservation: Reservation) -> CurrentJob:
        job = super().__new__(cls, reservation.job_id)
        job.reservation = reservation
        return job

    def __reduce__(self) -> tuple[Any, ...]:
        return str, (str(self),)  # a result or an argument that holds it stores the plain id

    def set_progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Say how far the job is: ``done`` of ``total`` (None: unknown), with a short ``message``.

        Call it as often as you like: it returns at once, and the database sees the latest report
        at most about once a second. ``fetch(job_id).progress`` reads it back. A bad value (negative,
        not a number) raises :class:`~django_taskmq.ConfigError`.
        """
        set_progress(self.reservation, done, total, message)

    @property
    def upstream(self) -> dict[str, Any]:
        """In a workflow step: the results of the steps it waited for (``after``), by step name
        (None for one that did not succeed); ``{}`` outside a workflow. Read from the database
        at the first use."""
        cached = getattr(self, "_upstream", None)
        if cached is None:
            from .upstream import upstream_results

            cached = self._upstream = upstream_results(str(self))
        return cached

    @property
    def cancelled(self) -> bool:
        """True once :func:`django_taskmq.cancel` asked for this job to stop and its cluster has seen
        that (within about a second). A long task checks it at points where stopping is safe."""
        return cancel_requested()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~django_taskmq.JobCancelled` if the job was cancelled (see :attr:`cancelled`):
        the job then ends ``CANCELLED``."""
        if self.cancelled:
            raise JobCancelled(f"job {self} was cancelled")
