"""The sentinel: spawns the pusher, the workers and the monitor, and supervises them.

Supervision only: it spawns its children, waits on their pipes and deaths in the guard loop, feeds
each worker with room through that worker's own pipe, has :mod:`.stopping` stop the tasks that
must stop (timeouts, cancels, the halts), reincarnates dead processes, orchestrates the stop
procedure, and turns SIGTERM/SIGINT into a flag.
Its parts, each in its own module: the dispatch buffer (:mod:`.buffer`) holds the reserved tasks
that have not started; the worker slots (:mod:`.slots`) hold what each worker runs and the memory
shared with it; the dispatch rules (:mod:`.dispatch`) decide who gets which task; the upkeep
(:mod:`.upkeep`) renews leases, publishes the heartbeat and takes back the work of dead clusters on
timers; the scheduler process (:mod:`.ticker`) ticks the scheduler and runs ``ANALYZE``. What the
processes say to each other is in :mod:`.messages`.

The guard loop runs no database statement: whatever must reach the database (renewals, the
heartbeat, give-backs, yields, the look for cancellation requests) is posted to the upkeep's
bookkeeping thread (:mod:`.chores`) and what comes back is acted on in a later turn, so a locked
table or a silent server never keeps a task past its timeout or a known cancel from being carried out.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable
from enum import StrEnum
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from django.db import connections

from ..runtime import execution as ex
from ..observability import joblog
from ..brokers.base import Broker
from ..conf import Settings
from ..exceptions import TaskMQError, WorkerDied
from ..policy.ids import cluster_id
from ..policy import lease
from . import dispatch, monitor, outage, processes, pusher, ticker
from .buffer import Buffer, Waiting
from .feeder import Feeder
from .messages import (END_OF_RESULTS, IDLE, READY, RECORDED, RETIRING, STOP, SUCCEEDED, TIMED_OUT, UNSTARTED, Batch, Stop,
                       Ticket, dump_outcome, read_outcome_frame,
                       read_unstarted_frame, SUSPENDED)
from .poller import Poller, pause, readable
from .result_pipe import ResultPipe
from .slots import INTERRUPT_GRACE, NOT_STARTED, Process, SharedMemory, Slot
from .stopping import Stopping, job_fields
from .upkeep import DatabaseAway, Report, Upkeep

logger = logging.getLogger(__name__)

IDLE_WAIT = 0.5  # seconds the guard loop may sleep while no task waits or runs
URGENT_CHECK = 0.02  # seconds between asks for work above the buffer's lowest priority (to yield)
#: The outcomes counted per queue in the heartbeat (``counts["queues"]``): the worker's S, F or Z (a
#: durable task suspended) frame, a timeout, a worker that died running the task.
OUTCOMES = ("succeeded", "failed", "timeouts", "crashes", "suspended")
#: Seconds the stop procedure gives the monitor (and the pusher) beyond ``stop_timeout`` before it
#: kills them: whatever the tasks and the database do, the cluster exits within ``stop_timeout``
#: plus this plus :data:`INTERRUPT_GRACE`.
STOP_MARGIN = 3.0
#: The error of a job a hard stop (a second stop request) killed and put back.
INTERRUPTED_BY_HARD_STOP = "interrupted by a hard stop ({}); back in the queue, not counted"
#: Seconds within which signals of one kind are one request: coreutils ``timeout``, and supervisors
#: that signal the process and then its group, send the same signal twice a few milliseconds apart.
SIGNAL_BURST = 1.0


class ClusterState(StrEnum):
    """Where the cluster is in its life (the heartbeat shows the value)."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


#: The state the guard loop compares with every turn (a module global: an enum member's lookup
#: through its class costs about 0.1 us).
RUNNING = ClusterState.RUNNING


class ResultQueue(Protocol):
    """The sentinel's end of the result channel (a :class:`~.result_pipe.ResultPipe`, or a stand-in)."""

    writer: int

    def put(self, obj: Any) -> None: ...

    def flush(self) -> bool: ...

    @property
    def pending(self) -> int: ...

    def drain(self, timeout: float) -> bool: ...

    def close(self) -> None: ...


