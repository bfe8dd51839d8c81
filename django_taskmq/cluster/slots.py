"""The worker slots: each worker process, what it holds, and the memory it shares with the sentinel.

A :class:`Slot` is one worker and the tasks sent to it (:class:`Running`, running or prefetched);
:class:`SharedMemory` owns the per-worker shared arrays (which task a worker with one thread runs,
since when, what it must not start, what to cancel or interrupt), spawns a worker into a slot, tells
which of its tasks have started, and marks the unstarted ones revoked under the worker's lock. It
reads no pipe and keeps no waiting list: the sentinel decides what to do with what it takes back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext
from typing import Protocol

from ..conf import Settings
from . import worker
from .messages import Ticket

#: Seconds a worker with several threads has to stop a task past its timeout once asked, before
#: the task counts as stuck (blocked in C code) and its worker takes no more work. Not
#: TASKMQ['cancel_grace'], the time a cancelled task has to stop by itself before it is interrupted.
INTERRUPT_GRACE = 1.0


class Process(Protocol):
    """What the sentinel uses of a child process (a ``multiprocessing`` process, or a stand-in)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None: ...

    @property
    def sentinel(self) -> int: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...


class _NotStarted:
    """A child that is not spawned yet: never alive."""

    pid: int | None = None
    exitcode: int | None = None

    @property
    def sentinel(self) -> int:
        raise RuntimeError("the cluster's processes are not started")

    def is_alive(self) -> bool:
        return False

    def join(self, timeout: float | None = None) -> None:
        return None


NOT_STARTED = _NotStarted()


@dataclass
class Running:
    """A task a worker runs."""

    ticket: Ticket
    started: float  # monotonic, when it was sent: with threads > 1 it starts then (it is sent to a free thread)
    arrival: int = 0  # its place in the order the worker received its tasks, from 1
    cancelled: float | None = None  # monotonic, when the worker was asked to interrupt it (threads > 1)
    halted: bool = False  # interrupted by the stop procedure (stop_timeout): it goes back uncounted
    cancel_requested: float | None = None  # monotonic, when the sentinel saw its cancellation requested

    def overdue(self, now: float) -> bool:
        """It runs past its timeout."""
        timeout = self.ticket.timeout
        return bool(timeout) and now - self.started > timeout  # type: ignore[operator]

    def cancel_due(self, now: float, grace: float) -> bool:
        """Its cancellation was requested more than ``grace`` seconds ago: interrupt it."""
        return self.cancel_requested is not None and now - self.cancel_requested > grace

    def stuck(self, now: float) -> bool:
        """It was asked to stop more than :data:`INTERRUPT_GRACE` seconds ago and still runs."""
        return self.cancelled is not None and now - self.cancelled > INTERRUPT_GRACE


@dataclass
class Slot:
    """One worker process and the tasks it runs (job id -> :class:`Running`)."""

    index: int
    process: Process
    pipe: Connection
    running: dict[str, Running] = field(default_factory=dict)  # what it holds: running, or prefetched
    ready: bool = True  # a freshly spawned worker is not, until it says so
    sent: int = 0  # tasks sent to it so far (the last one's arrival number)
    done: int = 0
    retiring: bool = False  # no more work: the poison pill follows
    stopped: bool = False  # the poison pill was sent
    stuck: bool = False  # a task of it did not stop at its timeout: no more work, then it is killed
    halted: float | None = None  # monotonic, when the stop procedure interrupted its tasks (threads > 1)

    def accepting(self) -> bool:
        """It may be sent work (when it has room)."""
        return self.ready and not self.retiring and not self.stuck and self.process.is_alive()

    def send(self, message: bytes) -> bool:
        """Send a frame to its worker: tasks (their pickled bytes, unopened), a cancel, the poison
        pill; False when that failed (its worker died: the guard sees it)."""
        try:
            self.pipe.send_bytes(message)
            return True
        except (BrokenPipeError, OSError):
            return False

    def hold(self, tickets: list[Ticket], now: float) -> None:
        """Count ``tickets`` as sent to its worker (in this order), from ``now``."""
        for ticket in tickets:
            self.sent += 1
            self.running[ticket.reservation.job_id] = Running(ticket, now, self.sent)


