"""The sentinel's upkeep: the database work it does on timers, besides supervising its processes.

* lease renewal of the tasks the cluster holds (waiting or running), one statement per 500, every
  ``lease / 3`` seconds;
* the scheduler tick, every ``scheduler_interval`` seconds (not in a burst);
* the heartbeat (the cluster's row), every :data:`HEARTBEAT_EVERY` seconds, with this host's clock
  skew against the database's, measured by each heartbeat (the first is written at start-up);
* ``ANALYZE`` (a no-op on engines without planner statistics), at start and every :data:`ANALYZE_EVERY` s;
* in a burst, the check whether all is done, and giving up after :data:`BURST_GIVE_UP` seconds
  without the database.

A failure (the database is restarting) is logged through the outage failure logs, one line every
few seconds, and the operation is tried again at its next due time with a new connection. Upkeep
talks to the broker only; what the cluster holds and what its heartbeat reports come from the
sentinel through the ``held`` and ``report`` callables.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ..brokers.base import Broker
from ..conf import Settings
from ..policy.lease import renew_interval, standing
from . import outage
from .skew import SkewWatch

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 2.0
ANALYZE_EVERY = 600.0  # seconds between planner statistics refreshes (PostgreSQL)
# The chores wait this long after start-up: the first turns of a new sentinel hand out the work
# that was waiting for it, and a heartbeat, a scheduler tick or an ANALYZE (with the imports they
# need) would make that work wait instead.
FIRST_CHORES_AFTER = 0.25
BURST_CHECK_EVERY = 0.05  # a burst ends within this of its last outcome (one cheap query a check)
# A burst gives up after this many seconds without a successful database operation of the sentinel,
# so it exits within 30 s of losing the database even when each attempt waits for a connect timeout.
BURST_GIVE_UP = 15.0


class DatabaseAway(Exception):
    """A burst gives up: the database has been unreachable for :data:`BURST_GIVE_UP` seconds."""


class Report(NamedTuple):
    """What the heartbeat says of the cluster's processes at this moment."""

    state: str  # "starting", "running", "stopping" or "stopped"
    workers: int  # worker processes alive
    counts: dict[str, Any]  # the sentinel's counters, "waiting", "running" and "queues" (per queue by outcome)


