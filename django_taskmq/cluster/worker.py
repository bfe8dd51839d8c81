"""A worker process: run tasks fed by the sentinel through the worker's own pipe, one at a time
or, with ``TASKMQ['threads']`` > 1, up to that many at once in threads.

Each worker has a private pipe, so a worker killed at any instant (SIGKILL included) can only
break its own pipe; the one lock it shares (with prefetch, see :class:`Shared`) is its own too,
which the sentinel only ever tries to take for a moment and replaces with the worker.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import queue
import resource
import signal
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from traceback import format_exc
from typing import Any, NamedTuple

from django.db import close_old_connections, connections

from ..runtime import execution as ex
from ..observability import reporting
from ..brokers.base import Broker
from ..brokers import database
from ..conf import Settings
from ..exceptions import JobCancelled, TaskTimeout
from .interrupts import Interrupts, Running, guard_thread_starts
from .poller import readable
from .messages import (ALONE, CANCEL, CANCEL_REQUEST, READY, RETIRING, STOP, is_tasks_frame, load_task,
                       outcome_frame, read_tasks_frame, recorded_frame, unstarted_frame)

logger = logging.getLogger(__name__)

LOCK_WAIT = 0.1  # seconds such a worker's ack waits for SQLite's write lock before leaving it to the monitor


class Shared(NamedTuple):
    """Memory a worker with one thread shares with the sentinel, one entry per worker index.

    ``current``: the arrival number (from 1, in the order its tasks reached it) of the task it
    runs; ``since``: the monotonic time that task started. With prefetch also ``revoked``: tasks
    that arrived up to that number and have not started must not start (the sentinel took them
    back), and ``lock``, held while the worker checks that and starts a task. ``cancel`` and
    ``halt``: the arrival number of a task whose cancellation was requested, and of one to interrupt
    at once; the sentinel writes them, then sends :data:`CANCEL_SIGNAL` (see :meth:`OneAtATime._on_cancel`).
    """

    current: Any
    since: Any
    revoked: Any = None
    lock: Any = None
    cancel: Any = None
    halt: Any = None


#: The signal by which the sentinel tells a worker with one thread to look at ``Shared.cancel`` and
#: ``Shared.halt``: that worker's only thread runs the task, so nothing else could.
CANCEL_SIGNAL = signal.SIGUSR1


def run(index: int, conn: Connection, settings: Settings, threads: int = 1, shared: Shared | None = None) -> None:
    """Serve tasks from ``conn`` until the poison pill (:data:`~.messages.STOP`) arrives or the pipe closes.

    Tasks arrive in tasks frames (:func:`~.messages.tasks_frame`); outcomes leave as outcome
    frames (:func:`~.messages.outcome_frame`), one per task as soon as it ends, the result already
    signed for storage (signing here spreads that cost over the workers). With one thread, a plain
    success after which nothing waits is recorded here (:meth:`OneAtATime._record`) and only
    announced (:func:`~.messages.recorded_frame`).

    With one thread, the sentinel may send more tasks than the one that runs (``TASKMQ['prefetch']``):
    they wait here, most urgent first, and the poison pill hands them back unstarted. Before each
    task the worker writes the task's arrival number and its start time to ``shared`` (see
    :class:`Shared`): the sentinel times it, knows which task had started should this process die,
    and may take back what waits behind it.
    With several threads the sentinel sends a task only to a free thread: every task received starts.
    """
    # The sentinel decides when workers stop: ignore Ctrl-C and a SIGTERM sent to the whole
    # process group (a terminal, systemd), so a running task can finish during a graceful stop.
    # A hard stop or a timeout uses SIGKILL.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(CANCEL_SIGNAL, signal.SIG_IGN)  # until a worker with one thread listens for it (serve)
    from ..signals import post_spawn

    post_spawn.send(sender=run, proc_name=f"worker-{index}")
    conn.send_bytes(READY)
    if threads == 1:
        OneAtATime(index, conn, settings, shared).serve()
    else:
        Pool(index, conn, settings, threads).serve()
    # The process ends with os._exit: atexit handlers (Sentry's, the OpenTelemetry SDK's flush) do not run.
    reporting.close()
    if settings.opentelemetry:
        from ..observability import tracing

        tracing.flush()


class OneAtATime:
    """One thread: run the received tasks one after the other, most urgent first."""

    def __init__(self, index: int, conn: Connection, settings: Settings, shared: Shared | None) -> None:
        self.index = index
        self.conn = conn
        self.settings = settings
        self.shared = shared
        self.waiting: list[tuple[int, int, ex.TaskMessage]] = []  # (-priority, arrival, task): a heap
        self.arrivals = 0
        self.stopping = False
        self.retiring = False
        self.broker: Broker | None = None  # for the outcomes this worker records itself, made on first use
        self.alone = False  # the task at hand met an idle cluster (the sentinel said so: ALONE)
        self.interrupts = Interrupts()  # the task at hand, for a cancellation (see _on_cancel)
        self.arrival = 0  # the arrival number of the task at hand; 0 between tasks
        self.job_id = ""

    def _take(self, frame: bytes) -> None:
        if frame == STOP:
            self.stopping = True
        elif is_tasks_frame(frame):
            self.alone = frame[:1] == ALONE and not self.waiting
            for blob in read_tasks_frame(frame):
                self.arrivals += 1
                message = load_task(blob)
                heapq.heappush(self.waiting, (-message.reservation.priority, self.arrivals, message))
        # A cancel frame: with one thread the sentinel kills at a timeout; never sent.

    def serve(self) -> None:
        conn = self.conn
        if threading.current_thread() is threading.main_thread():  # (always, in a worker process)
            signal.signal(CANCEL_SIGNAL, self._on_cancel)
        while True:
            try:
                if not self.waiting and not self.stopping:
                    self._take(conn.recv_bytes())
                # Between tasks, read what else came: an urgent task, the poison pill.
                while readable(conn):
                    self._take(conn.recv_bytes())
            except (EOFError, OSError):
                return
            if self.stopping:
                if self.waiting:
                    conn.send_bytes(unstarted_frame(m.reservation.job_id for _, _, m in self.waiting))
                return
            if not self.waiting:
                continue
            _, arrival, message = heapq.heappop(self.waiting)
            if not self._start(arrival):
                continue  # the sentinel took it back: it runs elsewhere
            outcome = ex.seal(self._execute(message, arrival), self.settings)
            if outcome.status != ex.SUCCESS:  # (a broken connection fails the task that meets it)
                drop_failed_connections()
            # The cluster was idle around this task (the sentinel held nothing else when it sent it)
            # and this worker still is (nothing waits here, nothing new in the pipe): record a plain
            # success here and now, two process hops sooner than through the sentinel and the
            # monitor. Busy, the monitor records outcomes in batches, one commit for many, and this
            # worker goes on with the next task.
            recorded = self.alone and not self.waiting and not readable(conn) and self._record(outcome)
            self.alone = False
            conn.send_bytes(recorded_frame(message.reservation.job_id) if recorded else outcome_frame(outcome))
            reporting.deliver()  # a failure's report, now that its outcome has left
            if not self.retiring and _above_max_rss(self.index, self.settings):
                self.retiring = True
                conn.send_bytes(RETIRING)

    def _execute(self, message: ex.TaskMessage, arrival: int) -> ex.Outcome:
        """Run the task; a cancellation's interruption (see :meth:`_on_cancel`) makes it CANCELLED."""
        entry = Running(message.reservation.job_id, threading.get_ident())
        self.job_id, self.arrival = entry.job_id, arrival
        try:
            with self.interrupts.running(entry):
                outcome = ex.execute(message)
        except JobCancelled as exc:  # landed outside the task's own code (execute's bookkeeping)
            outcome = ex.lost(message.reservation, message.envelope, ex.CANCELLED, exc)
        finally:
            self.arrival = 0
        if entry.interrupted:
            connections.close_all()  # the exception may have landed in the middle of a query
        return outcome

    def _on_cancel(self, signum, frame) -> None:
        """:data:`CANCEL_SIGNAL`: the sentinel asks the task at hand to stop (``Shared.cancel``), or
        interrupts it (``Shared.halt``, after ``cancel_grace``): see :meth:`.Interrupts.signalled`."""
        shared, arrival = self.shared, self.arrival
        if shared is None or shared.cancel is None or not arrival or shared.cancel[self.index] != arrival:
            return
        self.interrupts.signalled(self.job_id, halt=shared.halt[self.index] == arrival)

    def _record(self, outcome: ex.Outcome) -> bool:
        """Record ``outcome`` if it is a plain success (see :func:`recorder.plain_success`); False
        when it is not, or recording failed: the monitor then records it as any other."""
        from ..runtime import recorder

        if not recorder.plain_success(outcome):
            return False
        # A task that left a transaction open (autocommit off, say) would make this ack part of it.
        # (Read without connecting: a connection that is not open holds no transaction.)
        if any(c.in_atomic_block or (c.connection is not None and not c.autocommit)
               for c in connections.all(initialized_only=True)):
            return False
        try:
            if self.broker is None:
                from ..brokers import get_broker

                self.broker = get_broker()
            # A lease lost meanwhile is logged and skipped by record(), as in the monitor.
            with _brief_lock_wait(self.settings.database):
                recorder.record([outcome], self.broker, self.settings, outside_transaction=True, bookkeeping=True)
        except Exception:
            logger.debug("worker %s: recording job %s failed; the monitor records it", self.index,
                         outcome.reservation.job_id, exc_info=True)
            if self.broker is not None:
                self.broker.close()  # maybe broken: the next task's queries reconnect
            return False
        return True

    def _start(self, arrival: int) -> bool:
        """Say that the task that arrived ``arrival``-th starts now; False if it was taken back."""
        shared = self.shared
        if shared is None:
            return True
        if shared.lock is None:
            shared.since[self.index] = time.monotonic()
            shared.current[self.index] = arrival
            return True
        with shared.lock:
            if arrival <= shared.revoked[self.index]:
                return False
            shared.since[self.index] = time.monotonic()
            shared.current[self.index] = arrival
            return True


