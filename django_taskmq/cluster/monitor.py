"""The monitor process: record outcomes in batches, one transaction for many results.

:func:`run` is the process's entry point; :class:`Monitor` does the work (gather, record, prune)
and can be driven without a process.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import queue as queue_module
import signal
import time
from collections.abc import Generator, MutableSequence
from typing import Any, Protocol

from ..runtime import execution as ex
from ..brokers.base import Broker
from ..conf import Settings
from ..policy import retention as retention_policy
from ..policy.connections import RECONNECT
from . import outage
from .messages import END_OF_RESULTS, load_outcomes, says_idle
from .poller import pause
from .result_pipe import ResultPipe

logger = logging.getLogger(__name__)

BATCH = 500
GATHER = 0.005  # seconds the monitor waits for more outcomes before recording a batch, when busy
BUSY = 0.05  # outcomes arrived within this many seconds of the last recording: the cluster is busy
PRUNE_EVERY = 1.0  # seconds between the starts of two pruning rounds
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


def run(results: ResultPipe, settings: Settings, owner: str, progress: MutableSequence[int] | None = None) -> None:
    """Record outcomes from ``results`` until the end mark arrives; prune old successes on the side.

    ``owner`` is the cluster's id (its sentinel's), under which the monitor holds the pruning chore.
    ``progress`` (memory shared with the sentinel): ``[turns, outcomes done]``, so the sentinel can
    tell a monitor that waits for ever (see ``Sentinel._watch_monitor``); SIGUSR1 dumps the stack of
    every thread to stderr (the log) when it asks where the monitor waits."""
    results.close_writer()  # the sentinel's end: only its own copy may keep the pipe open
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    from ..brokers import get_broker
    from ..signals import post_spawn

    outage.bound_statements(settings)
    broker = get_broker()  # this process's own (a forked child must not share the sentinel's connection)
    warm_up(broker)
    if settings.health_port is not None:
        from .health_server import serve

        serve(settings.health_port)
    post_spawn.send(sender=run, proc_name="monitor")
    Monitor(results, broker, settings, progress, owner=owner).serve()
    from ..observability import reporting

    reporting.close()  # the reports of timeouts and crashes still waiting (see reporting.lost)


def warm_up(broker: Broker) -> None:
    """Import what recording needs and connect, before the first outcome arrives: done at the first
    outcome instead, this took about 10 ms here, while the outcomes behind it piled up."""
    from ..runtime import recorder  # noqa: F401  (imported lazily by Monitor.record)

    try:
        broker.connect()
    except Exception:  # the database is away: recording reconnects, and logs it, when there is work
        broker.close()


class Monitor:
    """Takes the outcomes the sentinel puts on ``results`` and records them with ``broker``."""

    def __init__(self, results: Results, broker: Broker, settings: Settings,
                 progress: MutableSequence[int] | None = None, *, owner: str) -> None:
        self.results = results
        # [turns, outcomes recorded or given up]: the sentinel watches both (see run)
        self.progress: MutableSequence[int] = [0, 0] if progress is None else progress
        self.broker = broker
        self.settings = settings
        # While the database is away: one line every few seconds with a count, not a traceback a try.
        self.failures = outage.FailureLog("monitor", logger)
        self.prune_at = time.monotonic() + PRUNE_EVERY  # monotonic time of the next pruning step
        self.next_round = self.prune_at  # ... and of the next round's start
        self.pruning: Generator[bool, None, None] | None = None  # the round under way (prune_round)
        self.batch = retention_policy.BATCHES[0]  # jobs the next pruning step deletes (next_batch adapts it)
        self.last_record = 0.0  # monotonic time the last batch was taken
        self.parent = os.getppid()
        self.stopping = False  # the end mark arrived: record what was gathered, then exit
        self.owner = owner  # the cluster's id, for chores
        self.retention_log = RetentionLog()

    def serve(self) -> None:
        """Gather and record until the end mark arrives (or the sentinel is gone); prune every second."""
        while not self.stopping:
            self.progress[0] += 1
            if os.getppid() != self.parent:  # the sentinel was killed: its leases bring the work back
                return
            batch = self.gather(wait=min(max(self.prune_at - time.monotonic(), 0.0), 1.0))
            if batch:
                self.record(batch)
                self.progress[1] += len(batch)
            self.prune_if_due()
        self.end_round()
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
        from ..runtime import recorder

        started = time.monotonic()
        deadline = started + self.settings.lease / 2
        while True:
            self.progress[0] += 1
            try:
                recorder.record(batch, self.broker, self.settings, outside_transaction=True,
                                bookkeeping=True)
            except Exception as exc:
                self.broker.close()
                self.failures.failed(f"recording {len(batch)} outcome(s)", exc)
                if time.monotonic() > deadline:
                    logger.error("monitor: gave up recording %d outcome(s) after %.0f s (%s); their leases will "
                                 "bring them back", len(batch), time.monotonic() - started, outage.cause(exc))
                    return
                pause(RECONNECT.delay(max(self.failures.failures, 1)))
            else:
                self.failures.succeeded()
                return

    def prune_if_due(self) -> None:
        """Take the next pruning step if it is due, in the one cluster that holds the pruning chore.

        A round (:meth:`prune_round`) starts every :data:`PRUNE_EVERY` s and deletes a batch a step.
        After a step of *d* seconds the next waits :func:`.retention.pause_after` (*d*), nine times
        as long: deleting takes at most a tenth of the monitor's time, in stretches of one batch,
        and the outcomes that arrive meanwhile are recorded between two steps. On a table of
        millions of old jobs a round deleted back to back for 0.1 s a second, and every job that
        ran then shared the database's cores and WAL flush with it (the visible p99, see
        docs/performance.rst).
        """
        started = time.monotonic()
        if started < self.prune_at:
            return
        try:
            with self.broker.bookkeeping():
                if self.pruning is None:
                    self.next_round = started + PRUNE_EVERY
                    if not self.broker.hold_chore(retention_policy.CHORE, self.owner, retention_policy.CHORE_LEASE):
                        self.prune_at = self.next_round
                        return
                    self.pruning = self.prune_round(until=self.next_round)
                batch = self.batch
                if next(self.pruning, None) is None:  # the round is over (its last step included)
                    self.pruning = None
                else:
                    self.batch = retention_policy.next_batch(batch, time.monotonic() - started)
        except Exception as exc:
            self.pruning = None
            self.next_round = time.monotonic() + PRUNE_EVERY
            self.failures.failed("pruning old jobs or expired keys", exc)
            self.broker.close()  # a broken connection would fail every later prune
        else:
            self.failures.succeeded()
        ended = time.monotonic()
        self.prune_at = max(ended + retention_policy.pause_after(ended - started),
                            self.next_round if self.pruning is None else ended)

    def prune_round(self, until: float) -> Generator[bool, None, None]:
        """One pruning round (the chore held), a batch per step (it yields after each): successes
        beyond ``save_limit`` first, then each final state past its retention, until there is
        nothing left or ``until`` (monotonic) has passed; then expired keys, and the ended
        workflows whose last job retention deleted."""
        by_state: dict[str, int] = {}
        deleted = 0
        try:
            while time.monotonic() < until:
                pruned = self.broker.prune(self.settings.save_limit, self.batch)
                deleted += pruned
                if not pruned:
                    break
                yield True
            # Old by the database's clock, as every time the queue decides with (see brokers/clock.py).
            for state, before in retention_policy.cutoffs(self.settings.retention, self.broker.now()).items():
                while time.monotonic() < until:
                    batch = self.batch
                    step = self.broker.delete_finished(state.value, before, batch)
                    if step:
                        by_state[state.value] = by_state.get(state.value, 0) + step
                    if step < batch:
                        break
                    yield True
            self.broker.prune_keys()
            self.broker.prune_workflows()
        finally:  # also when the monitor stops mid-round (close()): what was deleted is counted
            deleted += sum(by_state.values())
            if deleted:
                self.broker.chore_done(retention_policy.CHORE, deleted)
            if by_state:
                self.retention_log.deleted(by_state)

    def end_round(self) -> None:
        """Close the round under way, if any, when the monitor stops: what it deleted is counted."""
        if self.pruning is None:
            return
        try:
            self.pruning.close()
        except Exception as exc:  # the database is away: only the chore's counter misses these rows
            self.failures.failed("counting what pruning deleted", exc)
        self.pruning = None
