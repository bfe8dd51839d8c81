"""The pusher process: reserve from the broker, verify and unpickle, hand tasks to the sentinel.

It answers each :class:`~.messages.Want` from the sentinel with one :class:`~.messages.Batch`.
A package that fails to verify or unpickle never reaches a worker: it is dead-lettered here.
"""

from __future__ import annotations

import logging
import signal
import time
from multiprocessing.connection import Connection

from ..conf import Settings
from ..exceptions import BadPackage
from . import outage
from .messages import Batch, Stop, Ticket, Want

logger = logging.getLogger(__name__)

URGENT_CHECK = 0.02  # seconds between looks for work above the buffer's lowest priority


def run(pipe: Connection, settings: Settings, queues: list[str], owner: str, burst: bool = False,
        workers: int | None = None) -> None:
    """Serve the sentinel's wants until it sends :class:`Stop` or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ..brokers import get_broker
    from ..signals import post_spawn

    broker = get_broker()
    # While the database is away: one line every few seconds with a count, not a traceback a claim.
    failures = outage.FailureLog("pusher", logger)
    waker = broker.waker()
    post_spawn.send(sender=run, proc_name="pusher")
    found_last_time = True
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, Stop):
            return
        assert isinstance(message, Want)
        claimed = _claim_safely(broker, settings, queues, owner, message, not found_last_time, workers, failures)
        failed = claimed is None
        tasks = claimed or []
        if failed:
            pipe.poll(1.0)  # the database is away: do not hammer it
        elif not tasks and message.count == 0:
            # Only looking for urgent work while the sentinel's buffer is full: a short fixed nap,
            # not the wake-up channel, which fires on every commit while the cluster is busy.
            pipe.poll(URGENT_CHECK)
        elif not tasks:
            # In burst mode the sentinel decides soon whether all is done; a short nap is enough.
            waker.wait(min(settings.poll, 0.05) if burst else settings.poll, pipe)
            if not pipe.poll(0):
                # Woken early: work very likely arrived, claim without asking first.
                claimed = _claim_safely(broker, settings, queues, owner, message, not waker.woken, workers, failures)
                failed = claimed is None
                tasks = claimed or []
        found_last_time = bool(tasks)
        try:
            # A failed claim found out nothing: it does not say the queues are drained.
            pipe.send(Batch(tuple(tasks), drained=not tasks and message.count > 0 and not failed))
        except (BrokenPipeError, OSError):
            return


def _claim_safely(broker, settings: Settings, queues: list[str], owner: str, want: Want,
                  check_first: bool, workers: int | None = None,
                  failures: outage.FailureLog | None = None) -> list | None:
    """Return :func:`claim`'s tasks, or None when the database failed (a restart, a lost connection).

    Whatever a failed claim reserved was never handed over, so its lease runs out and it returns.
    ``failures`` counts and logs the failures (rate-limited) and the recovery.
    """
    failures = failures or outage.FailureLog("pusher", logger)
    try:
        tasks = claim(broker, settings, queues, owner, want, check_first, workers)
    except Exception as exc:
        failures.failed("claim", exc)
        broker.close()
        return None
    failures.succeeded()
    return tasks


def claim(broker, settings: Settings, queues: list[str], owner: str, want: Want, check_first: bool,
          workers: int | None = None) -> list:
    """Reserve what ``want`` asks for and return the verified task messages."""
    from .. import execution as ex

    if check_first or want.count == 0:
        # reserve() sweeps expired leases itself, but these paths may skip it for a long time:
        # an idle cluster must still bring back what a killed cluster held.
        _sweep_expired(broker)
    if want.count > 0:
        if check_first and not broker.has_ready(queues):
            return []
        reservations = broker.reserve(queues, want.count, settings.lease, owner)
    elif want.floor is not None and broker.has_ready(queues, above=want.floor):
        # The buffer is full of lower-priority work: take the urgent ones; the sentinel yields.
        reservations = broker.reserve(queues, workers or settings.workers, settings.lease, owner, above=want.floor)
    else:
        return []
    tasks = []
    for reservation in reservations:
        try:
            tasks.append(Ticket.of(ex.unpack(reservation, settings.name)))
        except BadPackage as exc:
            logger.error("job %s: %s; dead-lettered, not executed", reservation.job_id, exc)
            try:
                broker.dead_letter_package(reservation, str(exc))
            except Exception:
                logger.exception("could not dead-letter job %s", reservation.job_id)
    return tasks


SWEEP_EVERY = 1.0  # seconds between lease sweeps when no claim runs
_last_sweep = 0.0


def _sweep_expired(broker) -> None:
    """Reclaim the messages whose lease ran out, at most every ``SWEEP_EVERY`` seconds."""
    global _last_sweep
    now = time.monotonic()
    if now - _last_sweep >= SWEEP_EVERY:
        _last_sweep = now
        broker.reclaim_expired()
