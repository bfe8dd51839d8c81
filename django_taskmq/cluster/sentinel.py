"""The sentinel: spawns the pusher, the workers and the monitor, and guards them.

It owns the cluster's reserved-but-unstarted tasks (so it can reorder them and yield them back),
feeds each idle worker through that worker's own pipe, enforces timeouts from the workers'
shared timers, reincarnates dead processes, renews the leases of the tasks it holds (waiting or
running) with one statement, runs the scheduler and publishes the heartbeat. Signal handlers only set a flag.
"""

from __future__ import annotations

import bisect
import datetime
import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from django.db import connections
from django.utils import timezone

from .. import execution as ex
from ..conf import Settings
from ..policy.lease import renew_interval
from . import monitor, outage, pusher, worker
from .messages import Batch, Stop, Ticket, Want

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 2.0
ANALYZE_EVERY = 600.0  # seconds between planner statistics refreshes (PostgreSQL)
IDLE_WAIT = 0.5  # seconds the guard loop may sleep while no task waits or runs
BURST_CHECK_EVERY = 0.2
# A burst gives up after this many seconds without a successful database operation of the sentinel,
# so it exits within 30 s of losing the database even when each attempt waits for a connect timeout.
BURST_GIVE_UP = 15.0


class DatabaseAway(Exception):
    """A burst gives up: the database has been unreachable for :data:`BURST_GIVE_UP` seconds."""


@dataclass
class Slot:
    """One worker process and the task it runs."""

    index: int
    process: multiprocessing.process.BaseProcess
    pipe: Connection
    task: Ticket | None = None
    done: int = 0
    retiring: bool = False


@dataclass(order=True)
class Waiting:
    """A reserved task waiting in the sentinel, ordered by priority then arrival."""

    sort_key: tuple[int, int]
    task: Ticket = field(compare=False)


