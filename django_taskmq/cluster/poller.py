"""The sentinel's wait on its pipes and on its children's deaths, for a set that rarely changes.

:func:`multiprocessing.connection.wait` builds a selector and registers every handle at each
call: about 20 µs for the eight handles of a two-worker cluster here, against 1 µs for one
``poll`` object kept between calls. The guard loop waits once per turn, a turn per outcome or so
while busy, so the difference is paid per job. :func:`readable` is the same saving for a look at one
pipe (``Connection.poll(0)``).
"""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Union

Handle = Union[Connection, int]  # a pipe end, or a process sentinel (a file descriptor)


class Poller:
    """``wait(handles, timeout)`` as :func:`multiprocessing.connection.wait` does on Linux: the handles
    ready to read (data, end of file or an error), after at most ``timeout`` seconds (None: no limit).

    The ``poll`` object is updated only when the set of file descriptors changes. A handle closed
    between two calls must not be passed again (as for ``wait``, whose ``fileno()`` would raise).
    """

    def __init__(self) -> None:
        self._poll = select.poll()
        self._registered: dict[int, int] = {}  # fd -> event mask

    def wait(self, handles: Sequence[Handle], timeout: float | None = None,
             writable: int | None = None) -> list[Handle]:
        """Also return when the file descriptor ``writable`` can be written (it is not listed)."""
        by_fd = {(h if isinstance(h, int) else h.fileno()): h for h in handles}
        events = dict.fromkeys(by_fd, select.POLLIN)
        if writable is not None:
            events[writable] = events.get(writable, 0) | select.POLLOUT
        if events != self._registered:
            for fd in self._registered.keys() - events.keys():
                self._poll.unregister(fd)
            for fd, mask in events.items():
                if self._registered.get(fd) != mask:
                    self._poll.register(fd, mask)  # registering again modifies
            self._registered = events
        return [by_fd[fd] for fd, _ in self._poll.poll(poll_ms(timeout)) if fd in by_fd]


def poll_ms(timeout: float | None) -> int | None:
    """``timeout`` seconds as ``poll()`` takes them, in milliseconds (None: no limit); rounded up,
    as the selectors module does, so a short timeout does not become a busy loop of 0 ms polls."""
    return None if timeout is None else max(0, math.ceil(timeout * 1000))


def readable(pipe: Connection) -> bool:
    """True when reading ``pipe`` would not block (a frame, or its end); False for a closed pipe.

    One ``poll`` call: ``Connection.poll(0)`` builds and registers a selector each time, about
    8 µs against 1; the sentinel asks after every frame a worker sends, a worker between tasks.
    """
    try:
        fd = pipe.fileno()
    except OSError:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def pause(seconds: float) -> None:
    """Sleep ``seconds`` from now, in ``poll(2)`` (the cluster's processes sleep only this way).

    Not :func:`time.sleep`: since Python 3.11 it sleeps until an absolute time of the monotonic clock
    (``clock_nanosleep`` with ``TIMER_ABSTIME``), which libfaketime's shifted clocks (the clock-skew
    test's clusters, ``DONT_FAKE_MONOTONIC``) now and then refuse with EINVAL; a relative ``poll``,
    as in every wait of the guard loop, is never refused.
    """
    if seconds > 0:
        select.poll().poll(math.ceil(seconds * 1000))
