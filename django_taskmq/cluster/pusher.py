"""The pusher process: reserve from the broker, verify and unpickle, hand tasks to the sentinel.

It answers each :class:`~.messages.Want` from the sentinel with one :class:`~.messages.Batch`.
A package that fails to verify or unpickle never reaches a worker: it is dead-lettered here.
:func:`run` is the process's entry point; :class:`Pusher` does the work and can be driven
without a process.
"""

from __future__ import annotations

import logging
import signal
import time
from multiprocessing.connection import Connection

from ..observability import joblog
from ..brokers.base import Broker, Waker
from ..conf import Settings
from ..exceptions import BadPackage
from ..policy.connections import RECONNECT
from . import outage
from .messages import Batch, Stop, Ticket, Want

logger = logging.getLogger(__name__)

SWEEP_EVERY = 1.0  # seconds between lease sweeps
PAUSES_EVERY = 1.0  # seconds between two reads of the paused queues


def run(pipe: Connection, settings: Settings, queues: list[str], owner: str, burst: bool = False,
        workers: int | None = None, cluster: str | None = None) -> None:
    """Serve the sentinel's wants until it sends :class:`Stop` or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ..brokers import get_broker
    from ..signals import post_spawn

    outage.bound_statements(settings)
    broker = get_broker()  # this process's own (a forked child must not share the sentinel's connection)
    broker.dedicate()  # it runs no task code: its session can be the claims' own
    # Lease sweeps run after a batch is handed over (Pusher.serve), not inside the claims: a claim
    # woken by new work should not do the upkeep first.
    broker.reclaim_every = float("inf")
    pusher = Pusher(broker, settings, queues, owner, burst, workers, cluster)
    waker = broker.waker(burst)
    pusher.warm_up()
    post_spawn.send(sender=run, proc_name="pusher")
    pusher.serve(pipe, waker)


def hears_every_insert(waker: Waker) -> bool:
    """The waker's :meth:`~.brokers.base.Waker.hears_every_insert`; False for a broker's own waker
    written before that method (it then looks before it waits, as every waker once did)."""
    hears = getattr(waker, "hears_every_insert", None)
    return bool(hears()) if hears is not None else False


class Pusher:
    """Claims what the sentinel wants from ``broker`` for the sentinel ``owner`` (its id) of the
    cluster named ``cluster``, as verified tickets."""

    def __init__(self, broker: Broker, settings: Settings, queues: list[str], owner: str, burst: bool = False,
                 workers: int | None = None, cluster: str | None = None) -> None:
        self.broker = broker
        self.settings = settings
        self.queues = queues
        self.owner = owner
        self.cluster = cluster
        self.burst = burst
        self.workers = workers
        # While the database is away: one line every few seconds with a count, not a traceback a claim.
        self.failures = outage.FailureLog("pusher", logger, meanwhile="no new work is claimed meanwhile")
        self._last_sweep = 0.0  # monotonic time of the last lease sweep
        self.paused: frozenset[str] = frozenset()  # of self.queues, as last read
        self._pauses_read = float("-inf")  # monotonic time of that read

    def warm_up(self) -> None:
        """Connect and read the paused queues before the first want: at start-up the sentinel is
        still forking the workers, and the first claim then finds the connection open. A failure
        is only logged: the first claim retries as any claim does."""
        try:
            self.serving()
        except Exception as exc:
            self.failures.failed("connect", exc)
            self.broker.close()

    def serve(self, pipe: Connection, waker: Waker) -> None:
        """Answer each :class:`Want` from ``pipe`` with one :class:`Batch` until :class:`Stop` or EOF;
        ``waker`` sleeps an idle pusher until work may have arrived."""
        settings = self.settings
        more_likely = True  # the last claim filled the room it had: more is likely ready
        drained = False  # the last batch said nothing was ready
        while True:
            try:
                message = pipe.recv()
            except (EOFError, OSError):
                return
            if isinstance(message, Stop):
                return
            assert isinstance(message, Want)
            claimed: list[Ticket] | None
            if not more_likely and message.room > 0 and not self.burst and hears_every_insert(waker):
                # The last claim emptied what was ready, and every job committed since wakes the
                # waker: wait at once. A look first (a statement, and a server back end woken)
                # would only compete for the CPU with the task just handed out and its recording.
                claimed = []
            else:
                claimed = self.claim_safely(message, not more_likely)
            failed = claimed is None
            tasks = claimed or []
            if failed:
                # The database is away or failing over: wait a little longer after each failure.
                pipe.poll(RECONNECT.delay(max(self.failures.failures, 1)))
            elif not tasks and message.room > 0 and (drained or not self.burst):
                # Nothing ready: nap until work may have arrived. (A look for urgent work only, made
                # while the sentinel's buffer is full, is answered at once: the sentinel paces those
                # looks, and must be able to ask for room the moment it has some.)
                # In burst mode the first "nothing ready" is answered at once: with nothing running,
                # the sentinel ends the burst on it (a nap added 50 ms to every burst on PostgreSQL,
                # where no commit wakes it). If the burst goes on, the next answer naps, briefly.
                # A rate limit that held a job opens at a known moment: wake then, not a poll later.
                nap = min(settings.poll, 0.05) if self.burst else settings.poll
                opens = self.broker.flow_wait()
                waker.wait(nap if opens is None else min(nap, opens), pipe)
                if not pipe.poll(0):
                    # Woken early: work very likely arrived, claim without asking first.
                    claimed = self.claim_safely(message, not waker.woken)
                    failed = claimed is None
                    tasks = claimed or []
            # A claim that found less than it had room for emptied what was ready: the next one
            # looks first (a read), instead of taking the write lock for nothing; on SQLite that
            # lock would also make an idle worker's ack of the task just claimed wait.
            more_likely = bool(tasks) and len(tasks) >= message.room
            # A failed claim found out nothing: it does not say the queues are drained.
            drained = not tasks and message.room > 0 and not failed
            try:
                pipe.send(Batch(tuple(tasks), drained=drained, paused=self.paused))
            except (BrokenPipeError, OSError):
                return
            if not failed:
                # While the sentinel hands the batch out: bring back what a killed cluster held.
                self._sweep_expired()

    def claim_safely(self, want: Want, check_first: bool) -> list[Ticket] | None:
        """Return :meth:`claim`'s tasks, or None when the database failed (a restart, a lost connection).

        Whatever a failed claim reserved was never handed over, so its lease runs out and it returns.
        The failures are logged (rate-limited), and the recovery.
        """
        try:
            tasks = self.claim(want, check_first)
        except Exception as exc:
            self.failures.failed("claim", exc)
            self.broker.close()
            return None
        self.failures.succeeded()
        return tasks

    def claim(self, want: Want, check_first: bool) -> list[Ticket]:
        """Reserve what ``want`` asks for and return the verified tasks, in pick order.

        ``check_first``: look whether anything is ready before reserving (the last claim found nothing).
        """
        broker, settings, owner = self.broker, self.settings, self.owner
        queues = self.serving()
        if not queues:
            return []
        if want.room > 0:
            if check_first and not broker.has_ready(queues):
                return []
            reservations = broker.reserve(queues, want.room, settings.lease, owner, cluster=self.cluster)
        elif want.floor is not None and broker.has_ready(queues, above=want.floor):
            # The buffer is full of lower-priority work: take the urgent ones; the sentinel yields.
            reservations = broker.reserve(queues, self.workers or settings.workers, settings.lease, owner,
                                          above=want.floor, cluster=self.cluster)
        else:
            return []
        tasks = []
        for reservation in reservations:
            try:
                tasks.append(Ticket.verified(reservation, settings.name))
            except BadPackage as exc:
                logger.error("job %s: %s (dead-lettered, not executed)", reservation.job_id, exc,
                             extra=joblog.fields(reservation, None))
                try:
                    with broker.bookkeeping():
                        broker.dead_letter_package(reservation, str(exc))
                except Exception:
                    logger.exception("could not dead-letter job %s", reservation.job_id)
        return tasks

    def serving(self) -> list[str]:
        """The queues to claim from: this cluster's, without the paused ones (read once a second)."""
        now = time.monotonic()
        if now - self._pauses_read >= PAUSES_EVERY:
            paused = self.broker.paused_queues() & set(self.queues)
            if paused != self.paused:
                logger.info("paused queue(s): %s", ", ".join(sorted(paused)) or "none")
            self.paused, self._pauses_read = frozenset(paused), now
        return [q for q in self.queues if q not in self.paused] if self.paused else self.queues

    def _sweep_expired(self) -> None:
        """Reclaim the messages whose lease ran out, at most every ``SWEEP_EVERY`` seconds (a
        failure is logged as a claim's: the database is away)."""
        now = time.monotonic()
        if now - self._last_sweep >= SWEEP_EVERY:
            self._last_sweep = now
            try:
                with self.broker.bookkeeping():
                    self.broker.reclaim_expired()
            except Exception as exc:
                self.failures.failed("lease sweep", exc)
                self.broker.close()