class Sentinel:
    """One cluster: ``Sentinel(settings).start()`` runs until stopped (or drained, with ``burst``)."""

    def __init__(self, settings: Settings, queues: list[str] | None = None, burst: bool = False,
                 workers: int | None = None, name: str | None = None) -> None:
        from ..brokers import get_broker

        self.settings = settings
        self.queues = sorted(queues or settings.queues)
        self.burst = burst
        self.workers = workers or settings.workers
        self.limit = max(settings.effective_queue_limit, self.workers)
        self.host = socket.gethostname()
        # The name labels this cluster (heartbeat, lease owner, Job.cluster); packages are still
        # signed and verified with TASKMQ['name'], the salt every producer uses.
        self.name = name or settings.name
        self.owner = f"{self.name}:{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:64]
        self.broker = get_broker()
        self.ctx = multiprocessing.get_context("fork")
        self.timers = self.ctx.RawArray("d", self.workers)
        self.slots: list[Slot] = []
        self.waiting: list[Waiting] = []
        self.outbox: list[bytes] = []  # pickled outcomes for the monitor, sent once per turn
        self.sequence = itertools.count()
        self.want_pending = False
        self.drained = False
        self.signals = 0
        self.state = "starting"
        self.counts = {"succeeded": 0, "failed": 0, "timeouts": 0, "crashes": 0, "yields": 0, "reincarnations": 0}
        self.started = time.time()
        self._next = {"analyze": 0.0, "guard": 0.0, "renew": 0.0, "heartbeat": 0.0, "scheduler": 0.0, "burst": 0.0}
        # While the database is away: one line per component every few seconds, not a traceback a try.
        self.failures = outage.FailureLog("sentinel", logger)
        self.scheduler_failures = outage.FailureLog("scheduler", logger)

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> int:
        """Run the cluster; return the exit status (0 after a graceful stop)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        outage.prepare(self.settings.database)  # qcluster did it already; for a Sentinel started otherwise
        self._spawn_all()
        self.state = "running"
        logger.info("cluster %s started: %d workers, queues %s", self.owner, self.workers, ", ".join(self.queues))
        gave_up = False
        try:
            try:
                while not self.signals:
                    self.step()
                    if self.burst and self._burst_done_safely():
                        break
                    self._give_up_if_away()
                if self.signals < 2:
                    self.stop()
            except DatabaseAway as exc:
                gave_up = True
                logger.error("%s", exc)
        finally:
            if self.signals >= 2 or gave_up:
                self._kill_all()
            published = not gave_up and self._publish(final=True)
        if self.signals >= 2 or gave_up:
            return 1
        # A burst that could not record its end (the database went away) did not surely finish.
        return 1 if self.burst and not published else 0

    def _give_up_if_away(self) -> None:
        """In a burst, end the run once the sentinel has reached no database for BURST_GIVE_UP s."""
        if self.burst and self.failures.down_for() >= BURST_GIVE_UP:
            raise DatabaseAway(
                f"qcluster --burst: giving up, database {self.broker.describe()} "
                f"unreachable for {self.failures.down_for():.0f} s ({self.failures.failures} failures; "
                f"last {self.failures.last}); stopping the cluster")

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1

    def _spawn_all(self) -> None:
        connections.close_all()  # a forked child must not share the parent's database socket
        self.results = self.ctx.Queue()
        self.monitor = self._spawn(monitor.run, (self.results, self.settings), "taskmq-monitor")
        self._spawn_pusher()
        self.slots = [self._spawn_worker(i) for i in range(self.workers)]

    def _spawn(self, target, args, name, own_parent_end: Connection | None = None):
        # A forked child inherits every pipe end the sentinel holds; it closes the ones that are
        # not its own, so a pipe reports EOF as soon as its real peer dies.
        foreign = [self.pusher_pipe] if getattr(self, "pusher_pipe", None) else []
        foreign += [slot.pipe for slot in self.slots]
        if own_parent_end is not None:
            foreign.append(own_parent_end)
        process = self.ctx.Process(target=_child, args=(target, args, foreign), name=name, daemon=False)
        process.start()
        return process

    def _spawn_pusher(self) -> None:
        connections.close_all()
        self.pusher_pipe, child = self.ctx.Pipe()
        self.pusher = self._spawn(pusher.run, (child, self.settings, self.queues, self.owner, self.burst, self.workers),
                                  "taskmq-pusher")
        child.close()
        self.want_pending = False

    def _spawn_worker(self, index: int) -> Slot:
        connections.close_all()
        self.timers[index] = 0.0
        parent, child = self.ctx.Pipe()
        process = self._spawn(worker.run, (index, child, self.timers, self.settings),
                              f"taskmq-worker-{index}", own_parent_end=parent)
        child.close()
        return Slot(index, process, parent)

    # -- the guard loop -----------------------------------------------------------------------
    def step(self) -> None:
        """One turn of the guard loop: ask for work, read pipes, guard, dispatch, upkeep."""
        self._ask_pusher()  # before sleeping, so a fresh cluster does not idle through its first wait
        handles = [self.pusher_pipe, *(s.pipe for s in self.slots if s.task is not None or s.retiring)]
        handles += [s.process.sentinel for s in self.slots] + [self.pusher.sentinel, self.monitor.sentinel]
        # Idle, nothing can time out: sleep longer (pipes and process deaths still wake the wait).
        busy = self.waiting or any(s.task is not None for s in self.slots)
        for handle in wait(handles, timeout=self.settings.guard_interval if busy else IDLE_WAIT):
            if handle is self.pusher_pipe:
                self._from_pusher()
            else:
                slot = next((s for s in self.slots if s.pipe is handle), None)
                if slot is not None:
                    self._from_worker(slot)
        if self._due("guard", self.settings.guard_interval):
            self._guard()
        self._dispatch()
        self._flush()
        self._ask_pusher()
        self._upkeep()

    def _flush(self) -> None:
        """Hand the outcomes gathered in this turn to the monitor as one message."""
        if self.outbox:
            self.results.put(self.outbox)
            self.outbox = []

    def _from_pusher(self) -> None:
        try:
            batch = self.pusher_pipe.recv()
        except (EOFError, OSError):
            return  # the guard sees the dead pusher and replaces it
        if not isinstance(batch, Batch):
            return
        self.want_pending = False
        self.drained = batch.drained
        for task in batch.tasks:
            bisect.insort(self.waiting, Waiting((-task.reservation.priority, next(self.sequence)), task))
        if len(self.waiting) > self.limit:
            self._yield_overflow()

    def _yield_overflow(self) -> None:
        """Hand the lowest-priority unstarted tasks back so the urgent ones fit the limit."""
        kept = []
        while len(self.waiting) > self.limit:
            item = self.waiting.pop()
            try:
                given_back = self.broker.yield_reservation(item.task.reservation)
            except Exception as exc:
                self._failed(f"yield of job {item.task.reservation.job_id}", exc)
                given_back = False
            if given_back:
                self.counts["yields"] += 1
            else:  # yielded max_yields times already: it keeps its place so nothing starves
                kept.append(item)
        for item in kept:
            bisect.insort(self.waiting, item)

    def _from_worker(self, slot: Slot) -> None:
        try:
            data = slot.pipe.recv_bytes()
        except (EOFError, OSError):
            self._replace_worker(slot, crashed=True)
            return
        slot.task = None
        slot.done += 1
        self.counts["succeeded" if data[:1] == b"S" else "failed"] += 1
        self.outbox.append(data[1:])
        if slot.done >= self.settings.recycle and not slot.retiring:
            slot.retiring = True
            self._send(slot, worker.STOP)

    def _guard(self) -> None:
        now = time.monotonic()
        for slot in list(self.slots):
            if not slot.process.is_alive():
                if slot.task is not None and _readable(slot.pipe):
                    self._from_worker(slot)  # it sent its outcome, then exited (max_rss): not a crash
                if slot in self.slots:
                    self._replace_worker(slot, crashed=slot.task is not None)
                continue
            started = self.timers[slot.index]
            timeout = slot.task.timeout if slot.task else None
            if started and timeout and now - started > timeout:
                logger.warning("job %s ran past its timeout of %ss: killing worker %s",
                               slot.task.reservation.job_id, timeout, slot.process.pid)
                self.counts["timeouts"] += 1
                self._record_lost(slot.task, ex.TIMEOUT, f"TaskTimeout: ran past its timeout of {timeout}s")
                slot.task = None
                _kill(slot.process)
                self._replace_worker(slot, crashed=False)
        if not self.pusher.is_alive() and self.state == "running":
            logger.error("pusher died (exit code %s): reincarnating", self.pusher.exitcode)
            self.counts["reincarnations"] += 1
            self._spawn_pusher()
        if not self.monitor.is_alive() and self.state == "running":
            # Outcomes still in the old queue are lost with it; their leases bring the jobs back.
            logger.error("monitor died (exit code %s): reincarnating", self.monitor.exitcode)
            self.counts["reincarnations"] += 1
            connections.close_all()
            self.results = self.ctx.Queue()
            self.monitor = self._spawn(monitor.run, (self.results, self.settings), "taskmq-monitor")

    def _replace_worker(self, slot: Slot, crashed: bool) -> None:
        slot.process.join(timeout=1)
        if crashed and slot.task is not None:
            code = slot.process.exitcode
            logger.error("worker %s died (exit code %s) running job %s", slot.process.pid, code,
                         slot.task.reservation.job_id)
            self.counts["crashes"] += 1
            self._record_lost(slot.task, ex.CRASH, f"WorkerDied: the worker exited with code {code} while running it")
        slot.pipe.close()
        index = self.slots.index(slot)
        if self.state == "running":
            if not slot.retiring:
                self.counts["reincarnations"] += 1
            self.slots[index] = self._spawn_worker(slot.index)
        else:
            del self.slots[index]

    def _record_lost(self, task: Ticket, status: str, error: str) -> None:
        now = time.time()
        outcome = ex.Outcome(task.reservation, task.message().envelope, status, error=error, started_at=now,
                             finished_at=now)
        self.outbox.append(pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL))

    def _dispatch(self) -> None:
        for slot in self.slots:
            if not self.waiting:
                return
            if slot.task is None and not slot.retiring and slot.process.is_alive():
                task = self.waiting.pop(0).task
                if self._send(slot, task):
                    slot.task = task
                else:
                    bisect.insort(self.waiting, Waiting((-task.reservation.priority, next(self.sequence)), task))

    def _send(self, slot: Slot, message: Ticket | bytes) -> bool:
        """Send a task (its pickled bytes, unopened) or the poison pill to a worker."""
        try:
            slot.pipe.send_bytes(message.blob if isinstance(message, Ticket) else message)
            return True
        except (BrokenPipeError, OSError):
            return False

    def _ask_pusher(self) -> None:
        if self.want_pending or self.state != "running" or not self.pusher.is_alive():
            return
        room = self.limit - len(self.waiting)
        busy = sum(1 for s in self.slots if s.task is not None)
        starving = len(self.waiting) < self.workers - busy + 1
        if room > 0 and (starving or room >= max(1, self.limit // 2)):
            want = Want(room, None)
        elif self.waiting:
            want = Want(0, -self.waiting[-1].sort_key[0])
        else:
            return
        try:
            self.pusher_pipe.send(want)
            self.want_pending = True
        except (BrokenPipeError, OSError):
            pass

    # -- upkeep -------------------------------------------------------------------------------
    def _due(self, what: str, every: float) -> bool:
        now = time.monotonic()
        if now < self._next[what]:
            return False
        self._next[what] = now + every
        return True

    def _upkeep(self) -> None:
        """Renew, tick, beat, analyze when due. A failure ends this turn's upkeep; what was not
        tried stays due, and what failed is tried again at its next due time with a new connection.
        """
        from .. import scheduler

        # Nothing held, nothing to renew: no statement, so no sign either way of the database.
        if self._due("renew", renew_interval(self.settings.lease)) and self._held() \
                and not self._attempt("lease renewal", self._renew):
            return
        if self._due("scheduler", self.settings.scheduler_interval) and not self.burst:
            if not self._attempt("tick", lambda: scheduler.tick(self.settings), self.scheduler_failures):
                return
        if self._due("heartbeat", HEARTBEAT_EVERY) and not self._publish():
            return
        if self._due("analyze", ANALYZE_EVERY):
            # A no-op on some engines: its success says nothing about the database.
            self._attempt("ANALYZE", self.broker.analyze, proof=False)

    def _attempt(self, what: str, operation, failures: outage.FailureLog | None = None, proof: bool = True) -> bool:
        """Run one database operation; on failure count it (rate-limited log) and reconnect next time.

        ``proof``: whether its success shows the database is there (it ran a statement).
        """
        try:
            operation()
        except Exception as exc:
            # The database may be restarting: keep the processes alive, reconnect next time.
            self._failed(what, exc, failures)
            return False
        if proof:
            (failures or self.failures).succeeded()
        return True

    def _failed(self, what: str, exc: BaseException, failures: outage.FailureLog | None = None) -> None:
        (failures or self.failures).failed(what, exc)
        self.broker.close()

    def _publish(self, final: bool = False) -> bool:
        """Write the heartbeat row; return whether it was written."""
        return self._attempt("heartbeat", lambda: self._write_heartbeat(final))

    def _write_heartbeat(self, final: bool) -> None:
        self.broker.publish_heartbeat(
            self.owner,
            name=self.name, host=self.host, pid=os.getpid(),
            state="stopped" if final else self.state, workers=len(self.slots), queues=self.queues,
            counts={**self.counts, "waiting": len(self.waiting),
                    "running": sum(1 for s in self.slots if s.task is not None),
                    "uptime": round(time.time() - self.started, 1)},
            started_at=datetime.datetime.fromtimestamp(self.started, tz=datetime.UTC),
            beat_at=timezone.now(),
        )

    def _burst_done_safely(self) -> bool:
        try:
            done = self._burst_done()
        except Exception as exc:
            self._failed("burst check", exc)
            return False
        if done is not None:
            self.failures.succeeded()
        return bool(done)

    def _burst_done(self) -> bool | None:
        """Return whether the burst is over; None when it did not look at the database."""
        if not self.drained or self.waiting or any(s.task for s in self.slots):
            return None
        # While the database is away, look no more often than the heartbeat does.
        if not self._due("burst", HEARTBEAT_EVERY if self.failures.failing else BURST_CHECK_EVERY):
            return None
        # The broker looks in one query, one snapshot: separate queries could each miss a job that
        # moves from RUNNING to RETRYING between them, and the burst would end with work left.
        # Jobs queued for later (eta/delay) do not keep a burst alive; retries do.
        return not self.broker.unfinished(self.queues, time.time())

    # -- the stop procedure -------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the pusher, give back unstarted work, let workers finish, let the monitor drain."""
        self.state = "stopping"
        logger.info("cluster %s stopping", self.owner)
        self._publish()
        # 1. The pusher reserves nothing more; a batch it sends meanwhile joins the waiting list.
        try:
            self.pusher_pipe.send(Stop())
        except (BrokenPipeError, OSError):
            pass
        while self.pusher.is_alive() and self.signals < 2:
            if self.pusher_pipe.poll(0.05):
                self._from_pusher()
            self._give_up_if_away()
        self.pusher.join(timeout=1)
        # 2. Reservations that never started go back without counting a delivery.
        if self.waiting:
            try:
                returned = self.broker.defer_many([w.task.reservation for w in self.waiting])
                logger.info("returned %d unstarted reservation(s) to the broker", returned)
                self.failures.succeeded()
            except Exception as exc:
                self._failed(f"returning {len(self.waiting)} unstarted reservation(s) (their leases bring them back)",
                             exc)
            self.waiting.clear()
        # 3. Poison pills: idle workers get one now, busy ones after their task.
        for slot in self.slots:
            if slot.task is None and not slot.retiring:
                slot.retiring = True
                self._send(slot, worker.STOP)
        while self.slots and self.signals < 2:
            handles = [s.pipe for s in self.slots] + [s.process.sentinel for s in self.slots]
            for handle in wait(handles, timeout=self.settings.guard_interval):
                slot = next((s for s in self.slots if s.pipe is handle), None)
                if slot is not None:
                    self._from_worker(slot)
                    if not slot.retiring:
                        slot.retiring = True
                        self._send(slot, worker.STOP)
            self._guard()
            self._flush()
            self._stopping_upkeep()
        # 4. The monitor records what is left, then exits.
        self._flush()
        self.results.put(None)
        while self.monitor.is_alive() and self.signals < 2:
            self.monitor.join(timeout=0.1)
            self._stopping_upkeep()
        self.state = "stopped"
        logger.info("cluster %s stopped", self.owner)

    def _held(self) -> list[str]:
        """The job ids of what the cluster holds: waiting and running tasks."""
        held = [w.task.reservation.job_id for w in self.waiting]
        return held + [s.task.reservation.job_id for s in self.slots if s.task is not None]

    def _renew(self) -> None:
        """Renew the leases of what the cluster holds, one statement."""
        held = self._held()
        if held:
            self.broker.extend_leases(self.owner, held, self.settings.lease)

    def _stopping_upkeep(self) -> None:
        """While stopping: renew what still runs, beat (state ``stopping``), give up a burst on an outage."""
        renew = self._due("renew", renew_interval(self.settings.lease)) and self._held()
        failed = renew and not self._attempt("lease renewal", self._renew)
        if not failed and self._due("heartbeat", HEARTBEAT_EVERY):
            self._publish()
        self._give_up_if_away()

    def _kill_all(self) -> None:
        for process in [self.pusher, self.monitor, *(s.process for s in self.slots)]:
            _kill(process)


def _readable(pipe: Connection) -> bool:
    try:
        return pipe.poll(0)
    except (EOFError, OSError):
        return False


def _kill(process) -> None:
    if process.is_alive():
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.join(timeout=1)


def _child(target, args, foreign: list[Connection]) -> None:
    """Entry point of every child process: die with the sentinel, drop foreign pipes, run ``target``."""
    _die_with_parent()
    for pipe in foreign:
        try:
            pipe.close()
        except OSError:
            pass
    target(*args)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the sentinel dies (no orphans after a kill -9).

    The leases of whatever the cluster held bring that work back. Elsewhere this is a no-op and
    the pipes' EOF ends the children instead.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
