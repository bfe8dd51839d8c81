"""The sentinel's upkeep: the database work it does on timers, besides supervising its processes.

* lease renewal of the tasks the cluster holds (waiting or running), one statement per 500, every
  ``lease / 3`` seconds;
* the heartbeat (the cluster's row), every :data:`HEARTBEAT_EVERY` seconds, with this host's clock
  skew against the database's, measured by each heartbeat (the first is written at start-up,
  before anything is claimed: :meth:`Upkeep.announce`);
* with each heartbeat, the running jobs of dead clusters taken back (:meth:`Upkeep.release_dead`):
  of this host's clusters whose pid is gone, at once; of any cluster silent for
  :func:`~django_taskmq.policy.lease.dead_after` seconds, then; instead of a whole lease later;
* in a burst, the check whether all is done, and giving up after :data:`BURST_GIVE_UP` seconds
  without the database;
* whatever else the sentinel must tell the database (:meth:`Upkeep.later`: give-backs, yields,
  the look for cancellation requests).

The timers run in the guard loop, which only posts what is due, with what it needs taken at that
moment (the held job ids, the heartbeat's report), to the bookkeeping thread (:mod:`.chores`). No
call here waits on a statement but :meth:`Upkeep.publish_final` and :meth:`Upkeep.close`, bounded,
at the end. The scheduler tick and ``ANALYZE`` run in a process of their own (:mod:`.ticker`).

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
from ..policy.lease import IN_DOUBT, MAY_BE_LOST, dead_after, halt_after, held_for, renew_interval, standing
from . import outage, processes
from .chores import Chores
from .skew import SkewWatch

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 2.0
#: Seconds a cluster of this host whose pid is gone must have been silent (no heartbeat) before
#: what it held is taken back: two heartbeats and a second.
DEAD_NEIGHBOUR_SILENT = 2 * HEARTBEAT_EVERY + 1.0
# The heartbeat waits this long after start-up: the first turns of a new sentinel hand out the
# work that was waiting for it.
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
        self._next = {"renew": 0.0, "heartbeat": later, "burst": 0.0}
        # Monotonic time before the last lease renewal that worked (or that had nothing to renew).
        self.renewed_at = time.monotonic()
        # ... and before the last heartbeat written (the start: none is due before the first).
        self.beat_at = time.monotonic()
        self.halt_after = halt_after(settings.lease, HEARTBEAT_EVERY)
        self.dead_after = dead_after(settings.lease, HEARTBEAT_EVERY)
        # While the database is away: one line per component every few seconds, not a traceback a try.
        self.failures = outage.FailureLog("sentinel", logger,
                                          meanwhile="running tasks go on, their leases are renewed when it answers")
        self.books = Chores("taskmq-bookkeeping")
        self._burst_over = False  # a burst check found nothing unfinished, and the cluster stayed idle since
        self._idle_spell = 0  # counts the cluster's idle spells: a check's answer holds only for its own

    def announce(self) -> None:
        """Write the cluster's row (state ``starting``) now, in the caller's thread, before anything is
        claimed: a cluster killed before its first heartbeat is then found dead by its successor on
        the same host (or by any cluster after ``dead_after``), and what it claimed comes back at
        once instead of a lease later. :meth:`Sentinel.start` calls it before the first fork; its
        statement is bounded (``outage.bound_statements``). A failure is logged like a heartbeat's:
        the database is away, so nothing is claimed either."""
        sent = time.monotonic()
        if self.attempt("heartbeat", lambda: self._write_heartbeat(self.report(), False)):
            self.beat_at = max(self.beat_at, sent)

    def start(self) -> None:
        """Start the bookkeeping thread (:meth:`Sentinel.start` does, after its first forks)."""
        self.books.start()

    @property
    def wakes(self) -> list[int]:
        """The file descriptors the guard loop's wait watches: readable once a chore's result is back."""
        return [self.books.wake]

    def settle(self) -> None:
        """Hand what the bookkeeping thread sent back to the guard loop (each turn)."""
        self.books.settle()

    def later(self, what: str, operation: Callable[[], object], then: Callable[[bool], None] | None = None) -> None:
        """Run the database operation ``operation`` in the bookkeeping thread (see :meth:`attempt`);
        ``then(worked)`` in the guard loop afterwards."""
        self.books.post(what, lambda: self.attempt(what, operation), then)

    def due(self, what: str, every: float) -> bool:
        """Return True (and restart its timer) when ``what`` is due again."""
        now = time.monotonic()
        if now < self._next[what]:
            return False
        self._next[what] = now + every
        return True

    # -- while running ------------------------------------------------------------------------
    def run(self) -> None:
        """Post what is due (renewal, heartbeat) to the bookkeeping thread; a chore still running is
        not posted again. What fails is tried again at its next due time."""
        if self.due("renew", renew_interval(self.settings.lease)):
            self._post_renewal()
        if self.due("heartbeat", HEARTBEAT_EVERY):
            self.publish()

    def stopping(self) -> None:
        """While stopping: renew what still runs, beat (state ``stopping``), give up a burst on an outage."""
        if self.due("renew", renew_interval(self.settings.lease)):
            self._post_renewal()
        if self.due("heartbeat", HEARTBEAT_EVERY):
            self.publish()
        self.give_up_if_away()

    def _post_renewal(self) -> None:
        held = self.held()
        if not held and not self.books.pending("renew"):
            # Nothing held, nothing to renew: no statement, so no sign either way of the database.
            self.renewed_at = time.monotonic()
            return
        self.books.post("lease renewal", lambda: self._renew(held), kind="renew")

    def _renew(self, held: list[str]) -> bool:
        """Renew the leases of ``held``, one statement (in the bookkeeping thread); return whether it worked."""
        started = time.monotonic()
        if not self.attempt("lease renewal", lambda: self._extend_leases(held)):
            return False
        self.renewed_at = max(self.renewed_at, started)
        return True

    def _extend_leases(self, held: list[str]) -> int:
        with self.broker.bookkeeping():  # the cluster's own commit (see Broker.bookkeeping)
            return self.broker.extend_leases(self.owner, held, self.settings.lease)

    def leases(self) -> str:
        """What the cluster can say of the leases it holds (:func:`~django_taskmq.policy.lease.standing`)."""
        # A renewal that has not come back (a locked table, a silent server) counts as failing.
        failing = self.failures.failing or self.books.pending("renew")
        now = time.monotonic()
        found = standing(now - self.renewed_at, self.settings.lease, failing)
        # Silent for dead_after, the others take what it runs (or ran) back: as if the leases were out.
        silent = now - self.beat_at
        if silent > self.dead_after:
            return MAY_BE_LOST
        return IN_DOUBT if silent > self.halt_after and found != MAY_BE_LOST else found

    def silent_for(self) -> float:
        """Seconds since the last heartbeat written was sent (past :attr:`halt_after`, the sentinel
        stops what it runs: see :meth:`.stopping.Stopping.halt_if_cut_off`)."""
        return time.monotonic() - self.beat_at

    def publish(self) -> None:
        """Post the heartbeat, what the sentinel reports now (unless the last one is still being written)."""
        if not self.books.pending("heartbeat"):
            report = self.report()
            self.books.post("heartbeat", lambda: self.attempt("heartbeat", lambda: self._beat(report)), kind="heartbeat")

    def _beat(self, report: Report) -> None:
        sent = time.monotonic()
        self._write_heartbeat(report, False)
        self.beat_at = max(self.beat_at, sent)
        self.release_dead()

    def publish_final(self, timeout: float) -> bool:
        """Write the last heartbeat (state ``stopped``) after what was posted before, waiting up to
        ``timeout`` seconds; return whether it was written."""
        report = self.report()
        written: list[bool] = []
        self.books.post("last heartbeat", lambda: self.attempt("heartbeat", lambda: self._write_heartbeat(report, True)),
                        written.append)
        if not self.books.wait(timeout):
            logger.error("cluster %s: the database did not answer within %.0f s at the stop (the bookkeeping "
                         "thread waits on %s): the last heartbeat and give-backs are not written; the leases "
                         "of what the cluster held bring it back", self.owner, timeout, self.books.describe())
        return bool(written and written[0])

    def finish(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for everything posted to the bookkeeping thread, handing the
        results to their ``then``; return whether all of it finished."""
        return self.books.wait(timeout)

    def close(self, timeout: float) -> None:
        """End the bookkeeping thread, waiting up to ``timeout`` seconds."""
        if not self.books.stop(timeout):
            logger.warning("cluster %s: thread %s still waits on %s; left to end with the process",
                           self.owner, self.books.name, self.books.describe())

    def release_dead(self) -> int:
        """Make the leases of dead clusters run out now (in the bookkeeping thread, after each
        heartbeat); return how many jobs come back. The pusher's next sweep of expired leases
        (within a second) takes them back, each delivery counted, instead of a whole lease later.

        * A cluster of this host silent for :data:`DEAD_NEIGHBOUR_SILENT` seconds whose pid is gone
          was killed (SIGKILL, a crash): its successor takes its work back at once. The silence
          guards against a live cluster on another host (or in another pid namespace) with the
          same host name: it beats every :data:`HEARTBEAT_EVERY` seconds.
        * Any cluster silent for ``dead_after`` seconds (a third of the lease and 5 s) is dead or
          cut off; cut off, it stopped what it ran ``halt_after`` seconds after its last heartbeat
          (see :meth:`.stopping.Stopping.halt_if_cut_off`), so no job runs twice at once.

        A cluster silent for longer than its leases can last is passed over: nothing of it is left.
        """
        longest = held_for(self.settings.lease, HEARTBEAT_EVERY)
        here = self.broker.silent_clusters(self.host, DEAD_NEIGHBOUR_SILENT, longest)
        dead = {owner for owner, pid in here if processes.pid_gone(pid)}
        dead.update(owner for owner, _ in self.broker.silent_clusters(None, self.dead_after, longest))
        dead.discard(self.owner)
        if not dead:
            return 0
        with self.broker.bookkeeping():  # the cluster's own commit (see Broker.bookkeeping)
            count = self.broker.expire_leases(sorted(dead))
        if count:
            logger.warning("cluster %s: %d job(s) held by dead cluster(s) %s (gone from this host, or silent for "
                           "%.0f s) come back now", self.owner, count, ", ".join(sorted(dead)), self.dead_after)
        return count

    def _write_heartbeat(self, report: Report, final: bool) -> None:
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
        database is away, every :data:`HEARTBEAT_EVERY` s), the broker is asked, in the bookkeeping
        thread; an answer counts only while the cluster has stayed idle since it asked."""
        if not idle:
            self._idle_spell += 1  # an answer on its way is about a spell that is over
            self._burst_over = False
            return False
        if self._burst_over:
            return True
        if self.due("burst", HEARTBEAT_EVERY if self.failures.failing else BURST_CHECK_EVERY):
            spell = self._idle_spell
            done: list[bool] = []

            def answered(worked: bool) -> None:
                if worked and done[0] and spell == self._idle_spell:
                    self._burst_over = True

            self.books.post("burst check", lambda: self.attempt("burst check", lambda: done.append(self._all_done())),
                            answered, kind="burst")
        return False

    def _all_done(self) -> bool:
        # The broker looks in one query, one snapshot: separate queries could each miss a job that
        # moves from RUNNING to RETRYING between them, and the burst would end with work left.
        # Jobs queued for later (eta/delay) do not keep a burst alive; retries do.
        return not self.broker.unfinished(self.queues)

    def give_up_if_away(self) -> None:
        """In a burst, raise :class:`DatabaseAway` once no database operation of the sentinel has
        worked for :data:`BURST_GIVE_UP` seconds (or one has waited that long)."""
        if not self.burst:
            return
        away = max(self.failures.down_for(), self.books.busy_for())
        if away >= BURST_GIVE_UP:
            raise DatabaseAway(
                f"qcluster --burst: giving up, database {self.broker.describe()} "
                f"unreachable for {away:.0f} s ({self.failures.failures} failures; "
                f"last {self.failures.last or 'none'}; waiting on {self.books.describe()}); stopping the cluster")

    # -- failures -----------------------------------------------------------------------------
    def attempt(self, what: str, operation: Callable[[], object]) -> bool:
        """Run one database operation; on failure count it (rate-limited log) and reconnect next time."""
        try:
            operation()
        except Exception as exc:
            # The database may be restarting: keep the processes alive, reconnect next time.
            self.failed(what, exc)
            return False
        self.failures.succeeded()
        return True

    def failed(self, what: str, exc: BaseException) -> None:
        """Count a failed database operation and drop the connection (the next call reconnects)."""
        self.failures.failed(what, exc)
        self.broker.close()