def drop_failed_connections() -> None:
    """Close this thread's database connections on which an error occurred (after a task that failed).

    A worker keeps its connections from task to task; one that a failover or a restart ended fails
    every later query, and one led to a server that is no longer the primary refuses every write
    while it still answers ``SELECT 1`` (so Django's own ``close_if_unusable_or_obsolete`` keeps it).
    Closed, the next query reconnects. A connection inside a transaction the task left open is left
    to the task's own code.
    """
    for conn in connections.all(initialized_only=True):
        if conn.errors_occurred and not conn.in_atomic_block:
            try:
                conn.close()
            except Exception:  # broken already: nothing more to drop
                logger.debug("closing the connection of %r failed", conn.alias, exc_info=True)


@contextlib.contextmanager
def _brief_lock_wait(alias: str) -> Iterator[None]:
    """Wait at most :data:`LOCK_WAIT` for the write lock inside the block (SQLite: see
    :meth:`.Dialect.lock_wait`).

    Another writer (a large ``enqueue_many``, a prune) can hold SQLite's one write lock for a
    while; the monitor may wait for it, an idle worker's own ack should not: it gives the outcome to
    the monitor instead, and stays free for the next task (and clear of its task's timeout).
    """
    with database.lock_wait(alias, LOCK_WAIT):
        yield


