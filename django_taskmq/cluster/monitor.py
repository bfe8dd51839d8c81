"""The monitor process: record outcomes in batches, one transaction for many results.

:func:`run` is the process's entry point; :class:`Monitor` does the work (gather, record, and
between two batches a step of the retention rounds of :mod:`.retention`) and can be driven without a process.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import queue as queue_module
import signal
import time
from collections.abc import MutableSequence
from typing import Any, Protocol

from ..runtime import execution as ex
from ..brokers.base import Broker
from ..conf import Settings
from ..policy.connections import RECONNECT
from . import outage
from .messages import END_OF_RESULTS, load_outcomes, says_idle
from .poller import pause
from .result_pipe import ResultPipe
from .retention import Rounds

logger = logging.getLogger(__name__)

BATCH = 500
GATHER = 0.005  # seconds the monitor waits for more outcomes before recording a batch, when busy
BUSY = 0.05  # outcomes arrived within this many seconds of the last recording: the cluster is busy


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
        self.last_record = 0.0  # monotonic time the last batch was taken
        self.parent = os.getppid()
        self.stopping = False  # the end mark arrived: record what was gathered, then exit
        self.retention = Rounds(broker, settings, owner, self.failures)  # the pruning, between two batches

    def serve(self) -> None:
        """Gather and record until the end mark arrives (or the sentinel is gone); prune every second."""
        while not self.stopping:
            self.progress[0] += 1
            if os.getppid() != self.parent:  # the sentinel was killed: its leases bring the work back
                return
            batch = self.gather(wait=min(max(self.retention.prune_at - time.monotonic(), 0.0), 1.0))
            if batch:
                self.record(batch)
                self.progress[1] += len(batch)
            self.retention.prune_if_due()
        self.retention.end()

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