class Upkeep:
    """The timers and database chores of one sentinel, identified in the broker as ``owner``."""

    def __init__(self, settings: Settings, broker: Broker, *, owner: str, name: str, host: str,
                 queues: list[str], burst: bool, held: Callable[[], list[str]],
                 report: Callable[[], Report]) -> None:
        self.settings = settings
        self.broker = broker
        self.owner = owner
        self.name = name
        self.host = host
        self.queues = queues
        self.burst = burst
        self.held = held
        self.report = report
        self.started = time.time()  # shown as the start time; the uptime is measured on the monotonic clock
        self.started_monotonic = time.monotonic()
        self.skew = SkewWatch(broker, owner, settings.clock_skew_warning)
        later = time.monotonic() + FIRST_CHORES_AFTER
        self._next = {"analyze": later, "renew": 0.0, "heartbeat": later, "scheduler": later, "burst": 0.0}
        # Monotonic time before the last lease renewal that worked (or that had nothing to renew).
        self.renewed_at = time.monotonic()
        # While the database is away: one line per component every few seconds, not a traceback a try.
        self.failures = outage.FailureLog("sentinel", logger,
                                          meanwhile="running tasks go on, their leases are renewed when it answers")
        self.scheduler_failures = outage.FailureLog("scheduler", logger)

    def due(self, what: str, every: float) -> bool:
        """Return True (and restart its timer) when ``what`` is due again."""
        now = time.monotonic()
        if now < self._next[what]:
            return False
        self._next[what] = now + every
        return True

    # -- while running ------------------------------------------------------------------------
    def run(self) -> None:
        """Renew, tick, beat, analyze when due. A failure ends this turn's upkeep; what was not
        tried stays due, and what failed is tried again at its next due time with a new connection.
        """
        from .. import scheduler

        # Nothing held, nothing to renew: no statement, so no sign either way of the database.
        if self.due("renew", renew_interval(self.settings.lease)) and not self._renew():
            return
        if self.due("scheduler", self.settings.scheduler_interval) and not self.burst:
            if not self.attempt("tick", lambda: scheduler.tick(self.settings, broker=self.broker),
                                self.scheduler_failures):
                return
        if self.due("heartbeat", HEARTBEAT_EVERY) and not self.publish():
            return
        if self.due("analyze", ANALYZE_EVERY):
            # A no-op on some engines: its success says nothing about the database.
            self.attempt("ANALYZE", self.broker.analyze, proof=False)

    def stopping(self) -> None:
        """While stopping: renew what still runs, beat (state ``stopping``), give up a burst on an outage."""
        renewed = not self.due("renew", renew_interval(self.settings.lease)) or self._renew()
        if renewed and self.due("heartbeat", HEARTBEAT_EVERY):
            self.publish()
        self.give_up_if_away()

    def _renew(self) -> bool:
        """Renew the leases of what the cluster holds, one statement; return False if that failed."""
        held = self.held()
        started = time.monotonic()
        if held and not self.attempt("lease renewal",
                                     lambda: self._extend_leases(held)):
            return False
        self.renewed_at = started
        return True

    def _extend_leases(self, held: list[str]) -> int:
        with self.broker.bookkeeping():  # the cluster's own commit (see Broker.bookkeeping)
            return self.broker.extend_leases(self.owner, held, self.settings.lease)

    def leases(self) -> str:
        """What the cluster can say of the leases it holds (:func:`~django_taskmq.policy.lease.standing`)."""
        return standing(time.monotonic() - self.renewed_at, self.settings.lease, self.failures.failing)

    def publish(self, final: bool = False) -> bool:
        """Write the heartbeat row (state ``stopped`` when ``final``); return whether it was written."""
        return self.attempt("heartbeat", lambda: self._write_heartbeat(final))

    def _write_heartbeat(self, final: bool) -> None:
        report = self.report()
        if not final:
            self.skew.measure()
        with self.broker.bookkeeping():  # the cluster's own commit (see Broker.bookkeeping)
            self.broker.publish_heartbeat(
                self.owner,
                name=self.name, host=self.host, pid=os.getpid(),
                state="stopped" if final else report.state, workers=report.workers, queues=self.queues,
                counts={**report.counts, "uptime": round(time.monotonic() - self.started_monotonic, 1),
                        **self.skew.counts()},
                started_at=datetime.datetime.fromtimestamp(self.started, tz=datetime.UTC),
            )

    # -- a burst ------------------------------------------------------------------------------
    def burst_done(self, idle: bool) -> bool:
        """Return whether a burst is over. ``idle``: the pusher found nothing ready and no task
        waits or runs here; only then, and at most every :data:`BURST_CHECK_EVERY` s (while the
        database is away, every :data:`HEARTBEAT_EVERY` s), the broker is asked."""
        if not idle or not self.due("burst", HEARTBEAT_EVERY if self.failures.failing else BURST_CHECK_EVERY):
            return False
        try:
            # The broker looks in one query, one snapshot: separate queries could each miss a job that
            # moves from RUNNING to RETRYING between them, and the burst would end with work left.
            # Jobs queued for later (eta/delay) do not keep a burst alive; retries do.
            done = not self.broker.unfinished(self.queues)
        except Exception as exc:
            self.failed("burst check", exc)
            return False
        self.failures.succeeded()
        return done

    def give_up_if_away(self) -> None:
        """In a burst, raise :class:`DatabaseAway` once no database operation of the sentinel has
        worked for :data:`BURST_GIVE_UP` seconds."""
        if self.burst and self.failures.down_for() >= BURST_GIVE_UP:
            raise DatabaseAway(
                f"qcluster --burst: giving up, database {self.broker.describe()} "
                f"unreachable for {self.failures.down_for():.0f} s ({self.failures.failures} failures; "
                f"last {self.failures.last}); stopping the cluster")

    # -- failures -----------------------------------------------------------------------------
    def attempt(self, what: str, operation: Callable[[], object], failures: outage.FailureLog | None = None,
                proof: bool = True) -> bool:
        """Run one database operation; on failure count it (rate-limited log) and reconnect next time.

        ``proof``: whether its success shows the database is there (it ran a statement).
        """
        try:
            operation()
        except Exception as exc:
            # The database may be restarting: keep the processes alive, reconnect next time.
            self.failed(what, exc, failures)
            return False
        if proof:
            (failures or self.failures).succeeded()
        return True

    def failed(self, what: str, exc: BaseException, failures: outage.FailureLog | None = None) -> None:
        """Count a failed database operation and drop the connection (the next call reconnects)."""
        (failures or self.failures).failed(what, exc)
        self.broker.close()
