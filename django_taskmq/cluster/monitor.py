"""The monitor process: record outcomes in batches, one transaction for many results.

:func:`run` is the process's entry point; :class:`Monitor` does the work (gather, record, prune)
and can be driven without a process.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import signal
import socket
import time
from typing import Any, Protocol

from .. import execution as ex
from ..brokers.base import Broker
from ..conf import Settings
from ..policy import retention as retention_policy
from ..policy.connections import RECONNECT
from . import outage
from .messages import END_OF_RESULTS, load_outcomes, says_idle
from .result_pipe import ResultPipe

logger = logging.getLogger(__name__)

BATCH = 500
GATHER = 0.005  # seconds the monitor waits for more outcomes before recording a batch, when busy
BUSY = 0.05  # outcomes arrived within this many seconds of the last recording: the cluster is busy
PRUNE_EVERY = 1.0  # seconds between pruning rounds
PRUNE_BUDGET = 0.1  # seconds a round may spend deleting (short deletes keep SQLite's write lock free)
RETENTION_BATCH = 500  # jobs deleted per transaction by retention and save_limit
RETENTION_LOG_EVERY = 60.0  # seconds between two lines about what retention deleted


class RetentionLog:
    """What retention deleted, logged at once the first time, then as one line a minute, and what
    is still untold when the monitor stops."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}
        self.logged = float("-inf")  # monotonic time of the last line

    def deleted(self, by_state: dict[str, int]) -> None:
        for state, count in by_state.items():
            self.pending[state] = self.pending.get(state, 0) + count
        if time.monotonic() - self.logged >= RETENTION_LOG_EVERY:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return  # nothing to tell: the next deletion is not held back for it
        logger.info("retention: deleted %s finished job(s) older than their retention (%s)",
                    sum(self.pending.values()),
                    ", ".join(f"{state} {count}" for state, count in sorted(self.pending.items())))
        self.pending, self.logged = {}, time.monotonic()