def _above_max_rss(index: int, settings: Settings) -> bool:
    if settings.max_rss and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > settings.max_rss:
        logger.info("worker %s (pid %s) above max_rss, recycling", index, os.getpid())
        return True
    return False


class Pool:
    """``threads`` threads of one worker process, each running one task at a time.

    The main thread reads the pipe: tasks go to the threads through a queue, a cancel frame
    interrupts one task (see :mod:`.interrupts`; one still waiting for a thread never starts), the
    poison pill lets the running tasks finish and ends the process. Each thread has its own database
    connection (Django's connections are per thread) and closes it as a request would: after each
    task when it is broken or past ``CONN_MAX_AGE``, and always when the thread ends or a task of it
    was interrupted.
    """

    def __init__(self, index: int, conn: Connection, settings: Settings, threads: int) -> None:
        self.index = index
        self.conn = conn
        self.settings = settings
        self.work: queue.SimpleQueue[ex.TaskMessage | None] = queue.SimpleQueue()
        self.send_lock = threading.Lock()
        self.interrupts = Interrupts()
        self.retiring = False
        self.threads = [threading.Thread(target=self._serve_thread, name=f"taskmq-worker-{index}-{n}", daemon=True)
                        for n in range(threads)]

    def serve(self) -> None:
        guard_thread_starts()
        for thread in self.threads:
            thread.start()
        while True:
            try:
                blob = self.conn.recv_bytes()
            except (EOFError, OSError):
                return  # the sentinel is gone: the daemon threads end with this process
            if blob == STOP:
                break
            if blob.startswith(CANCEL):
                self.interrupts.interrupt(blob[len(CANCEL):].decode())
            elif blob.startswith(CANCEL_REQUEST):
                self.interrupts.request(blob[len(CANCEL_REQUEST):].decode())
            elif is_tasks_frame(blob):
                for task in read_tasks_frame(blob):
                    # Opened here, so a cancel frame right behind it finds it even before a thread
                    # has taken it (the sentinel times a task from its send).
                    message = load_task(task)
                    self.interrupts.expect(message.reservation.job_id)
                    self.work.put(message)
        for _ in self.threads:
            self.work.put(None)
        for thread in self.threads:
            thread.join()

    def _send(self, frame: bytes) -> None:
        with self.send_lock:
            self.conn.send_bytes(frame)

    def _serve_thread(self) -> None:
        try:
            while (message := self.work.get()) is not None:
                outcome = self._run(message)
                try:
                    self._send(outcome_frame(ex.seal(outcome, self.settings)))
                except (BrokenPipeError, OSError):
                    return
                reporting.deliver()
                if not self.retiring and _above_max_rss(self.index, self.settings):
                    self.retiring = True
                    self._send(RETIRING)
        finally:
            connections.close_all()

    def _run(self, message: ex.TaskMessage) -> ex.Outcome:
        """Execute one task in this thread; an interruption at its timeout makes it TIMEOUT."""
        close_old_connections()
        entry = Running(message.reservation.job_id, threading.get_ident())
        outcome = None
        try:
            with self.interrupts.running(entry):
                outcome = ex.execute(message)
            _settle()
        except (TaskTimeout, JobCancelled):
            pass  # the interruption landed after the task's own code: entry.interrupted says so
        except BaseException as exc:  # what execute lets through (GeneratorExit, ...): this task's failure only
            outcome = ex.lost(message.reservation, message.envelope, ex.FAILURE, exc, traceback=format_exc())
        if not entry.interrupted and outcome is not None:
            if outcome.status != ex.SUCCESS:
                drop_failed_connections()
            close_old_connections()
            return outcome
        # The exception may have landed in the middle of a query: this thread's connection is
        # in an unknown state.
        connections.close_all()
        if outcome is not None and outcome.status == ex.SUCCESS:
            return outcome  # it finished as the interruption was sent
        timeout = message.envelope.options.get("timeout")
        status, error = (ex.CANCELLED, JobCancelled("cancelled, and interrupted after cancel_grace")) \
            if entry.cancel_requested else (ex.TIMEOUT, TaskTimeout(f"ran past its timeout of {timeout}s"))
        return ex.lost(message.reservation, message.envelope, status, error,
                       started_at=outcome.started_at if outcome is not None else None,
                       traceback=outcome.traceback if outcome is not None else "")


def _settle() -> None:
    """A call for a pending asynchronous exception to land on, inside the caller's ``try``."""
