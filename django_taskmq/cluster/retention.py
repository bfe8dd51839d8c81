"""Retention rounds: what the monitor deletes every second, a batch at a time, in the one cluster
that holds the pruning chore (successes beyond ``save_limit``, finished jobs past their retention,
expired keys, ended workflows).

The rule (what is old, the batch size, the pause after a step) is :mod:`django_taskmq.policy.retention`;
the SQL is the broker's. :class:`Rounds` is the monitor's state between two steps; the monitor only
calls :meth:`Rounds.prune_if_due` between two batches of outcomes and :meth:`Rounds.end` as it stops.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator

from ..brokers.base import Broker
from ..conf import Settings
from ..policy import retention as retention_policy
from . import outage

logger = logging.getLogger("django_taskmq.cluster.monitor")  # the monitor's lines, as before the move

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


class Rounds:
    """The pruning rounds of one monitor: when the next step is due, the round under way, the batch size."""

    def __init__(self, broker: Broker, settings: Settings, owner: str, failures: outage.FailureLog) -> None:
        self.broker = broker
        self.settings = settings
        self.owner = owner  # the cluster's id, under which it holds the chore
        self.failures = failures  # the monitor's: one rate-limited line while the database is away
        self.prune_at = time.monotonic() + PRUNE_EVERY  # monotonic time of the next pruning step
        self.next_round = self.prune_at  # ... and of the next round's start
        self.pruning: Generator[bool, None, None] | None = None  # the round under way (prune_round)
        self.batch = retention_policy.BATCHES[0]  # jobs the next pruning step deletes (next_batch adapts it)
        self.log = RetentionLog()

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
                self.log.deleted(by_state)

    def end(self) -> None:
        """Close the round under way, if any, when the monitor stops (what it deleted is counted),
        and tell what retention deleted since its last line."""
        if self.pruning is not None:
            try:
                self.pruning.close()
            except Exception as exc:  # the database is away: only the chore's counter misses these rows
                self.failures.failed("counting what pruning deleted", exc)
            self.pruning = None
        self.log.flush()  # a round's deletions after the last line are not left untold