class Sentinel:
    """One cluster: ``Sentinel(settings, broker).start()`` runs until stopped (or drained, with ``burst``).

    ``broker`` serves the sentinel itself (yields, renewals, heartbeats, ...); the pusher and the
    monitor, forked children, each build their own at their entry point.
    """

    def __init__(self, settings: Settings, broker: Broker, queues: list[str] | None = None, burst: bool = False,
                 workers: int | None = None, name: str | None = None, threads: int | None = None) -> None:
        self.settings = settings
        self.broker = broker
        self.queues = sorted(queues or settings.queues)
        self.burst = burst
        self.workers = workers or settings.workers
        self.threads = threads or settings.threads
        # Tasks a worker may hold: one per thread, and with one thread, ``prefetch`` more waiting there.
        self.depth = self.threads + (settings.prefetch if self.threads == 1 else 0)
        self.capacity = self.workers * self.depth
        self.limit = max(settings.effective_queue_limit, self.capacity)
        self.host = socket.gethostname()
        # The name labels this cluster (heartbeat, lease owner, Job.cluster); packages are still
        # signed and verified with TASKMQ['name'], the salt every producer uses.
        self.name = name or settings.name
        # This sentinel's own id (heartbeat row, lease owner): unique to the process whatever the
        # lengths of name and host; the name goes along beside it, never parsed back out of it.
        self.owner = cluster_id(self.name, self.host, os.getpid())
        self.ctx = multiprocessing.get_context("fork")
        self.rules = dispatch.Rules(self.threads, self.depth)
        self.memory = SharedMemory(self.ctx, self.workers, self.threads, self.rules.prefetch)
        # The children, spawned by start() (tests put stand-ins here).
        self.slots: list[Slot] = []
        self.pusher: Process = NOT_STARTED
        self.pusher_pipe: Connection | None = None  # the sentinel's end of the pusher's pipe
        self.monitor: Process = NOT_STARTED
        self.ticker: Process = NOT_STARTED  # the scheduler process (not in a burst)
        self.results: ResultQueue | None = None  # to the monitor
        # The monitor's [turns, outcomes done] (shared memory, see monitor.run), and what was sent to
        # it and is not done yet (sent again to its successor if it dies or wedges).
        self.monitor_progress: Any = None
        self.unrecorded: collections.deque[bytes] = collections.deque()
        self._monitor_turns = 0  # its turns at the last look ...
        self._monitor_seen = 0.0  # ... and when they last changed (monotonic)
        self._monitor_done = 0  # the outcomes it had done at the last look
        self.monitor_stalled = False  # it took no turn for half the wedged bound: start nothing meanwhile
        self.wedged_after = lease.wedged_after(settings.lease)
        self.outbox: list[bytes] = []  # pickled outcomes for the monitor, sent once per turn
        self.want_pending = False
        self.drained = False
        self.poller = Poller()  # the guard loop's wait
        self.signals = 0  # stop requests: the first stops gracefully, a second stops now
        self._last_signal: dict[int, float] = {}  # signal number -> monotonic time of its last request
        self.stop_reason = ""  # why the cluster stops, for its log lines
        self.given_back = {"unstarted": 0, "interrupted": 0}  # what the stop returned to the queue, uncounted
        self.state = ClusterState.STARTING
        self.counts = {"succeeded": 0, "failed": 0, "timeouts": 0, "crashes": 0, "suspended": 0, "yields": 0,
                       "reincarnations": 0,
                       "steals": 0, "interrupted": 0}
        self.by_queue: dict[str, dict[str, int]] = {}  # queue -> outcome -> count (see OUTCOMES)
        self._next_guard = 0.0  # monotonic time of the next timeout and liveness check
        self._next_urgent = 0.0  # monotonic time from which the pusher may be asked for urgent work again
        self.paused = False  # leases in doubt: start and claim nothing (see _mind_leases)
        self.leases_lost = False  # ... for a whole lease: give back what waits once the database answers
        self.upkeep = Upkeep(settings, broker, owner=self.owner, name=self.name, host=self.host, queues=self.queues,
                             burst=burst, held=self._held, report=self.report)
        self.buffer = Buffer(broker, self.limit, self.capacity, failed=self.upkeep.failed)
        self.feeder = Feeder(self.buffer, self.memory, self.rules)
        self.stopper = Stopping(self)  # timeouts, cancels, the stop's and the cut-off's halts

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> int:
        """Run the cluster; return the exit status (0 after a graceful stop)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        # qcluster did it already; for a Sentinel started otherwise
        outage.prepare(self.settings.database, self.settings.dead_connection_timeout)
        if self.settings.listen_database is not None:
            outage.prepare(self.settings.listen_database, self.settings.dead_connection_timeout)
        outage.bound_statements(self.settings)  # the bookkeeping thread's (the workers' are the tasks')
        gave_up: DatabaseAway | None = None
        try:
            self.upkeep.announce()  # the cluster's row before anything is claimed
            outage.forget(self.settings.database)  # the only statement of this thread: no child inherits it
            self.spawn_all()  # inside: a fork that fails half-way must not leave the others behind
            self.upkeep.start()
            self.state = ClusterState.RUNNING
            logger.info("cluster %s started (%s): %d workers%s, queues %s, database %s%s", self.name, self.owner,
                        self.workers, f" x {self.threads} threads" if self.threads > 1 else "",
                        ", ".join(self.queues), self.broker.describe(), ", burst" if self.burst else "")
            try:
                while not self.signals:
                    self.step()
                    if self.burst and self.upkeep.burst_done(self._idle()):
                        self.stop_reason = "burst drained"
                        logger.info("cluster %s drained queue(s) %s: %s", self.name, ", ".join(self.queues),
                                    self._tally())
                        break
                    self.upkeep.give_up_if_away()
                if self.signals < 2:
                    self.stop()
            except DatabaseAway as exc:
                gave_up = exc  # said by the hard stop's line

        except BaseException:
            # A bug here must not leave the children waiting for a sentinel that is gone: Python's
            # exit would wait for them for ever. Their leases bring back what the cluster held.
            logger.exception("cluster %s: the sentinel failed; killing its processes", self.name)
            self.kill_all()
            raise
        finally:
            if gave_up is not None:  # nothing can be given back: the database is away
                self._hard_stop(str(gave_up), give_back=False)
            elif self.signals >= 2:
                self._hard_stop(f"cluster {self.name}: hard stop ({self.stop_reason})")
            published = gave_up is None and self.upkeep.publish_final(STOP_MARGIN)
            self.upkeep.close(timeout=1.0)
            outage.unbound_statements(self.settings)
        if self.signals >= 2 or gave_up is not None:
            return 1
        # A burst that could not record its end (the database went away) did not surely finish.
        return 1 if self.burst and not published else 0

    def _on_signal(self, signum, frame) -> None:
        """SIGTERM or SIGINT: the first request stops the cluster gracefully, a second one now.

        Signals of one kind within :data:`SIGNAL_BURST` seconds of the last request are that request
        (signalled twice, to the process and to its group); a later one, or the other kind, is a new one.
        """
        now = time.monotonic()
        last = self._last_signal.get(signum)
        if last is not None and now - last < SIGNAL_BURST:
            return
        self._last_signal[signum] = now
        self.signals += 1
        name = signal.Signals(signum).name
        self.stop_reason = name if self.signals == 1 else f"a second stop request, {name}"

    def _tally(self) -> str:
        """The outcomes so far, for the log lines of a burst and of a stop."""
        return ", ".join(f"{self.counts[k]} {k}" for k in OUTCOMES)

    def spawn_all(self) -> None:
        """Spawn the pusher, the workers, the monitor and the scheduler process (:meth:`start` does).

        The pusher first, asked for work at once: its connection and first claim overlap the
        workers' forks, and a job queued before the start runs that much sooner. The monitor, which
        only records, and the scheduler process (not in a burst) last.
        """
        connections.close_all()  # a forked child must not share the parent's database socket
        self._spawn_pusher()
        self._ask_pusher(starting=True)
        self.slots = []
        for index in range(self.workers):  # one by one: each closes the pipes of those before it
            self.slots.append(self._spawn_worker(index))
        self._spawn_monitor()
        if not self.burst:
            self._spawn_ticker()

    def _spawn_ticker(self) -> None:
        connections.close_all()
        self.ticker = self._spawn(ticker.run, (self.settings,), "taskmq-scheduler")

    def _spawn_worker(self, index: int) -> Slot:
        connections.close_all()
        return self.memory.spawn(index, self.settings, self._spawn)

    def _spawn(self, target: Callable[..., None], args: tuple, name: str,
               own_parent_end: Connection | None = None) -> multiprocessing.process.BaseProcess:
        # A forked child inherits every pipe end the sentinel holds; it closes the ones that are
        # not its own, so a pipe reports EOF as soon as its real peer dies.
        foreign: list[Connection | ResultQueue] = [self.pusher_pipe] if self.pusher_pipe is not None else []
        foreign += [slot.pipe for slot in self.slots]
        if self.results is not None and target is not monitor.run:
            foreign.append(self.results)
        if own_parent_end is not None:
            foreign.append(own_parent_end)
        return processes.fork(self.ctx, target, args, name, foreign)

    def _spawn_monitor(self) -> None:
        """Spawn the monitor with a new result pipe, and send it what the old one had not done
        (:attr:`unrecorded`: a repeat of what it committed just before it died is refused by the
        lease token)."""
        if self.results is not None:
            self.results.close()
        self.results = results = ResultPipe()
        self.monitor_progress = progress = self.ctx.RawArray("Q", 2)
        self.monitor = self._spawn(monitor.run, (results, self.settings, self.owner, progress), "taskmq-monitor")
        results.close_reader()
        self._monitor_turns = self._monitor_done = 0
        self._monitor_seen = time.monotonic()
        self.monitor_stalled = False
        if self.unrecorded:  # what its predecessor had not done: recorded once (a repeat is fenced)
            results.put(list(self.unrecorded))

    def _spawn_pusher(self) -> None:
        connections.close_all()
        self.pusher_pipe, child = self.ctx.Pipe()
        self.pusher = self._spawn(pusher.run, (child, self.settings, self.queues, self.owner, self.burst, self.workers,
                                               self.name), "taskmq-pusher")
        child.close()
        self.want_pending = False

    # -- the guard loop -----------------------------------------------------------------------
    def step(self) -> None:
        """One turn of the guard loop: ask for work, read pipes, guard, dispatch, upkeep."""
        self._ask_pusher()  # before sleeping, so a fresh cluster does not idle through its first wait
        pusher_pipe = self.pusher_pipe
        handles: list[Connection | int] = [] if pusher_pipe is None else [pusher_pipe]
        handles += [s.pipe for s in self.slots if s.running or s.retiring or not s.ready]
        handles += [s.process.sentinel for s in self.slots] + [self.pusher.sentinel, self.monitor.sentinel]
        if self.ticker is not NOT_STARTED:
            handles.append(self.ticker.sentinel)
        handles += self.upkeep.wakes  # a chore's answer (cancellations found, ...)
        # Outcomes the result pipe could not take yet: wake when it can (the monitor caught up).
        writable = self.results.writer if self.results is not None and self.results.pending else None
        # Idle, nothing can time out: sleep longer (pipes and process deaths still wake the wait).
        busy = self._holding()
        timeout = self.settings.guard_interval if busy else IDLE_WAIT
        if self.buffer and not self.want_pending:  # an ask for urgent work is due then
            timeout = max(0.0, min(timeout, self._next_urgent - time.monotonic()))
        for handle in self.poller.wait(handles, timeout=timeout, writable=writable):
            if handle is pusher_pipe:
                self._from_pusher()
            else:
                slot = next((s for s in self.slots if s.pipe is handle), None)
                if slot is not None:
                    self._from_worker(slot)
        self.stopper.check_cancels()  # (posted: the answer comes in this turn's settle or a later one's)
        self.upkeep.settle()
        now = time.monotonic()
        if now >= self._next_guard:
            self._next_guard = now + self.settings.guard_interval
            self._guard()
        self._steal()
        self._mind_leases()
        self._dispatch()
        self._flush()
        self._ask_pusher()
        self.upkeep.run()

    def _flush(self) -> None:
        """Hand the outcomes gathered in this turn to the monitor as one message (and what the
        result pipe could not take before)."""
        if self.results is None:
            return
        if self.outbox:
            if self.monitor_progress is not None:
                self.unrecorded.extend(self.outbox)
            if not self._holding():
                self.outbox.append(IDLE)  # nothing else is coming: the monitor need not gather
            self.results.put(self.outbox)
            self.outbox = []
        elif self.results.pending:
            self.results.flush()

    def _from_pusher(self) -> None:
        if self.pusher_pipe is None:
            return
        try:
            batch = self.pusher_pipe.recv()
        except (EOFError, OSError):
            return  # the guard sees the dead pusher and replaces it
        if not isinstance(batch, Batch):
            return
        self.want_pending = False
        self.drained = batch.drained
        self._yield(self.buffer.add(batch.tasks))
        if batch.paused:  # reserved here, not started: back to the queue, uncounted, until it resumes
            paused = self.buffer.take_queues(batch.paused)
            if paused:
                self.upkeep.later(f"returning the waiting tasks of paused queue(s) {', '.join(sorted(batch.paused))}",
                                  lambda: self._give_back(paused))

    def _yield(self, leaving: list[Waiting]) -> None:
        """Hand the buffer's overflow back to the broker, in the bookkeeping thread (see :mod:`.buffer`)."""
        if leaving:
            self.upkeep.books.post(f"yield of {len(leaving)} task(s)", lambda: self.buffer.yield_back(leaving),
                                   self._yielded)

    def _yielded(self, result: tuple[int, list[Waiting]] | None) -> None:
        yielded, kept = result if result is not None else (0, [])
        self.counts["yields"] += yielded
        if self.state is RUNNING:
            self._yield(self.buffer.keep(kept))
        elif kept:  # the stop gave back what waited meanwhile: these go back too
            reservations = [w.task.reservation for w in kept]
            self.upkeep.later(f"returning {len(kept)} unstarted reservation(s)", lambda: self._give_back(reservations))

    def _from_worker(self, slot: Slot) -> None:
        """Read what the worker of ``slot`` sent: every frame waiting in its pipe."""
        while True:
            try:
                frame = slot.pipe.recv_bytes()
            except (EOFError, OSError):
                self._replace_worker(slot, crashed=True)
                return
            self._worker_said(slot, frame)
            if not readable(slot.pipe):
                break
        self._pill_if_done(slot)

    def _worker_said(self, slot: Slot, frame: bytes) -> None:
        if frame == READY:
            slot.ready = True
        elif frame == RETIRING:
            slot.retiring = True
        elif frame[:1] == UNSTARTED:
            self._unstarted(slot, read_unstarted_frame(frame))
        else:
            status, job_id, outcome = read_outcome_frame(frame)
            running = slot.running.pop(job_id, None)
            if running is not None and running.halted and status == TIMED_OUT:
                self.stopper.return_interrupted([running.ticket])  # the stop's interruption landed: not an outcome
                slot.done += 1
                return
            if not slot.running:
                slot.stuck = False  # what did not stop in time has ended after all
            slot.done += 1
            kind = ("succeeded" if status in (SUCCEEDED, RECORDED) else "timeouts" if status == TIMED_OUT
                    else "suspended" if status == SUSPENDED else "failed")
            self.counts[kind] += 1
            if running is not None:
                self._count(running.ticket.reservation.queue, kind)
            if status != RECORDED:  # (a recorded success is in the database already)
                self.outbox.append(outcome)
            if slot.done >= self.settings.recycle:
                slot.retiring = True

    def _pill_if_done(self, slot: Slot) -> None:
        """Send the poison pill to a retiring worker once none of its tasks runs, or at once when it
        has one thread: the pill then waits in its pipe until the running task ends, and the
        worker hands back what it holds unstarted."""
        if slot.retiring and not slot.stopped and (self.threads == 1 or not slot.running):
            slot.stopped = True
            slot.send(STOP)

    def _unstarted(self, slot: Slot, job_ids: list[str]) -> int:
        """Take back tasks a worker held without starting them: they wait here again (their
        reservations still this cluster's), or during a stop go back to the broker, uncounted.
        Return how many were taken back."""
        tickets = [slot.running.pop(job_id).ticket for job_id in job_ids if job_id in slot.running]
        if not tickets:
            return 0
        if self.state is RUNNING:
            self.buffer.put_back(tickets)
        else:
            reservations = [t.reservation for t in tickets]
            self.upkeep.later(f"returning {len(tickets)} unstarted task(s) of a stopped worker",
                              lambda: self._give_back(reservations), self._counted("unstarted", len(tickets)))
        return len(tickets)

    def _take_back_unstarted(self, slot: Slot) -> int:
        """Take back what the worker of ``slot`` holds without having started it; return how many."""
        return self._unstarted(slot, self.memory.unstarted(slot))

    def _guard(self) -> None:
        now = time.monotonic()
        if self.upkeep.silent_for() > self.upkeep.halt_after:
            self.stopper.halt_if_cut_off()
        for slot in list(self.slots):
            if not slot.process.is_alive():
                while slot.running and readable(slot.pipe):
                    self._from_worker(slot)  # it sent its outcomes, then exited (max_rss): not a crash
                if slot in self.slots:
                    self._replace_worker(slot, crashed=bool(slot.running))
                continue
            self.stopper.guard(slot, now)
        if not self.pusher.is_alive() and self.state is RUNNING:
            logger.error("pusher died (exit code %s): reincarnating", self.pusher.exitcode)
            self.counts["reincarnations"] += 1
            self._spawn_pusher()
        if self.monitor_progress is not None:
            self._watch_monitor(now)
        if not self.monitor.is_alive() and self.state is RUNNING:
            # What it had not done yet goes to the new one (see _spawn_monitor).
            logger.error("monitor died (exit code %s): reincarnating", self.monitor.exitcode)
            self.counts["reincarnations"] += 1
            connections.close_all()
            self._spawn_monitor()
        if self.ticker is not NOT_STARTED and not self.ticker.is_alive() and self.state is RUNNING:
            logger.error("scheduler process died (exit code %s): reincarnating", self.ticker.exitcode)
            self.counts["reincarnations"] += 1
            self._spawn_ticker()

    def _watch_monitor(self, now: float) -> None:
        """Forget what the monitor has done; replace a monitor that has taken no turn for
        :attr:`wedged_after` seconds while outcomes wait for it (a statement that hangs, a stopped
        process), after asking it for a dump of its threads' stacks (SIGUSR1, to the log). From half
        that time on, no waiting task starts (see :meth:`_dispatch`): its outcome could not be recorded."""
        turns, done = self.monitor_progress[0], self.monitor_progress[1]
        for _ in range(done - self._monitor_done):
            if self.unrecorded:
                self.unrecorded.popleft()
        self._monitor_done = done
        if turns != self._monitor_turns or not self.unrecorded:
            self._monitor_turns, self._monitor_seen = turns, now
            if self.monitor_stalled:
                self.monitor_stalled = False
                logger.warning("cluster %s: the monitor goes on: starting work again", self.owner)
            return
        stalled = now - self._monitor_seen
        if stalled > self.wedged_after / 2 and not self.monitor_stalled:
            self.monitor_stalled = True
            logger.warning("cluster %s: the monitor (pid %s) has taken no turn for %.0f s while %d outcome(s) wait: "
                           "starting no waiting task until it goes on (replaced after %.0f s)", self.owner,
                           self.monitor.pid, stalled, len(self.unrecorded), self.wedged_after)
        if stalled <= self.wedged_after or self.state is not RUNNING or not self.monitor.is_alive():
            return
        logger.error("cluster %s: the monitor (pid %s) is wedged: no turn for %.0f s while %d outcome(s) wait; "
                     "its threads' stacks follow (SIGUSR1) unless it is stopped; replacing it, the new one records "
                     "those outcomes", self.owner, self.monitor.pid, stalled, len(self.unrecorded))
        if self.monitor.pid is not None:
            os.kill(self.monitor.pid, signal.SIGUSR1)
            pause(0.2)  # (once per wedge) the dump is written before the kill
        processes.kill(self.monitor)
        self.counts["reincarnations"] += 1
        connections.close_all()
        self._spawn_monitor()

    def _replace_worker(self, slot: Slot, crashed: bool) -> None:
        slot.process.join(timeout=1)
        self._take_back_unstarted(slot)
        if crashed:
            code = slot.process.exitcode
            for job_id, running in slot.running.items():
                joblog.logger.error("worker %s died (exit code %s) running job %s", slot.process.pid, code, job_id,
                             extra=job_fields(running.ticket))
                self.counts["crashes"] += 1
                self._count(running.ticket.reservation.queue, "crashes")
                self._record_lost(running.ticket, ex.CRASH,
                                  WorkerDied(f"the worker exited with code {code} while running it"), running.started)
        slot.pipe.close()
        index = self.slots.index(slot)
        if self.state is RUNNING:
            if not slot.retiring:
                self.counts["reincarnations"] += 1
            self.slots[index] = self._spawn_worker(slot.index)
        else:
            del self.slots[index]

    def _count(self, queue: str, outcome: str) -> None:
        """Count one finished task of ``queue`` by outcome (a dict increment; the heartbeat publishes it)."""
        per_queue = self.by_queue.get(queue)
        if per_queue is None:
            per_queue = self.by_queue[queue] = dict.fromkeys(OUTCOMES, 0)
        per_queue[outcome] += 1

    def _record_lost(self, task: Ticket, status: ex.Status, error: TaskMQError, started: float) -> None:
        """Record the outcome of a task whose worker was killed at its timeout or died."""
        started_at = time.time() - (time.monotonic() - started)
        self.outbox.append(dump_outcome(ex.lost(task.reservation, task.message().envelope, status, error, started_at)))

    def _mind_leases(self) -> None:
        """Start nothing whose lease may have run out, and give it back once the database answers.

        While the sentinel's database operations fail and its leases have gone unrenewed for half a
        lease, another cluster may soon take over what this one holds: it starts no waiting task,
        takes back what the workers hold unstarted, and claims nothing (running tasks go on). After
        a whole lease, what waits may belong to someone else already: when the database answers,
        it is given back (a fenced write: only what is still this cluster's goes back to the queue,
        its delivery not counted) instead of being run a second time.
        """
        standing = self.upkeep.leases()
        if standing == lease.HELD:
            if self.paused:
                self.paused = False
                if self.leases_lost and self.buffer:
                    reservations = self.buffer.take_all()
                    logger.warning("cluster %s: giving back %d unstarted task(s) whose leases may have run out "
                                   "while the database was away", self.owner, len(reservations))
                    self.upkeep.later(f"giving back {len(reservations)} unstarted task(s)",
                                      lambda: self._give_back(reservations))
                self.leases_lost = False
            return
        self.leases_lost = self.leases_lost or standing == lease.MAY_BE_LOST
        if self.paused:
            return
        self.paused = True
        logger.warning("cluster %s: leases not renewed for %.0f s (no heartbeat for %.0f s): starting no waiting "
                       "task and claiming nothing until the database answers; running tasks are stopped %.0f s after "
                       "the last heartbeat", self.owner, time.monotonic() - self.upkeep.renewed_at,
                       self.upkeep.silent_for(), self.upkeep.halt_after)
        if self.rules.prefetch:
            for slot in list(self.slots):
                self._revoke(slot)

    def _dispatch(self) -> None:
        """Feed the workers with room (see :meth:`.feeder.Feeder.feed`); nothing while the leases
        are in doubt (see :meth:`_mind_leases`)."""
        if self.buffer and not self.paused and not self.monitor_stalled:
            self.feeder.feed(self.slots)

    def _steal(self) -> None:
        """With prefetch, while a worker is idle and nothing waits here: take back what another
        worker holds behind a long task, for the idle ones (see :meth:`.dispatch.Rules.steal_from`)."""
        if self.state is RUNNING and not self.buffer:
            for slot in self.feeder.to_steal_from(self.slots):
                self.counts["steals"] += self._revoke(slot)

    def _revoke(self, slot: Slot) -> int:
        """Take back what the worker of ``slot`` (one thread, prefetch) holds unstarted, without its
        help; return how many. They wait here again, or during a stop go back to the broker.

        Once :meth:`.slots.SharedMemory.revoke` has marked them, the worker starts none of them; the
        outcomes of what ran before are read from its pipe first.
        """
        if not self.memory.revoke(slot):  # only a worker that died holding its lock: the guard replaces it
            return 0
        if readable(slot.pipe):
            self._from_worker(slot)
            if slot not in self.slots:  # it died: replacing it took back what it held
                return 0
        return self._take_back_unstarted(slot)

    def _ask_pusher(self, starting: bool = False) -> None:
        if self.want_pending or (self.state is not RUNNING and not starting) or not self.pusher.is_alive() \
                or self.pusher_pipe is None or self.paused:
            return
        want = self.buffer.want(busy=sum(len(s.running) for s in self.slots))
        if want is None:
            return
        if want.room == 0:
            # Only work above the lowest waiting priority: look every URGENT_CHECK, not every turn
            # (a turn per outcome while busy); a want with room goes at once.
            now = time.monotonic()
            if now < self._next_urgent:
                return
            self._next_urgent = now + URGENT_CHECK
        try:
            self.pusher_pipe.send(want)
            self.want_pending = True
        except (BrokenPipeError, OSError):
            pass

    def _held(self) -> list[str]:
        """The job ids of what the cluster holds: waiting and running tasks."""
        return self.buffer.held() + [job_id for s in self.slots for job_id in s.running]

    def report(self) -> Report:
        """What the heartbeat says of the processes now; ``tasks`` lists what each busy worker runs:
        ``[worker index, job id, queue, seconds since it started]``."""
        now = time.monotonic()
        tasks = [[s.index, job_id, s.running[job_id].ticket.reservation.queue,
                  round(self.memory.running_for(s, job_id, now), 1)]
                 for s in self.slots for job_id in self.memory.started(s)]
        return Report(self.state, len(self.slots),
                      {**self.counts, "waiting": len(self.buffer), "running": len(tasks),
                       "queues": {queue: dict(per_queue) for queue, per_queue in self.by_queue.items()},
                       "tasks": tasks})

    def _idle(self) -> bool:
        """The pusher found nothing ready, and no task waits or runs here."""
        return self.drained and not self._holding()

    def _holding(self) -> bool:
        """A task waits here, or runs (or is held) in a worker."""
        return bool(self.buffer) or any(s.running for s in self.slots)

    # -- the stop procedure -------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the pusher, give back unstarted work, let workers finish, let the monitor drain."""
        self.state = ClusterState.STOPPING
        timeout = self.settings.stop_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        logger.info("cluster %s stopping (%s)%s", self.name, self.stop_reason or "asked to",
                    "" if timeout is None else f": running tasks have {timeout:g}s to finish")
        self.upkeep.publish()
        # 1. The pusher reserves nothing more; a batch it sends meanwhile joins the waiting list. The
        # scheduler process ends once its tick under way is over.
        processes.terminate(self.ticker)
        if self.pusher_pipe is not None:
            try:
                self.pusher_pipe.send(Stop())
            except (BrokenPipeError, OSError):
                pass
            while self.pusher.is_alive() and self.signals < 2 and not _past(deadline, STOP_MARGIN):
                # Woken by its last batch or by its exit, whichever comes first.
                if self.pusher_pipe in wait([self.pusher_pipe, self.pusher.sentinel], timeout=0.05):
                    self._from_pusher()
                self.upkeep.settle()
                self.upkeep.give_up_if_away()
            if self.pusher.is_alive():
                logger.error("cluster %s: the pusher did not stop in time; killing it", self.name)
                processes.kill(self.pusher)  # what it had reserved and not handed over comes back with its lease
        self.pusher.join(timeout=1)
        # 2. Reservations that never started go back without counting a delivery: the waiting
        # list's, and (prefetch) what the workers hold behind their running task.
        if self.rules.prefetch:
            for slot in list(self.slots):
                self._revoke(slot)
        if self.buffer:
            reservations = self.buffer.take_all()
            self.upkeep.later(f"returning {len(reservations)} unstarted reservation(s) (their leases bring them back)",
                              lambda: self._give_back(reservations), self._counted("unstarted", len(reservations)))
        # 3. Poison pills: idle workers get one now, busy ones after their last task.
        for slot in self.slots:
            slot.retiring = True
            self._pill_if_done(slot)
        busy = sum(1 for s in self.slots if s.running)
        if busy:
            logger.info("cluster %s: waiting for %d worker(s) to finish their running tasks", self.name, busy)
        while self.slots and self.signals < 2:
            handles: list[Connection | int] = [s.pipe for s in self.slots]
            handles += [s.process.sentinel for s in self.slots]
            handles += self.upkeep.wakes
            for handle in wait(handles, timeout=self.settings.guard_interval):
                finished = next((s for s in self.slots if s.pipe is handle), None)
                if finished is not None:
                    self._from_worker(finished)
            self.upkeep.settle()
            self._guard()
            self.stopper.check_cancels()
            if _past(deadline):
                self.stopper.halt_running()
            self._flush()
            self.upkeep.stopping()
        if self.signals >= 2:
            return  # a second request: start() kills what is left and gives back what ran
        # 4. The monitor records what is left, then exits.
        self._flush()
        if self.results is not None:
            self.results.put(END_OF_RESULTS)
        while self.monitor.is_alive() and self.signals < 2:
            if _past(deadline, STOP_MARGIN + INTERRUPT_GRACE):
                logger.error("cluster %s: the monitor did not record the last outcomes in time; killing it "
                             "(their leases bring those jobs back)", self.name)
                processes.kill(self.monitor)
                break
            if self.results is not None and self.results.pending:
                self.results.drain(timeout=0.1)  # the monitor reads on: the rest fits in time
            else:
                self.monitor.join(timeout=0.1)
            self.upkeep.settle()
            self.upkeep.stopping()
        self._end_ticker(deadline)
        self.upkeep.finish(STOP_MARGIN)  # the give-backs posted above, so that the line counts them
        self.state = ClusterState.STOPPED
        logger.info("cluster %s stopped: %s; gave back %d unstarted and %d interrupted task(s), uncounted",
                    self.name, self._tally(), self.given_back["unstarted"], self.given_back["interrupted"])

    def _counted(self, kind: str, count: int) -> Callable[[bool], None]:
        """The ``then`` of a give-back posted to the bookkeeping thread: count it once it worked."""
        def then(worked: bool) -> None:
            if worked:
                self.given_back[kind] += count
        return then

    def _hard_stop(self, headline: str, give_back: bool = True) -> None:
        """A second stop request, or a burst that gave up on the database: kill every process now,
        then give back what they held, uncounted. One line, ``headline`` first, says what became of them.

        The running tasks go back with the reason :data:`INTERRUPTED_BY_HARD_STOP`, what waited
        unstarted as it was; a fenced write each (only what is still this cluster's goes back). When
        the database does not take them (or without ``give_back``), their leases bring them back, a
        delivery counted.
        """
        started = {job_id for s in self.slots for job_id in self.memory.started(s)}
        tickets = [r.ticket for s in self.slots for r in s.running.values()] + self.buffer.take(len(self.buffer))
        held = [t.reservation for t in tickets]
        running = [r for r in held if r.job_id in started]
        unstarted = [r for r in held if r.job_id not in started]
        self.kill_all()
        self.state = ClusterState.STOPPED
        for slot in self.slots:
            slot.running.clear()
        why = INTERRUPTED_BY_HARD_STOP.format(self.stop_reason)
        counts = {}

        def returned() -> None:
            counts["running"] = self._give_back(running, why) if running else 0
            counts["unstarted"] = self._give_back(unstarted) if unstarted else 0

        level = logging.WARNING if give_back else logging.ERROR
        if not held:
            logger.log(level, "%s: processes killed; no task was running or waiting", headline)
            return
        told: list[bool] = []
        if give_back:
            # In the bookkeeping thread like every statement, waited for at most STOP_MARGIN.
            self.upkeep.later(f"returning {len(held)} task(s) of a hard stop", returned, told.append)
            self.upkeep.finish(STOP_MARGIN)
        if told and told[0]:
            logger.log(level, "%s: processes killed; %d running task(s) interrupted and %d unstarted given back "
                       "to the queue, uncounted", headline, counts["running"], counts["unstarted"])
        else:
            logger.log(level, "%s: processes killed; %d running and %d unstarted task(s) not given back: their "
                       "leases bring them back within %gs, a delivery counted", headline, len(running),
                       len(unstarted), self.settings.lease)

    def _end_ticker(self, deadline: float | None) -> None:
        """Wait for the scheduler process to finish its tick (it was asked to end), at most until
        ``deadline`` plus :data:`STOP_MARGIN`; then kill it (a tick commits all it did or nothing)."""
        while self.ticker.is_alive() and self.signals < 2 and not _past(deadline, STOP_MARGIN):
            self.ticker.join(timeout=0.1)
            if deadline is None and self.ticker.is_alive():
                deadline = time.monotonic()  # no stop_timeout: it still gets the margin
        if self.ticker.is_alive():
            logger.error("cluster %s: the scheduler process did not end in time; killing it", self.owner)
            processes.kill(self.ticker)

    def _give_back(self, reservations: list, interrupted_by: str | None = None) -> int:
        """Return reservations to the broker (unstarted, or interrupted saying why): the cluster's
        own bookkeeping (see :meth:`Broker.bookkeeping`), in the bookkeeping thread."""
        with self.broker.bookkeeping():
            if interrupted_by is None:
                returned = self.broker.defer_many(reservations)
                logger.info("returned %d unstarted reservation(s) to the broker", returned)
                return returned
            return self.broker.return_interrupted(reservations, interrupted_by)

    def kill_all(self) -> None:
        """Kill every child at once (the hard stop: what they held comes back with its lease)."""
        for process in [self.pusher, self.monitor, self.ticker, *(s.process for s in self.slots)]:
            processes.kill(process)
        if self.results is not None:
            # The monitor is gone: outcomes still pending for it are dropped (their leases bring
            # those jobs back); nothing waits on them at exit.
            self.results.close()


def _past(deadline: float | None, margin: float = 0.0) -> bool:
    """The monotonic ``deadline`` (None: none) plus ``margin`` has passed."""
    return deadline is not None and time.monotonic() >= deadline + margin
