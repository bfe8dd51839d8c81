"""Waking an idle pusher when work arrives, instead of sleeping a whole poll interval.

:class:`Waker` is what every engine shares: a wait that never kills the pusher (a failing channel
logs a counted line and the wait falls back on sleeping) and, where an engine has no channel, plain
sleeping until the poll interval or the sentinel ends it. How an engine is woken is in its module
(``postgresql.py``: ``LISTEN``; ``sqlite.py``: ``PRAGMA data_version`` and inotify); its dialect
builds the waker (:meth:`.Dialect.waker`).
"""

from __future__ import annotations

import logging
import time
from multiprocessing.connection import Connection

from ..outage import FailureLog

logger = logging.getLogger(__name__)


class Waker:
    """Sleep until the database may hold new work, the sentinel speaks, or ``timeout`` passes.

    This base polls: it sleeps. An engine's subclass implements :meth:`_wait`."""

    def __init__(self, connection) -> None:
        self.connection = connection
        # A channel that keeps failing (the database is away, psycopg2) logs a line every few
        # seconds with a count, not a traceback at each wait.
        self.failures = FailureLog("pusher wake-up channel", logger)
        self.woken = False

    def wait(self, timeout: float, pipe: Connection | None = None) -> None:
        """Sleep; afterwards ``woken`` tells whether the database signalled a change."""
        self.woken = False
        try:
            self._wait(timeout, pipe)
        except Exception as exc:
            # A lost connection must not kill the pusher: fall back to sleeping, listen again later.
            self.failures.failed("wait (polling instead)", exc)
            self._broken()
            sleep(timeout, pipe)
        else:
            self.failures.succeeded()

    def hears_every_insert(self) -> bool:
        """True when every job committed from now on will end the next wait at once, however long
        it is (the engine announces inserts); an idle pusher then need not look for work before it
        waits. This base sleeps: False."""
        return False

    def _wait(self, timeout: float, pipe: Connection | None) -> None:
        sleep(timeout, pipe)

    def _broken(self) -> None:
        """The channel failed: drop what the next wait must set up again."""


def sleep(timeout: float, pipe: Connection | None) -> None:
    """Sleep ``timeout`` seconds, or until ``pipe`` is readable (the sentinel speaks)."""
    if pipe is not None:
        pipe.poll(timeout)
    else:
        time.sleep(timeout)
