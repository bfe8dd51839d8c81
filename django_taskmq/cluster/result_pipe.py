"""The result channel, sentinel -> monitor: a pipe the sentinel writes without ever blocking.

A ``multiprocessing`` queue does the same job, but each ``put`` wakes the queue's feeder thread,
which pickles and writes in the sentinel's process: a thread switch and a lock per put, about
25 µs of the sentinel's CPU each, and the guard loop puts once per turn while busy (a turn per
outcome or two). Here the sentinel frames and writes the bytes itself, to a non-blocking pipe;
what the pipe cannot take now (the monitor is behind: a slow commit, the database away) waits in
memory, and the sentinel writes it when the pipe is writable again (it polls for that meanwhile).

Frames are a 4-byte length, then a pickle. Only the monitor reads; it never unpickles more than
the sentinel wrote.
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import time
from typing import Any

from .poller import poll_ms

HEADER = 4
READ_SIZE = 1 << 16


class ResultPipe:
    """One pipe: :meth:`put` and :meth:`flush` for the sentinel, :meth:`get` for the monitor.

    Created before the monitor is forked; afterwards each process closes the end it does not use
    (:meth:`close_reader` in the sentinel, :meth:`close_writer` in the monitor).
    """

    def __init__(self) -> None:
        self.reader, self.writer = os.pipe()
        os.set_blocking(self.writer, False)
        self._pending = bytearray()  # framed bytes the pipe could not take yet
        self._received = bytearray()  # bytes read, not yet a whole frame
        self._broken = False
        self._readable: select.poll | None = None

    # -- the sentinel's end ---------------------------------------------------------------------
    def put(self, obj: Any) -> None:
        """Send ``obj`` (pickled): written now as far as the pipe takes it, the rest by :meth:`flush`."""
        data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        self._pending += len(data).to_bytes(HEADER, "big")
        self._pending += data
        self.flush()

    def flush(self) -> bool:
        """Write what is pending without blocking; return True when nothing is left.

        Once the monitor is gone (its end closed) the pending bytes are dropped: nobody can read
        them, and their jobs' leases bring the jobs back.
        """
        while self._pending and not self._broken:
            try:
                written = os.write(self.writer, self._pending)
            except BlockingIOError:
                return False
            except OSError:  # EPIPE: the monitor died
                self._broken = True
                break
            del self._pending[:written]
        if self._broken:
            self._pending.clear()
        return True

    @property
    def pending(self) -> int:
        """How many bytes wait for the pipe to take them."""
        return len(self._pending)

    def drain(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until everything pending is written; True when it was."""
        deadline = time.monotonic() + timeout
        poll = select.poll()
        poll.register(self.writer, select.POLLOUT)
        while not self.flush():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            poll.poll(poll_ms(remaining))
        return True

    def close_reader(self) -> None:
        self.reader = _close(self.reader)

    def close_writer(self) -> None:
        self.writer = _close(self.writer)

    def close(self) -> None:
        self.close_reader()
        self.close_writer()

    # -- the monitor's end ----------------------------------------------------------------------
    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Return the next object sent, as ``queue.Queue.get`` does: waiting up to ``timeout``
        seconds (forever with None; not at all unless ``block``), else raise ``queue.Empty``.

        ``EOFError`` once the sentinel's end is closed and everything it wrote has been read.
        """
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            obj = self._frame()
            if obj is not _NOTHING:
                return obj
            if self._readable is None:
                self._readable = select.poll()
                self._readable.register(self.reader, select.POLLIN)
            wait = 0 if not block else poll_ms(None if deadline is None else deadline - time.monotonic())
            if not self._readable.poll(wait):
                raise queue.Empty
            data = os.read(self.reader, READ_SIZE)
            if not data:
                raise EOFError("the sentinel's end of the result pipe is closed")
            self._received += data

    def _frame(self) -> Any:
        """Take one whole frame from what was read and unpickle it; ``_NOTHING`` when there is none."""
        received = self._received
        if len(received) < HEADER:
            return _NOTHING
        size = int.from_bytes(received[:HEADER], "big")
        if len(received) < HEADER + size:
            return _NOTHING
        obj = pickle.loads(received[HEADER:HEADER + size])
        del received[:HEADER + size]
        return obj


_NOTHING = object()


def _close(fd: int) -> int:
    """Close ``fd`` unless it was closed already (-1); return -1. A second close could hit a
    descriptor the process has opened since under the same number."""
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
    return -1