class Results(Protocol):
    """The monitor's end of the result channel (a :class:`~.result_pipe.ResultPipe`, or a
    ``queue.Queue``): ``get`` raises ``queue.Empty`` on a timeout, ``EOFError`` once the sentinel's
    end is closed (the sentinel died)."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...


def run(results: ResultPipe, settings: Settings) -> None:
    """Record outcomes from ``results`` until the end mark arrives; prune old successes on the side."""
    results.close_writer()  # the sentinel's end: only its own copy may keep the pipe open
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ..brokers import get_broker
    from ..signals import post_spawn

    broker = get_broker()  # this process's own (a forked child must not share the sentinel's connection)
    warm_up(broker)
    if settings.health_port is not None:
        from .health_server import serve

        serve(settings.health_port)
    post_spawn.send(sender=run, proc_name="monitor")
    Monitor(results, broker, settings).serve()
    from .. import reporting

    reporting.close()  # the reports of timeouts and crashes still waiting (see reporting.lost)


def warm_up(broker: Broker) -> None:
    """Import what recording needs and connect, before the first outcome arrives: done at the first
    outcome instead, this took about 10 ms here, while the outcomes behind it piled up."""
    from .. import api, recorder  # noqa: F401  (imported lazily by Monitor.record)

    try:
        broker.connect()
    except Exception:  # the database is away: recording reconnects, and logs it, when there is work
        broker.close()


class Monitor:
    """Takes the outcomes the sentinel puts on ``results`` and records them with ``broker``."""

    def __init__(self, results: Results, broker: Broker, settings: Settings) -> None:
        self.results = results
        self.broker = broker
        self.settings = settings
        # While the database is away: one line every few seconds with a count, not a traceback a try.
        self.failures = outage.FailureLog("monitor", logger)
        self.last_prune = time.monotonic()
        self.last_record = 0.0  # monotonic time the last batch was taken
        self.parent = os.getppid()
        self.stopping = False  # the end mark arrived: record what was gathered, then exit
        self.owner = f"{socket.gethostname()}:{self.parent}"  # the cluster (its sentinel), for chores
        self.retention_log = RetentionLog()

    def serve(self) -> None:
        """Gather and record until the end mark arrives (or the sentinel is gone); prune every second."""
        while not self.stopping:
            if os.getppid() != self.parent:  # the sentinel was killed: its leases bring the work back
                return
            batch = self.gather()
            if batch:
                self.record(batch)
            self.prune_if_due()
        self.retention_log.flush()  # a round's deletions after the last line are not left untold

    def gather(self, wait: float = 1.0) -> list[ex.Outcome]:
        """Wait up to ``wait`` seconds for outcomes, then take what else arrives within :data:`GATHER` s
        (at most :data:`BATCH` messages); return them. Sets ``stopping`` when the end mark was among them."""
        try:
            first = self.results.get(timeout=wait)
        except queue_module.Empty:
            return []
        except EOFError:  # the sentinel is gone: its leases bring the work back
            self.stopping = True
            return []
        parts = [first]
        # Busy: gather for a few milliseconds, so one commit records many outcomes and leaves the
        # database's write lock to the pusher's claims most of the time (SQLite has one writer).
        # Idle (the first outcome in a while): record what is there at once, for latency.
        now = time.monotonic()
        gather_until = now + GATHER if now - self.last_record < BUSY else now
        self.last_record = now
        # The sentinel says when nothing else waits or runs: no more outcomes are coming, record now
        # (the end of a drain, a few jobs at a time) rather than after the gathering time.
        while len(parts) < BATCH and not says_idle(parts[-1]):
            try:
                parts.append(self.results.get(timeout=max(gather_until - time.monotonic(), 0)))
            except queue_module.Empty:
                break
            except EOFError:  # the sentinel is gone: record what it sent, then exit
                self.stopping = True
                break
        if END_OF_RESULTS in parts:
            self.stopping = True
        # Outcomes travel as lists of pickled bytes: the sentinel forwards them unopened.
        return load_outcomes(parts)

    def record(self, batch: list[ex.Outcome]) -> None:
        """Record a batch, retrying while the database is away (a restart); then give up on it.

        Giving up loses nothing: the leases of these jobs run out and the jobs are delivered again.
        The failed tries are logged (rate-limited), and the recovery.
        """
        from .. import recorder
        from ..api import async_task

        started = time.monotonic()
        deadline = started + self.settings.lease / 2
        while True:
            try:
                recorder.record(batch, self.broker, self.settings, enqueue=async_task, outside_transaction=True,
                                bookkeeping=True)
            except Exception as exc:
                self.broker.close()
                self.failures.failed(f"recording {len(batch)} outcome(s)", exc)
                if time.monotonic() > deadline:
                    logger.error("monitor: gave up recording %d outcome(s) after %.0f s (%s); their leases will "
                                 "bring them back", len(batch), time.monotonic() - started, outage.cause(exc))
                    return
                time.sleep(RECONNECT.delay(max(self.failures.failures, 1)))
            else:
                self.failures.succeeded()
                return

    def prune_if_due(self) -> None:
        """Every :data:`PRUNE_EVERY` s, in the one cluster that holds the pruning chore: delete
        successes beyond ``save_limit`` and finished jobs older than their ``retention`` (for up to
        :data:`PRUNE_BUDGET` s, in short transactions), and expired idempotency keys."""
        if time.monotonic() - self.last_prune <= PRUNE_EVERY:
            return
        self.last_prune = time.monotonic()
        self.last_record = 0.0  # monotonic time the last batch was taken
        try:
            with self.broker.bookkeeping():
                if self.broker.hold_chore(retention_policy.CHORE, self.owner, retention_policy.CHORE_LEASE):
                    self.prune()
        except Exception as exc:
            self.failures.failed("pruning old jobs or expired keys", exc)
            self.broker.close()  # a broken connection would fail every later prune
        else:
            self.failures.succeeded()

    def prune(self) -> None:
        """One pruning round (the chore held): successes beyond ``save_limit`` first, then each final
        state past its retention, until :data:`PRUNE_BUDGET` is spent; then expired keys, and the
        ended workflows whose last job retention deleted.

        Outcomes that arrive meanwhile are recorded between two batches (:meth:`record_waiting`),
        so a job finishing during a round waits for one batch, not for the whole round; their
        recording counts against the budget, so a busy cluster deletes less, not longer."""
        deadline = time.monotonic() + PRUNE_BUDGET
        deleted = 0
        while time.monotonic() < deadline and not self.stopping:
            pruned = self.broker.prune(self.settings.save_limit, RETENTION_BATCH)
            deleted += pruned
            if not pruned:
                break
            self.record_waiting()
        by_state = {}
        # Old by the database's clock, as every time the queue decides with (see brokers/clock.py).
        for state, before in retention_policy.cutoffs(self.settings.retention, self.broker.now()).items():
            count = 0
            while time.monotonic() < deadline and not self.stopping:
                step = self.broker.delete_finished(state.value, before, RETENTION_BATCH)
                count += step
                if step < RETENTION_BATCH:
                    break
                self.record_waiting()
            if count:
                by_state[state.value] = count
        self.broker.prune_keys()
        self.broker.prune_workflows()
        deleted += sum(by_state.values())
        if deleted:
            self.broker.chore_done(retention_policy.CHORE, deleted)
        if by_state:
            self.retention_log.deleted(by_state)

    def record_waiting(self) -> None:
        """Record the outcomes already waiting, if any, without waiting for more. Called between two
        batches of a pruning round: on a table of millions of old jobs every round spends its whole
        budget, and a job that finished meanwhile waited for the whole round (0.1 s)."""
        batch = self.gather(wait=0.0)
        if batch:
            self.record(batch)