#: Spawns a child: ``(target, args, name, own_parent_end)`` -> the started process (see Sentinel._spawn).
Spawner = Callable[[Callable[..., None], tuple, str, Connection], Process]


class SharedMemory:
    """The memory the sentinel shares with its workers, one entry per worker index.

    With one thread a worker writes which task it runs (``current``, its arrival number) and since
    when (``since``); with prefetch it starts none of the tasks that arrived up to ``revoked`` (the
    sentinel took them back), and ``locks`` make that check and the start one step. ``cancel_marks``
    and ``halt_marks``: the arrival number of a task whose cancellation was requested, and of one to
    interrupt for it (see worker.OneAtATime._on_cancel).
    """

    def __init__(self, ctx: ForkContext, workers: int, threads: int, prefetch: bool) -> None:
        self.ctx = ctx
        self.threads = threads
        self.prefetch = prefetch
        self.current = ctx.RawArray("q", workers)
        self.since = ctx.RawArray("d", workers)
        self.revoked = ctx.RawArray("q", workers)
        self.locks = [ctx.Lock() for _ in range(workers)]
        self.cancel_marks = ctx.RawArray("q", workers)
        self.halt_marks = ctx.RawArray("q", workers)

    def spawn(self, index: int, settings: Settings, spawn: Spawner) -> Slot:
        """Start a worker for ``index`` with ``spawn`` (its marks cleared) and return its slot,
        not ready until it says so."""
        self.current[index] = self.revoked[index] = self.cancel_marks[index] = self.halt_marks[index] = 0
        # A new lock: a killed worker may have died holding the old one.
        self.locks[index] = lock = self.ctx.Lock()
        shared = worker.Shared(self.current, self.since, self.revoked if self.prefetch else None,
                               lock if self.prefetch else None, cancel=self.cancel_marks, halt=self.halt_marks)
        parent, child = self.ctx.Pipe()
        process = spawn(worker.run, (index, child, settings, self.threads, shared), f"taskmq-worker-{index}", parent)
        child.close()
        return Slot(index, process, parent, ready=False)

    def started(self, slot: Slot) -> list[str]:
        """The job ids of the tasks of ``slot`` that have started (the others wait in the worker)."""
        if self.threads > 1:
            return list(slot.running)
        arrival = self.current[slot.index]
        return [job_id for job_id, r in slot.running.items() if r.arrival == arrival]

    def unstarted(self, slot: Slot) -> list[str]:
        """The job ids of the tasks of ``slot`` its worker holds without having started them."""
        started = self.started(slot)
        return [job_id for job_id in slot.running if job_id not in started]

    def running_for(self, slot: Slot, job_id: str, now: float) -> float:
        """Seconds the task ``job_id`` of ``slot`` has run (it has started)."""
        if self.threads == 1:
            return now - self.since[slot.index]
        return now - slot.running[job_id].started

    def revoke(self, slot: Slot) -> bool:
        """Mark every task sent to the worker of ``slot`` so far that has not started: it starts none
        of them (worker.OneAtATime). False when its lock could not be had: only a worker that died
        holding it (the guard replaces it).

        From then on ``current`` cannot move to a marked task: what had started is the one task it
        names, and the outcomes of the ones before it are in its pipe already (read them first,
        then take back :meth:`unstarted`).
        """
        lock = self.locks[slot.index]
        if not lock.acquire(timeout=0.005):
            return False
        try:
            self.revoked[slot.index] = slot.sent
        finally:
            lock.release()
        return True

    def ask_cancel(self, slot: Slot, arrival: int) -> None:
        """Mark the task ``arrival`` of ``slot`` (one thread) as cancelled (the signal follows)."""
        self.cancel_marks[slot.index] = arrival

    def ask_halt(self, slot: Slot, arrival: int) -> None:
        """Mark the task ``arrival`` of ``slot`` (one thread) to be interrupted (the signal follows)."""
        self.halt_marks[slot.index] = arrival

