"""Waking an idle pusher when work arrives, instead of sleeping a whole poll interval.

PostgreSQL: ``LISTEN`` on the channel a trigger on the job table notifies after each insert.
SQLite: ``PRAGMA data_version`` changes whenever another connection commits; reading it is a
cheap in-process call, so the pusher checks it every few milliseconds.
Either way the poll interval stays the fallback.
"""

from __future__ import annotations

import logging
import time
from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)

CHANNEL = "taskmq_job"
SQLITE_CHECK = 0.005  # seconds between data_version reads
PIPE_CHECK = 0.05  # seconds between looks at the sentinel's pipe while listening


class Waker:
    """Sleep until the database may hold new work, the sentinel speaks, or ``timeout`` passes."""

    def __init__(self, connection) -> None:
        self.connection = connection
        self._listening = False
        self._version = None

    def wait(self, timeout: float, pipe: Connection | None = None) -> None:
        try:
            if self.connection.vendor == "postgresql":
                self._wait_notify(timeout, pipe)
            elif self.connection.vendor == "sqlite":
                self._wait_version(timeout, pipe)
            else:
                _sleep(timeout, pipe)
        except Exception:
            # A lost connection must not kill the pusher: fall back to sleeping, listen again later.
            logger.warning("wake-up channel failed; polling", exc_info=True)
            self._listening = False
            _sleep(timeout, pipe)

    def _wait_version(self, timeout: float, pipe: Connection | None) -> None:
        deadline = time.monotonic() + timeout
        with self.connection.cursor() as cursor:
            if self._version is None:
                cursor.execute("PRAGMA data_version")
                self._version = cursor.fetchone()[0]
            while True:
                cursor.execute("PRAGMA data_version")
                version = cursor.fetchone()[0]
                if version != self._version:
                    self._version = version
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (pipe is not None and pipe.poll(0)):
                    return
                time.sleep(min(SQLITE_CHECK, remaining))

    def _wait_notify(self, timeout: float, pipe: Connection | None) -> None:
        if not self._listening or self.connection.connection is None:
            self.connection.ensure_connection()
            with self.connection.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")
            self._listening = True
        raw = self.connection.connection
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            for _ in raw.notifies(timeout=min(PIPE_CHECK, remaining), stop_after=1):
                # Drain the rest without waiting: one wake-up is enough for many inserts.
                for _ in raw.notifies(timeout=0):
                    pass
                return
            if pipe is not None and pipe.poll(0):
                return


def _sleep(timeout: float, pipe: Connection | None) -> None:
    if pipe is not None:
        pipe.poll(timeout)
    else:
        time.sleep(timeout)
