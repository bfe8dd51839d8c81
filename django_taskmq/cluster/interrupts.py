"""Stopping one task in its worker, the worker's half: interrupting the task a thread runs (an
asynchronous exception, or a signal with one thread) without taking its siblings down. When a task
must stop (its timeout, a cancel and its grace, the stop-halt) is the sentinel's half, :mod:`.stopping`.

A task past its timeout must stop without taking its sibling tasks down, so the worker cannot be
killed for it. What Python allows instead:

* a plain function gets :class:`~django_taskmq.exceptions.TaskTimeout` raised in its thread (an
  asynchronous exception, ``PyThreadState_SetAsyncExc``). It lands at the next Python bytecode the
  thread runs: a thread blocked in C code (``time.sleep``, a socket read without a timeout, a C
  extension) only sees it when that call returns;
* a coroutine function (it runs on an event loop of its own, see
  :func:`django_taskmq.runtime.execution.execute`) has its asyncio task cancelled, which interrupts any
  ``await``. From the moment its thread hands the coroutine over, nothing is raised in that thread:
  an exception landing while it starts the event loop's thread would leave the coroutine running
  there, orphaned. One interrupted before its loop runs is cancelled as it starts.

On Python 3.11 an asynchronous exception aimed at a thread that is starting a thread can land in the
new thread instead (until the new thread runs, CPython gives it its parent's id): the new thread dies
before it says it started and the task's thread waits for it for ever. So a worker with threads wraps
``threading.Thread.start`` (:func:`guard_thread_starts`): an interruption that comes while a task
starts a thread is raised in the task's thread as ``start()`` returns.

A task that does not stop within the sentinel's grace period is *stuck*: the sentinel sends that
worker no more work, lets its other tasks finish within their own timeouts, then kills it.

A cancellation (:func:`django_taskmq.cancel`) first only *requests* the stop (:meth:`Interrupts.request`):
the task sees ``current_job().cancelled``, a coroutine has its asyncio task cancelled at once; the
interruption, if it comes (after ``cancel_grace``), raises :class:`~django_taskmq.JobCancelled`
instead of :class:`~django_taskmq.exceptions.TaskTimeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from ..runtime import context
from ..exceptions import JobCancelled, TaskTimeout


@dataclass
class Running:
    """One task a thread of this worker runs now."""

    job_id: str
    thread: int  # threading.get_ident() of the thread running it
    loop: asyncio.AbstractEventLoop | None = None  # for a coroutine: its loop and task
    task: asyncio.Task | None = None
    interrupted: bool = False
    cancel_requested: bool = False  # django_taskmq.cancel() asked for it to stop (current_job().cancelled)
    coroutine: bool = False  # its coroutine went to an event loop: interrupted by cancelling it there
    starting_thread: bool = False  # in threading.Thread.start (Python 3.11: see guard_thread_starts)
    deferred: bool = False  # interrupted in Thread.start: raised as start() returns

    def error(self) -> type[BaseException]:
        """What an interruption raises in its thread."""
        return JobCancelled if self.cancel_requested else TaskTimeout


class Interrupts:
    """The tasks this worker's threads run now, and the means to interrupt each of them."""

    def __init__(self) -> None:
        # Reentrant: with one thread, a signal handler (see worker.OneAtATime) may call in while the
        # task's own thread holds it.
        self._lock = threading.RLock()
        self._running: dict[str, Running] = {}

    def expect(self, job_id: str) -> None:
        """The task of ``job_id`` was received and waits for a free thread: an interruption or a
        cancellation that arrives before it starts is kept for it (see :meth:`running`)."""
        with self._lock:
            self._running[job_id] = Running(job_id, thread=0)

    @contextlib.contextmanager
    def running(self, entry: Running) -> Iterator[None]:
        """Register ``entry`` (a task of the calling thread) for the duration of the block.

        What was said of it while it waited (see :meth:`expect`) applies now: a cancellation is
        requested, an interruption raises here, before the task's code runs.
        """
        with self._lock:
            waited = self._running.get(entry.job_id)
            if waited is not None and not waited.thread:
                entry.interrupted, entry.cancel_requested = waited.interrupted, waited.cancel_requested
            self._running[entry.job_id] = entry
        # The task's current job (runtime.context): what its coroutine, its cancellation checks and
        # guard_thread_starts ask for.
        token = context.enter(watch=_Watch(self, entry), cancel_probe=lambda: entry.cancel_requested,
                              interruptible=(self, entry))
        try:
            if entry.interrupted:
                raise entry.error()()
            yield
        finally:
            with self._lock:
                self._running.pop(entry.job_id, None)
            context.leave(token)

    def _handing_over(self, entry: Running) -> None:
        with self._lock:
            entry.coroutine = True

    def _coroutine(self, entry: Running, loop: asyncio.AbstractEventLoop, task: asyncio.Task) -> None:
        with self._lock:
            entry.loop, entry.task = loop, task
            # Requested, or interrupted, before the coroutine started.
            if entry.cancel_requested or entry.interrupted:
                _cancel(entry)

    @contextlib.contextmanager
    def starting_thread(self, entry: Running) -> Iterator[None]:
        """The task of ``entry`` starts a thread in the block: an interruption meanwhile is
        raised as the block ends, not in the thread being started."""
        with self._lock:
            entry.starting_thread = True
        try:
            yield
        finally:
            with self._lock:
                entry.starting_thread = False
                deferred, entry.deferred = entry.deferred, False
            if deferred:
                raise entry.error()()

    def request(self, job_id: str) -> bool:
        """Ask the task of ``job_id`` to stop (a cancellation): its ``current_job().cancelled``
        becomes True and a coroutine is cancelled at once. False when it neither runs nor waits
        for a thread."""
        with self._lock:
            entry = self._running.get(job_id)
            if entry is None:
                return False
            entry.cancel_requested = True
            _cancel(entry)
            return True

    def holds(self, job_id: str) -> Running | None:
        """The entry of ``job_id`` while a thread runs it."""
        with self._lock:
            return self._running.get(job_id)

    def signalled(self, job_id: str, halt: bool) -> None:
        """A worker with one thread got the sentinel's cancel signal about ``job_id``, the task at
        hand (see ``OneAtATime._on_cancel`` in :mod:`.worker`): ask it to stop or, with ``halt``
        (after ``cancel_grace``), interrupt it. The interruption raises
        :class:`~django_taskmq.JobCancelled` right here, in the signal handler, so in the task's code
        (a ``time.sleep`` or a socket wait returns early for it); a coroutine is cancelled again
        instead. A signal about a task that has ended meanwhile changes nothing."""
        entry = self.holds(job_id)
        if entry is None:
            return
        if not halt:
            self.request(job_id)
        elif entry.coroutine:  # cancelled in its event loop, or as it starts there
            self.interrupt(job_id)
        elif not entry.interrupted:
            entry.interrupted = True
            raise JobCancelled(f"job {job_id} was cancelled and did not stop within cancel_grace")

    def interrupt(self, job_id: str) -> bool:
        """Interrupt the task of ``job_id``; False when it neither runs nor waits for a thread (it
        has just ended)."""
        with self._lock:
            entry = self._running.get(job_id)
            if entry is None:
                return False
            entry.interrupted = True
            if not entry.thread:
                return True  # it has not started: it will not (see running)
            if entry.coroutine:
                _cancel(entry)  # (not started yet: cancelled as it starts, see _coroutine)
                return True
            if entry.starting_thread:
                entry.deferred = True
                return True
            # Under the lock: the thread cannot leave this task (and start another) meanwhile.
            return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(entry.thread),
                                                              ctypes.py_object(entry.error())) == 1


