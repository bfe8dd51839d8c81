"""Waking an idle pusher when work arrives, instead of sleeping a whole poll interval.

PostgreSQL: ``LISTEN`` on the channel a trigger on the job table notifies after each insert, on the
broker's connection or on ``TASKMQ['listen_database']``'s (a direct one, beside a pooled broker
alias). Before the first wait a probe (:mod:`.notify_probe`) checks that notifications arrive
there; where they do not (a pooler in transaction mode drops them without an error), one warning,
and the pusher polls.
SQLite (same machine): on Linux, inotify reports writes to the database file and its WAL, so an
idle pusher sleeps in ``select`` and wakes the moment another process commits; elsewhere
``PRAGMA data_version`` (it changes whenever another connection commits) is read every few
milliseconds. Either way the poll interval stays the fallback.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import struct
import time
from multiprocessing.connection import Connection

from .notify_probe import PROBE_WAIT, probe
from .outage import FailureLog

logger = logging.getLogger(__name__)

CHANNEL = "taskmq_job"
SQLITE_CHECK = 0.01  # seconds between data_version reads where inotify is missing
# Seconds between looks for the commit of a write seen in the WAL: the writer flushes the WAL to
# disk first, about a millisecond here, sometimes tens.
AFTER_WRITE_LOOKS = (0.00025,) * 8 + (0.0005,) * 4 + (0.002,) * 3 + (0.01,) * 4 + (0.025,) * 3
OWN_WRITE_LOOKS = 8  # of those, after writes that came before the wait (the first 2 ms)


class Waker:
    """Sleep until the database may hold new work, the sentinel speaks, or ``timeout`` passes."""

    def __init__(self, connection, listener=None, broker_alias: str | None = None, listen: bool = True) -> None:
        self.connection = connection
        # PostgreSQL: the connection that LISTENs (the broker's unless TASKMQ['listen_database']),
        # and the alias the probe's NOTIFY goes through (the broker's).
        self.listener = connection if listener is None else listener
        self.broker_alias = broker_alias or connection.alias
        # PostgreSQL: what the probe found (None: not run yet); False without it when ``listen`` is.
        self.listens: bool | None = None if listen else False
        self._announced = False
        # A channel that keeps failing (the database is away, psycopg2) logs a line every few
        # seconds with a count, not a traceback at each wait.
        self.failures = FailureLog("pusher wake-up channel", logger)
        self._listening = False
        self._version = None
        self._watch: FileWatch | None = None
        self._notified = False
        self.woken = False

    def wait(self, timeout: float, pipe: Connection | None = None) -> None:
        """Sleep; afterwards ``woken`` tells whether the database signalled a change."""
        self.woken = False
        try:
            if self.connection.vendor == "postgresql":
                self._wait_notify(timeout, pipe)
            elif self.connection.vendor == "sqlite":
                self._wait_version(timeout, pipe)
            else:
                _sleep(timeout, pipe)
        except Exception as exc:
            # A lost connection must not kill the pusher: fall back to sleeping, listen again later.
            self.failures.failed("wait (polling instead)", exc)
            self._listening = False
            if self.listener is not self.connection:  # nobody else would notice it broke
                try:
                    self.listener.close()
                except Exception:
                    pass
            _sleep(timeout, pipe)
        else:
            self.failures.succeeded()

    def _wait_version(self, timeout: float, pipe: Connection | None) -> None:
        deadline = time.monotonic() + timeout
        self.connection.ensure_connection()
        # The raw sqlite3 connection: Django's cursor wrappers would cost more than the check.
        raw = self.connection.connection
        if self._version is None:
            self._version = raw.execute("PRAGMA data_version").fetchone()[0]
            self._watch = FileWatch.for_database(self.connection.settings_dict["NAME"])
        # Writes from before this wait are mostly the pusher's own (its last claim): a short round
        # of looks, in case a producer's commit was among them. Writes during the wait are other
        # processes': the whole round.
        looks, last = 0, 0
        if self._watch is not None and self._watch.written():
            last = OWN_WRITE_LOOKS
        while True:
            version = raw.execute("PRAGMA data_version").fetchone()[0]
            if version != self._version:
                self._version = version
                self.woken = True
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (pipe is not None and pipe.poll(0)):
                return
            if self._watch is None:
                time.sleep(min(SQLITE_CHECK, remaining))
                continue
            # After a write seen in the WAL, its commit shows in the shared memory index (which
            # inotify does not report) once the writer's flush is done: look again and again, more
            # and more slowly, about 0.1 s in all (a missed commit would wait for the next poll).
            # Every new write starts the looks over; none seen lately, sleep until one is.
            if looks < last:
                wait = min(AFTER_WRITE_LOOKS[looks], remaining)
                looks += 1
            else:
                wait = remaining
            if self._watch.wait(wait, pipe):
                looks, last = 0, len(AFTER_WRITE_LOOKS)

    def _wait_notify(self, timeout: float, pipe: Connection | None) -> None:
        if self.listens is None:
            # The probe may block for PROBE_WAIT; it gives way when the sentinel speaks (a stop),
            # and runs again at a later wait.
            found = self._probe(pipe)
            if found is None:
                _sleep(timeout, pipe)
                return
            self.listens = found
        if not self.listens:
            _sleep(timeout, pipe)
            return
        raw = self.listener.connection
        if not self._listening or raw is None or raw.closed:
            self.listener.ensure_connection()
            raw = self.listener.connection
            # Notifications that arrive while the pusher runs queries are dispatched to this
            # handler by psycopg; the select below only covers the idle time in between.
            raw.add_notify_handler(self._on_notify)
            with self.listener.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")
            self._listening = True
            if not self._announced:  # once LISTEN is in force: from this line on, an insert wakes the pusher
                self._announced = True
                logger.info("pusher: idle wake-ups by LISTEN on database %s", self._where())
        if self._notified:
            self._notified = False
            self.woken = True
            return
        readers = [raw.fileno()] + ([pipe.fileno()] if pipe is not None else [])
        ready, _, _ = select.select(readers, [], [], timeout)
        if raw.fileno() in ready:
            # Read what arrived and drain the libpq queue: one wake-up covers many inserts.
            raw.pgconn.consume_input()
            while raw.pgconn.notifies() is not None:
                self.woken = True
        self._notified = False

    def _on_notify(self, notification) -> None:
        self._notified = True

    def _where(self) -> str:
        where = repr(self.listener.alias)
        return f"TASKMQ['listen_database'] {where}" if self.listener is not self.connection else where

    def _probe(self, pipe: Connection | None) -> bool | None:
        """Check that notifications reach the listener; if not, say so (once) and poll for good.
        None: the sentinel spoke first."""
        found = probe(self.listener, self.broker_alias, pipe=pipe)
        if found is not False:
            return found
        where = self._where()
        advice = ("check that it reaches the broker's database directly, not through a pooler"
                  if self.listener is not self.connection else
                  "set TASKMQ['listen_database'] to an alias that reaches PostgreSQL directly")
        logger.warning("pusher: LISTEN on database %s received no notification within %g s (a connection pooler in "
                       "transaction mode drops them): an idle cluster looks for new work every TASKMQ['poll'] seconds "
                       "instead; %s", where, PROBE_WAIT, advice)
        return False


def _sleep(timeout: float, pipe: Connection | None) -> None:
    if pipe is not None:
        pipe.poll(timeout)
    else:
        time.sleep(timeout)


class FileWatch:
    """inotify on the directory of an SQLite database: wakes on writes to the file or its WAL."""

    IN_MODIFY = 0x2
    IN_CLOEXEC = 0o2000000
    IN_NONBLOCK = 0o4000

    def __init__(self, fd: int, names: set[bytes]) -> None:
        self.fd = fd
        self.names = names

    @classmethod
    def for_database(cls, path: str) -> FileWatch | None:
        """Return a watch for ``path``, or None where inotify is unavailable (not Linux, memory DB)."""
        if not path or path == ":memory:" or str(path).startswith("file:"):
            return None
        try:
            # The running program's own symbols, libc among them: find_library("c") would fork ldconfig.
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(cls.IN_CLOEXEC | cls.IN_NONBLOCK)
            if fd < 0:
                return None
            directory = os.path.dirname(os.path.abspath(path)).encode()
            if libc.inotify_add_watch(fd, directory, cls.IN_MODIFY) < 0:
                os.close(fd)
                return None
        except (OSError, AttributeError):
            return None
        base = os.path.basename(path).encode()
        return cls(fd, {base, base + b"-wal", base + b"-journal"})

    def wait(self, timeout: float, pipe: Connection | None) -> bool:
        """Block until the database file or its WAL is written, ``pipe`` is readable or ``timeout``
        passes; return True for a write. Writes to other files of the directory are ignored.
        """
        deadline = time.monotonic() + timeout
        readers = [self.fd] + ([pipe.fileno()] if pipe is not None else [])
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready, _, _ = select.select(readers, [], [], remaining)
            if self.fd not in ready:
                return False
            if self.written():
                return True

    def written(self) -> bool:
        """Drain the pending events (without waiting); return True if one concerns the database or its WAL."""
        written = False
        try:
            while data := os.read(self.fd, 65536):
                offset = 0
                while offset < len(data):
                    # struct inotify_event: wd, mask, cookie, len, then len bytes of name
                    _, _, _, length = struct.unpack_from("iIII", data, offset)
                    name = data[offset + 16:offset + 16 + length].rstrip(b"\0")
                    written = written or name in self.names
                    offset += 16 + length
        except BlockingIOError:
            pass
        return written
