"""The monitor process: record outcomes in batches, one transaction for many results."""

from __future__ import annotations

import logging
import os
import pickle
import queue as queue_module
import signal
import time

from ..conf import Settings
from . import outage

logger = logging.getLogger(__name__)

BATCH = 500
GATHER = 0.005  # seconds the monitor waits for more outcomes before recording a batch
PRUNE_EVERY = 1.0  # seconds between pruning rounds
PRUNE_BUDGET = 0.1  # seconds a round may spend deleting (short deletes keep SQLite's write lock free)


def run(results, settings: Settings) -> None:
    """Record outcomes from ``results`` until a ``None`` arrives; prune old successes on the side."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ..brokers import get_broker
    from ..signals import post_spawn

    broker = get_broker()
    # While the database is away: one line every few seconds with a count, not a traceback a try.
    failures = outage.FailureLog("monitor", logger)
    post_spawn.send(sender=run, proc_name="monitor")
    last_prune = time.monotonic()
    parent = os.getppid()
    stopping = False
    while not stopping:
        if os.getppid() != parent:  # the sentinel was killed: its leases bring the work back
            return
        try:
            first = results.get(timeout=1.0)
        except queue_module.Empty:
            first = ()
        batch = [first] if first != () else []
        # Gather for a few milliseconds: one commit for many outcomes leaves the database's write
        # lock to the pusher's claims most of the time (SQLite has one writer).
        gather_until = time.monotonic() + GATHER
        while batch and len(batch) < BATCH:
            try:
                batch.append(results.get(timeout=max(gather_until - time.monotonic(), 0)))
            except queue_module.Empty:
                break
        if None in batch:
            stopping = True
        # Outcomes travel as lists of pickled bytes: the sentinel forwards them unopened.
        batch = [pickle.loads(o) for part in batch if part is not None for o in part]
        if batch:
            _record(batch, broker, settings, failures)
        if time.monotonic() - last_prune > PRUNE_EVERY:
            last_prune = time.monotonic()
            try:
                deadline = time.monotonic() + PRUNE_BUDGET
                while broker.prune(settings.save_limit) and time.monotonic() < deadline:
                    pass
                broker.prune_keys()
            except Exception as exc:
                failures.failed("pruning old successes or expired keys", exc)
                broker.close()  # a broken connection would fail every later prune
            else:
                failures.succeeded()


def _record(batch: list, broker, settings: Settings, failures: outage.FailureLog | None = None) -> None:
    """Record a batch, retrying while the database is away (a restart); then give up on it.

    Giving up loses nothing: the leases of these jobs run out and the jobs are delivered again.
    ``failures`` logs the failed tries (rate-limited) and the recovery.
    """
    from .. import recorder
    from ..api import async_task

    failures = failures or outage.FailureLog("monitor", logger)
    started = time.monotonic()
    deadline = started + settings.lease / 2
    while True:
        try:
            recorder.record(batch, broker, settings, enqueue=async_task)
        except Exception as exc:
            broker.close()
            failures.failed(f"recording {len(batch)} outcome(s)", exc)
            if time.monotonic() > deadline:
                logger.error("monitor: gave up recording %d outcome(s) after %.0f s (%s); their leases will bring "
                             "them back", len(batch), time.monotonic() - started, outage.cause(exc))
                return
            time.sleep(0.5)
        else:
            failures.succeeded()
            return
