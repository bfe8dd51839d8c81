"""Error reporting: ``TASKMQ['error_reporter']``, a callable ``(exc, job)`` told of every failed
execution (see :class:`FailedJob` for ``job``).

The worker holds the live exception of a task that raised (:func:`failed`, called by
:func:`~django_taskmq.runtime.execution.execute`) and hands it to the reporter only after the outcome has
left for the sentinel (:func:`deliver`): whatever the reporter does, raise or hang, the job's
outcome is already decided. A reporter runs in a daemon thread that the worker waits for at most
:data:`REPORT_TIMEOUT` seconds; one still running then is left behind (and logged), so a hung
reporter costs a worker that long per failure, never the job.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..brokers.base import Reservation
from ..envelope import Envelope
from ..runtime.loading import resolve
from ..policy.redaction import shown_call

logger = logging.getLogger(__name__)

REPORT_TIMEOUT = 5.0  # seconds a worker waits for one report (and for the reporter's flush at exit)

#: The states :func:`expected_state` names.
RETRYING, FAILED, DEAD = "RETRYING", "FAILED", "DEAD"


@dataclass(frozen=True)
class FailedJob:
    """What a reporter learns about the failed execution of a job.

    ``attempt`` is the delivery that failed (1 for the first); ``state`` the state the job goes
    to: ``"RETRYING"`` (it will run again), ``"FAILED"`` (``ack_failures``) or ``"DEAD"`` (to the
    dead letters: this was its final failure). ``args`` and ``kwargs`` are the task's arguments
    (empty for a timeout or a crash, which the monitor reports: outcomes reach it without them) as
    they may leave the package: those named by ``TASKMQ['redact']`` masked, the encrypted ones
    replaced by a marker (see :mod:`django_taskmq.policy.redaction`); ``encrypted`` says the job had
    encrypted arguments. A reporter that sends events elsewhere should leave them out unless asked
    (they may hold personal data).
    """

    id: str
    task: str
    queue: str
    priority: int
    attempt: int
    max_deliveries: int
    state: str
    cluster: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    encrypted: bool = False

    @property
    def final(self) -> bool:
        """True when the job will not run again (it ends FAILED or DEAD)."""
        return self.state != RETRYING

    @property
    def dead(self) -> bool:
        """True when this failure sends the job to the dead letters."""
        return self.state == DEAD


def expected_state(deliveries: int, max_deliveries: int, acks_failure: bool, retried: bool = True) -> str:
    """The state a failed delivery leads to, as the recorder will decide it.

    ``retried`` False: the failure is not retried whatever the deliveries (a task that cannot be
    imported). ``max_deliveries`` 0 means the broker's default guard did not travel with the
    reservation: only ``deliveries`` past it would say DEAD, so it reads as "not used up".
    """
    from ..policy.states import used_up

    if not retried:
        return DEAD
    if acks_failure:
        return FAILED
    if max_deliveries and used_up(deliveries, max_deliveries):
        return DEAD
    return RETRYING


# Failures held by this thread until the outcome has left (each worker thread runs one task).
_held = threading.local()


@functools.cache
def _reporter(path: str) -> Callable[[BaseException, FailedJob], Any]:
    return resolve(path)


def reporter_problem(path: str) -> str | None:
    """Say why ``path`` cannot be the error reporter; None when it imports as a callable."""
    try:
        target = resolve(path)
    except Exception as exc:
        return f"cannot be imported: {type(exc).__name__}: {exc}"
    if not callable(target):
        return f"names {type(target).__name__} {target!r}, which is not callable"
    return None


def failed(exc: BaseException, r: Reservation, envelope: Envelope, retried: bool = True) -> None:
    """Hold ``exc``, the failure of the delivery ``r`` of ``envelope``, for :func:`deliver` (no-op
    without a reporter). ``retried`` False: this failure is never retried (see :func:`expected_state`)."""
    from ..conf import get_settings
    from ..exceptions import TaskTimeout

    settings = get_settings()
    # A TaskTimeout is the interruption of a task at its timeout (several threads): its outcome is
    # a timeout, reported as the monitor records it (see lost()).
    if settings.error_reporter is None or isinstance(exc, TaskTimeout):
        return
    ack = envelope.options.get("ack_failure")
    max_deliveries = r.max_deliveries or settings.max_deliveries
    job = FailedJob(
        id=r.job_id, task=envelope.func, queue=r.queue, priority=r.priority, attempt=r.deliveries,
        max_deliveries=max_deliveries, cluster=settings.name,
        state=expected_state(r.deliveries, max_deliveries, settings.ack_failures if ack is None else ack, retried),
        **_arguments(envelope, settings.redact),
    )
    pending = getattr(_held, "pending", None)
    if pending is None:
        pending = _held.pending = []
    pending.append((settings.error_reporter, exc, job))


def _arguments(envelope: Envelope, redact: frozenset[str]) -> dict[str, Any]:
    """The arguments a :class:`FailedJob` carries: redacted, the encrypted ones left out."""
    args, kwargs = shown_call(tuple(envelope.args), envelope.kwargs, envelope.options, redact,
                              sealed=envelope.secret is not None)
    return {"args": args, "kwargs": kwargs, "encrypted": bool(envelope.options.get("encrypt"))}


def deliver(timeout: float = REPORT_TIMEOUT) -> None:
    """Hand the failures this thread holds to the reporter; call it once the outcome has left."""
    pending = getattr(_held, "pending", None)
    if not pending:
        return
    _held.pending = None
    for path, exc, job in pending:
        try:
            reporter = _reporter(path)
        except Exception:
            logger.exception("error_reporter %s cannot be imported; job %s not reported", path, job.id)
            continue
        guarded(functools.partial(reporter, exc, job), f"error_reporter {path} (job {job.id})", timeout)


#: Reports of :func:`lost` that may wait for the background reporter; more are dropped (and logged).
BACKLOG = 1000
_backlog: queue.Queue | None = None
_backlog_lock = threading.Lock()


def lost(r: Reservation, envelope: Envelope | None, status: str, error: str, state: str, cluster: str,
         path: str) -> None:
    """Report a delivery the worker could not report itself (it was killed at its timeout, or died),
    as the monitor records it (``state``: the job's state afterwards).

    The monitor records outcomes for the whole cluster: the report waits for a background thread
    of this process (at most :data:`BACKLOG` of them), so no reporter slows recording.
    """
    from ..conf import get_settings
    from ..exceptions import TaskTimeout, WorkerDied

    kind = TaskTimeout if status == "timeout" else WorkerDied
    text = error.partition(": ")[2] or error or status
    job = FailedJob(id=r.job_id, task=envelope.func if envelope else "", queue=r.queue, priority=r.priority,
                    attempt=r.deliveries, max_deliveries=r.max_deliveries, state=state, cluster=cluster,
                    **(_arguments(envelope, get_settings().redact) if envelope else {}))
    global _backlog
    with _backlog_lock:
        if _backlog is None:
            _backlog = queue.Queue(BACKLOG)
            threading.Thread(target=_report_backlog, args=(_backlog,), name="taskmq-report-backlog", daemon=True).start()
    try:
        _backlog.put_nowait((path, kind(text), job))
    except queue.Full:
        logger.warning("error_reporter: %d reports wait already; job %s not reported", BACKLOG, job.id)


def _report_backlog(backlog: queue.Queue) -> None:
    while True:
        path, exc, job = backlog.get()
        try:
            _held.pending = [(path, exc, job)]
            deliver()
        finally:
            backlog.task_done()


def close(timeout: float = REPORT_TIMEOUT) -> None:
    """Let the reporter send what it buffered (its ``flush(timeout)``, if any), after the reports of
    :func:`lost` still waiting (for at most ``timeout`` more); a worker and the monitor call it as
    they end."""
    from ..conf import get_settings

    path = get_settings().error_reporter
    if path is None:
        return
    if _backlog is not None:
        guarded(_backlog.join, "error_reporter backlog", timeout)
    try:
        flush = getattr(_reporter(path), "flush", None)
    except Exception:
        return
    if callable(flush):
        guarded(functools.partial(flush, timeout), f"error_reporter {path} flush", timeout)


def guarded(call: Callable[[], Any], what: str, timeout: float) -> bool:
    """Run ``call`` in a daemon thread for at most ``timeout`` seconds; True if it returned.

    What it raises is logged, never propagated; one still running after ``timeout`` is left
    behind (a daemon thread does not hold the process up as it exits).
    """
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # a reporter's SystemExit must not end the worker either
            errors.append(exc)

    thread = threading.Thread(target=run, name="taskmq-report", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        logger.warning("%s still runs after %.1f s; left behind", what, timeout)
        return False
    if errors:
        logger.warning("%s raised %s", what, type(errors[0]).__name__, exc_info=errors[0])
        return False
    return True
