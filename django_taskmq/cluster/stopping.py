"""Stopping one running task, the sentinel's half: when a task must stop and how it is stopped.

A task stops before it ends for four reasons, each decided here and carried out on the worker slots:

* its **timeout** (``@task(timeout=...)``): a worker with one thread is killed and replaced; with
  several threads the worker is asked to interrupt that one task (:meth:`Stopping.enforce_timeouts`);
* a **cancel** (:func:`django_taskmq.cancel`): looked for every :data:`CANCEL_CHECK_EVERY` seconds;
  the task is asked to stop and, still running ``TASKMQ['cancel_grace']`` seconds later, interrupted
  like a task past its timeout;
* the **stop-halt**: ``stop_timeout`` is over while the cluster stops; what still runs is interrupted
  and put back in the queue uncounted (:meth:`Stopping.halt_running`);
* the **cut-off halt**: no heartbeat written for ``halt_after`` seconds; every running task is
  stopped before another cluster may take it over (:meth:`Stopping.halt_if_cut_off`).

An interrupted task that still runs :data:`.slots.INTERRUPT_GRACE` seconds later is *stuck*
(blocked in C code): its worker is killed. The worker's half, the signal and the asynchronous
exception that interrupt a task in its thread, is :mod:`.interrupts` (and the worker's signal handler
in :mod:`.worker`). The sentinel's guard loop only calls :meth:`Stopping.guard`,
:meth:`Stopping.check_cancels`, :meth:`Stopping.halt_running` and :meth:`Stopping.halt_if_cut_off`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from ..runtime import execution as ex
from ..observability import joblog
from ..brokers.base import Broker
from ..conf import Settings
from ..exceptions import JobCancelled, TaskMQError, TaskTimeout
from . import processes
from .buffer import Buffer
from .messages import Ticket, cancel_frame, cancel_request_frame, dump_outcome
from .poller import readable
from .slots import INTERRUPT_GRACE, SharedMemory, Slot
from .upkeep import Upkeep

logger = logging.getLogger("django_taskmq.cluster.sentinel")  # the sentinel's lines, as before the move

#: Seconds between two looks for cancellation requests of the jobs the cluster holds (one primary-key
#: read, only while it holds some): a cancelled job learns of it within about this.
CANCEL_CHECK_EVERY = 1.0
#: The error of a job the stop procedure interrupted and put back.
INTERRUPTED_BY_STOP = "interrupted by shutdown (stop_timeout {}s); back in the queue, not counted"


class Cluster(Protocol):
    """What stopping a task uses of the sentinel (:class:`.sentinel.Sentinel`), which imports this module."""

    settings: Settings
    broker: Broker
    threads: int
    owner: str
    slots: list[Slot]
    memory: SharedMemory
    buffer: Buffer
    upkeep: Upkeep
    counts: dict[str, int]
    outbox: list[bytes]

    def _from_worker(self, slot: Slot) -> None: ...
    def _take_back_unstarted(self, slot: Slot) -> int: ...
    def _replace_worker(self, slot: Slot, crashed: bool) -> None: ...
    def _revoke(self, slot: Slot) -> int: ...
    def _count(self, queue: str, outcome: str) -> None: ...
    def _counted(self, kind: str, count: int) -> Callable[[bool], None]: ...
    def _record_lost(self, task: Ticket, status: ex.Status, error: TaskMQError, started: float) -> None: ...
    def _give_back(self, reservations: list, interrupted_by: str | None = None) -> int: ...
    def _held(self) -> list[str]: ...
    def _holding(self) -> bool: ...


class Stopping:
    """Stopping the running tasks of one sentinel's workers (see the module's docstring)."""

    def __init__(self, sentinel: Cluster) -> None:
        self.sentinel = sentinel
        self.next_cancel_check = 0.0  # monotonic time of the next look for cancellation requests

    def guard(self, slot: Slot, now: float) -> None:
        """The guard loop's turn for one live worker: stop what runs past its timeout or its cancel's grace."""
        if slot.halted is not None:
            return  # the stop procedure interrupted its tasks: see halt_running
        if self.sentinel.threads == 1:
            self.enforce_timeout(slot, now)
        elif any(r.overdue(now) or r.cancel_due(now, self.sentinel.settings.cancel_grace)
                 for r in slot.running.values()):
            self.enforce_timeouts(slot, now)

    def halt_if_cut_off(self) -> None:
        """No heartbeat written for ``halt_after`` seconds (a third of the lease): stop every task
        that runs here, before other clusters may take it back (``dead_after``, 5 s later; see
        :meth:`.upkeep.Upkeep.release_dead`), so a cluster merely cut off from the database never
        runs a job at the same time as another one. Its workers are killed and replaced; each job
        goes back to the queue once the database answers (a fenced write: only what is still this
        cluster's), its delivery not counted. Nothing new starts meanwhile (see ``Sentinel._mind_leases``)."""
        busy = [slot for slot in self.sentinel.slots if slot.running]
        if not busy:
            return
        tickets = []
        for slot in busy:
            self.sentinel._take_back_unstarted(slot)  # (prefetch: they wait here, not started: see _mind_leases)
            processes.kill(slot.process)
            tickets += [running.ticket for running in slot.running.values()]
            slot.running.clear()
            self.sentinel._replace_worker(slot, crashed=False)
        self.sentinel.counts["interrupted"] += len(tickets)
        silent = self.sentinel.upkeep.silent_for()
        logger.error("cluster %s: no heartbeat written for %.0f s (the bookkeeping thread: %s): stopped its %d "
                     "running task(s) before other clusters may take them over (after %.0f s); they go back to the "
                     "queue when the database answers", self.sentinel.owner, silent,
                     self.sentinel.upkeep.books.describe(), len(tickets), self.sentinel.upkeep.dead_after)
        reservations = [t.reservation for t in tickets]
        why = f"interrupted: the cluster wrote no heartbeat for {silent:.0f} s (cut off from the database?)"
        self.sentinel.upkeep.later(f"returning {len(tickets)} task(s) stopped while cut off",
                                   lambda: self.sentinel._give_back(reservations, why))

    def enforce_timeout(self, slot: Slot, now: float) -> None:
        """One thread: kill (and replace) the worker when the task it runs is past its timeout."""
        started = self.sentinel.memory.started(slot)
        if not started:
            return
        running = slot.running[started[0]]
        if running.cancel_due(now, self.sentinel.settings.cancel_grace) and running.cancelled is None:
            # Interrupt it in its worker (the signal raises JobCancelled there); the worker carries on.
            running.cancelled = now
            self.sentinel.memory.ask_halt(slot, running.arrival)
            processes.signal_cancel(slot.process)
            return
        timeout = running.ticket.timeout
        if running.stuck(now):
            timeout = 0.0  # cancelled, interrupted, and still running: blocked in C code; killed below
        elif not timeout or now - self.sentinel.memory.since[slot.index] <= timeout:
            return
        if readable(slot.pipe):
            self.sentinel._from_worker(slot)  # it may have just ended: read that first
            return
        if running.cancel_requested is not None:
            joblog.logger.warning("job %s was cancelled and did not stop when interrupted: killing worker %s",
                                  started[0], slot.process.pid, extra=job_fields(running.ticket))
        else:
            joblog.logger.warning("job %s ran past its timeout of %ss: killing worker %s",
                                  started[0], timeout, slot.process.pid, extra=job_fields(running.ticket))
        self.kill_timed_out(slot)

    def enforce_timeouts(self, slot: Slot, now: float) -> None:
        """Stop the tasks of ``slot`` that run past their timeout.

        With several threads the worker is asked to interrupt the task; a task still running
        :data:`INTERRUPT_GRACE` seconds later is stuck: the worker gets no more work and is killed
        once every task it still runs is stuck too (its other tasks finish, or reach their own
        timeouts, first).
        """
        grace = self.sentinel.settings.cancel_grace
        for job_id, running in slot.running.items():
            if running.cancelled is None and (running.overdue(now) or running.cancel_due(now, grace)):
                running.cancelled = now
                slot.send(cancel_frame(job_id))
            elif running.stuck(now) and not slot.stuck:
                slot.stuck = True
                why = "was cancelled" if running.cancel_requested is not None else \
                    f"ran past its timeout of {running.ticket.timeout}s"
                joblog.logger.warning("job %s %s and did not stop when interrupted: worker %s "
                                      "takes no more work and is killed once its other tasks are done",
                                      job_id, why, slot.process.pid, extra=job_fields(running.ticket))
        if slot.stuck and all(r.stuck(now) for r in slot.running.values()):
            self.kill_timed_out(slot)

    def kill_timed_out(self, slot: Slot) -> None:
        """Kill the worker of ``slot``; each task it runs is recorded as timed out (what it holds
        unstarted waits here again), then it is replaced."""
        self.sentinel._take_back_unstarted(slot)
        for running in slot.running.values():
            if running.cancel_requested is not None:  # a cancelled task that did not stop: it ends CANCELLED
                self.sentinel.counts["failed"] += 1
                self.sentinel._count(running.ticket.reservation.queue, "failed")
                self.sentinel._record_lost(running.ticket, ex.CANCELLED,
                                           JobCancelled("cancelled; did not stop when interrupted: its worker was killed"),
                                           running.started)
                continue
            self.sentinel.counts["timeouts"] += 1
            self.sentinel._count(running.ticket.reservation.queue, "timeouts")
            self.sentinel._record_lost(running.ticket, ex.TIMEOUT,
                                       TaskTimeout(f"ran past its timeout of {running.ticket.timeout}s"), running.started)
        slot.running.clear()
        processes.kill(slot.process)
        self.sentinel._replace_worker(slot, crashed=False)

    def check_cancels(self) -> None:
        """Every :data:`CANCEL_CHECK_EVERY` seconds while the cluster holds tasks, ask the broker which
        of them were cancelled (:func:`django_taskmq.cancel`), and stop those."""
        now = time.monotonic()
        books = self.sentinel.upkeep.books
        if now < self.next_cancel_check or not self.sentinel._holding() or books.pending("cancel check"):
            return
        self.next_cancel_check = now + CANCEL_CHECK_EVERY
        held = self.sentinel._held()
        found: list[str] = []

        def carry_out(worked: bool) -> None:  # in a later turn: what ended meanwhile is passed over
            for job_id in found:
                self.cancel(job_id, time.monotonic())

        books.post("cancel check", lambda: self.sentinel.upkeep.attempt(
            "cancel check", lambda: found.extend(self.sentinel.broker.cancel_requested(held))), carry_out,
            kind="cancel check")

    def cancel(self, job_id: str, now: float) -> None:
        """Stop the task of ``job_id``, whose cancellation was requested.

        Waiting here (or, with prefetch, unstarted in a worker, taken back first): it ends
        ``CANCELLED`` without running. Running: it is asked to stop (``current_job().cancelled``; a
        coroutine is cancelled) and, still running ``cancel_grace`` seconds later, interrupted like
        a task past its timeout (see :meth:`guard`).
        """
        slot = next((s for s in self.sentinel.slots if job_id in s.running), None)
        if slot is not None and job_id not in self.sentinel.memory.started(slot):
            self.sentinel._revoke(slot)  # unstarted in a worker (prefetch): it waits here again
            slot = None if job_id not in slot.running else slot  # (else it started meanwhile)
        if slot is None:
            ticket = self.sentinel.buffer.remove(job_id)
            if ticket is not None:
                logger.info("job %s cancelled before it started", job_id)
                self.sentinel.outbox.append(dump_outcome(ex.Outcome(
                    ticket.reservation, ticket.message().envelope, ex.CANCELLED,
                    error="JobCancelled: cancelled before it started", finished_at=time.time())))
            return  # (or it ended meanwhile)
        running = slot.running[job_id]
        if running.cancel_requested is not None:
            return  # asked already
        running.cancel_requested = now
        logger.info("job %s cancelled while running on worker %s: asking it to stop (interrupted after %ss)",
                    job_id, slot.process.pid, self.sentinel.settings.cancel_grace)
        if self.sentinel.threads > 1:
            slot.send(cancel_request_frame(job_id))
        else:
            self.sentinel.memory.ask_cancel(slot, running.arrival)
            processes.signal_cancel(slot.process)

    def halt_running(self) -> None:
        """``stop_timeout`` is over: interrupt what still runs and put it back in the queue uncounted.

        A worker with one thread is killed at once (as at a timeout). With several threads each task
        is interrupted (:mod:`.interrupts`: its ``finally`` blocks run); what has not stopped
        :data:`INTERRUPT_GRACE` seconds later (blocked in C code) goes with its worker, killed. Only a
        task known to have stopped goes back: never two holders at once.
        """
        now = time.monotonic()
        for slot in list(self.sentinel.slots):
            if not slot.running:
                continue
            if self.sentinel.threads > 1 and slot.halted is None:
                slot.halted = now
                for job_id, running in slot.running.items():
                    running.halted = True
                    slot.send(cancel_frame(job_id))
            elif self.sentinel.threads == 1 or now - slot.halted > INTERRUPT_GRACE:  # type: ignore[operator]
                if readable(slot.pipe):
                    self.sentinel._from_worker(slot)  # what ended meanwhile is recorded as it ended
                    if slot not in self.sentinel.slots or not slot.running:
                        continue
                processes.kill(slot.process)
                self.sentinel._take_back_unstarted(slot)  # (prefetch: given back in step 2 already)
                for running in slot.running.values():  # cancelled ones end as asked, not back in the queue
                    if running.cancel_requested is not None:
                        self.sentinel._record_lost(running.ticket, ex.CANCELLED,
                                                   JobCancelled("cancelled; interrupted by the cluster's stop"),
                                                   running.started)
                self.return_interrupted([r.ticket for r in slot.running.values() if r.cancel_requested is None])
                slot.running.clear()
                self.sentinel._replace_worker(slot, crashed=False)

    def return_interrupted(self, tickets: list[Ticket]) -> None:
        """Put tasks the stop procedure interrupted back in the queue: delivery and attempt given back."""
        if not tickets:
            return
        timeout = self.sentinel.settings.stop_timeout
        for ticket in tickets:
            logger.warning("job %s still ran after stop_timeout (%ss): interrupted, back in the queue (not counted)",
                           ticket.reservation.job_id, timeout)
        self.sentinel.counts["interrupted"] += len(tickets)
        reservations = [t.reservation for t in tickets]
        self.sentinel.upkeep.later(f"returning {len(tickets)} interrupted task(s) (their leases bring them back)",
                                   lambda: self.sentinel._give_back(reservations, INTERRUPTED_BY_STOP.format(timeout)),
                                   self.sentinel._counted("interrupted", len(tickets)))


def job_fields(ticket: Ticket) -> dict:
    """The extra fields of a log record about ``ticket``'s job (see :mod:`~django_taskmq.observability.joblog`)."""
    try:
        task = ticket.message().envelope.func
    except Exception:  # a log record's field is not worth failing the sentinel for
        task = None
    return joblog.fields(ticket.reservation, task)
