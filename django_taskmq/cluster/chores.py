"""The sentinel's database work, in threads of its own: the guard loop never waits on a statement.

The guard loop (:mod:`.sentinel`) decides what is due and posts it here with what it needs, taken
in its own thread (the job ids it holds, what the heartbeat says): :meth:`Chores.post`. A thread
runs what was posted, one operation at a time, in order; what the loop must act on (cancellation
requests found, tasks that could not yield, a burst that is done) comes back and is handed to the
loop in its next turn (:meth:`Chores.settle`), which wakes for it (:attr:`Chores.wake`, a pipe the
loop's wait watches). So a locked table, a failover or a slow import delays only the chore that
meets it; running tasks are still stopped at their timeouts.

A thread rather than a process: the chores need the sentinel's state at each post, which a thread
shares for the price of a reference (a process would need it pickled through a pipe at every
timer), and a thread costs no memory of its own; a statement that hangs is bounded by the
connection's timeouts (see :mod:`.outage`), not by killing the thread.

A sentinel that is never started (the unit tests drive its turns) has no thread: what is posted
runs at once, in the caller's thread, and its result still reaches ``then`` at the next
:meth:`Chores.settle`.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import connections

from .poller import pause

logger = logging.getLogger(__name__)


class _Chore(NamedTuple):
    what: str
    operation: Callable[[], Any]
    then: Callable[[Any], None] | None
    kind: str | None


_STOP = None  # posted to end the thread


class Chores:
    """One thread named ``name`` running posted operations in order (see the module's docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._todo: queue.SimpleQueue[_Chore | None] = queue.SimpleQueue()
        self._done: collections.deque[tuple[Callable[[Any], None], Any]] = collections.deque()
        self._kinds: set[str] = set()  # the kinds posted and not finished (one of a kind at a time)
        self._posted = 0  # operations posted (the loop's count) ...
        self._finished = 0  # ... and finished (the thread's)
        self.running: tuple[str, float] | None = None  # what runs now, since when (monotonic)
        self.wake, self._wake_writer = os.pipe()  # a byte: something came back for the loop
        os.set_blocking(self.wake, False)
        os.set_blocking(self._wake_writer, False)
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (a daemon: the cluster's exit never waits for a statement that hangs)."""
        self.thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self.thread.start()

    # -- the guard loop's side --------------------------------------------------------------------
    def post(self, what: str, operation: Callable[[], Any], then: Callable[[Any], None] | None = None,
             kind: str | None = None) -> bool:
        """Run ``operation`` in the thread after what was posted before; hand its result to ``then``
        in the loop's thread (:meth:`settle`). With a ``kind``, nothing is posted (False) while an
        operation of that kind is still to finish."""
        if kind is not None:
            if kind in self._kinds:
                return False
            self._kinds.add(kind)
        self._posted += 1
        if self.thread is None:
            self._run(_Chore(what, operation, then, kind))
        else:
            self._todo.put(_Chore(what, operation, then, kind))
        return True

    def pending(self, kind: str) -> bool:
        """An operation of ``kind`` was posted and has not finished."""
        return kind in self._kinds

    @property
    def idle(self) -> bool:
        """Everything posted has finished (its result may still wait for :meth:`settle`)."""
        return self._finished == self._posted

    def busy_for(self) -> float:
        """Seconds the operation running now has taken so far (0 when none runs)."""
        running = self.running
        return 0.0 if running is None else time.monotonic() - running[1]

    def settle(self) -> None:
        """Hand what came back to its ``then`` (in the loop's thread: each turn)."""
        if not self._done:
            return
        try:
            os.read(self.wake, 4096)
        except BlockingIOError:
            pass
        while self._done:
            then, result = self._done.popleft()
            then(result)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for everything posted to finish, then :meth:`settle`;
        return whether all finished."""
        deadline = time.monotonic() + timeout
        while not self.idle and time.monotonic() < deadline:
            pause(0.01)
        self.settle()
        return self.idle

    def stop(self, timeout: float) -> bool:
        """End the thread once what was posted has run, waiting up to ``timeout`` seconds; return
        whether it ended (one that hangs in a statement is left: a daemon, it dies with the process)."""
        if self.thread is None:
            return True
        self._todo.put(_STOP)
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def describe(self) -> str:
        """What the thread does now, for a log line: ``'lease renewal' for 12.0 s`` or ``idle``."""
        running = self.running
        return "idle" if running is None else f"{running[0]!r} for {time.monotonic() - running[1]:.1f} s"

    # -- the thread's side ------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while (chore := self._todo.get()) is not None:
                self._run(chore)
        finally:
            connections.close_all()  # this thread's own connections

    def _run(self, chore: _Chore) -> None:
        self.running = (chore.what, time.monotonic())
        result: Any = None
        try:
            result = chore.operation()
        except Exception:  # the operations catch database errors; anything else is a bug: log it, go on
            logger.exception("%s: %s failed", self.name, chore.what)
        finally:
            self.running = None
            if chore.kind is not None:
                self._kinds.discard(chore.kind)
            if chore.then is not None:
                self._done.append((chore.then, result))
            self._finished += 1
        if chore.then is not None:
            try:
                os.write(self._wake_writer, b"!")
            except BlockingIOError:  # the pipe is full: the loop will wake anyway
                pass