def _cancel(entry: Running) -> None:
    """Cancel the coroutine of ``entry`` in its event loop, if it has started and its loop runs."""
    if entry.loop is None or entry.task is None:
        return
    try:
        entry.loop.call_soon_threadsafe(entry.task.cancel)
    except RuntimeError:  # the loop has closed: the coroutine has ended, its thread makes its outcome
        pass


class _Watch:
    """The :class:`~django_taskmq.runtime.context.CoroutineWatch` of one task: what its coroutine tells
    :class:`Interrupts`."""

    def __init__(self, interrupts: Interrupts, entry: Running) -> None:
        self.interrupts, self.entry = interrupts, entry

    def handing_over(self) -> None:
        self.interrupts._handing_over(self.entry)

    def started(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task) -> None:
        self.interrupts._coroutine(self.entry, loop, task)


def guard_thread_starts() -> None:
    """On Python 3.11, make ``threading.Thread.start`` hold back an interruption of the task that
    calls it until the new thread runs (see the module's docstring). From Python 3.12 a thread has
    no id until it runs, and nothing is needed. Idempotent; threads started outside a task are not
    touched."""
    if sys.version_info >= (3, 12) or getattr(threading.Thread.start, "taskmq_guarded", False):
        return
    start = threading.Thread.start

    @functools.wraps(start)
    def guarded_start(thread: threading.Thread) -> None:
        current = context.get().interruptible
        if current is None or current[1].thread != threading.get_ident():
            return start(thread)
        interrupts, entry = current
        with interrupts.starting_thread(entry):
            return start(thread)

    guarded_start.taskmq_guarded = True  # type: ignore[attr-defined]
    threading.Thread.start = guarded_start  # type: ignore[method-assign, assignment]
