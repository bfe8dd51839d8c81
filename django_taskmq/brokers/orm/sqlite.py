"""SQLite: what the ORM broker does differently on it, and how an idle pusher is woken.

One host: the clock is the host's, there are no row locks (a claim runs in one ``BEGIN IMMEDIATE``
transaction), an ``UPDATE ... RETURNING`` claims, and ``MAX(a, b)`` is the scalar maximum.

Waking (same machine): on Linux, inotify reports writes to the database file and its WAL, so an
idle pusher sleeps in ``select`` and wakes the moment another process commits; elsewhere
``PRAGMA data_version`` (it changes whenever another connection commits) is read every few
milliseconds. Either way the poll interval stays the fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import sqlite3
import struct
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from ..clock import HOST
from .dialect import Dialect, register
from .sql import JOB, KEY_FREE, QSTATE
from .wakeup import Waker

logger = logging.getLogger(__name__)

SYNC_NORMAL, SYNC_FULL = 1, 2  # PRAGMA synchronous levels
SQLITE_BUSY_TIMEOUT = 20.0  # seconds a cluster's connection waits for the write lock, at least
SQLITE_CHECK = 0.01  # seconds between data_version reads where inotify is missing
# Seconds between looks for the commit of a write seen in the WAL: the writer flushes the WAL to
# disk first, about a millisecond here, sometimes tens.
AFTER_WRITE_LOOKS = (0.00025,) * 8 + (0.0005,) * 4 + (0.002,) * 3 + (0.01,) * 4 + (0.025,) * 3
OWN_WRITE_LOOKS = 8  # of those, after writes that came before the wait (the first 2 ms)


# SQLite's planner counts a key's running rows through whichever index holds the running rows
# first, and then walks all of them for each keyed row the claim passes: with 300 jobs running and
# 20,000 held behind a key at its limit, 0.84 s a claim under the write lock. Named, the partial
# index of running keyed rows finds them by the key (docs/decisions.rst).
KEY_FREE_INDEXED = KEY_FREE.replace(f"FROM {JOB} r WHERE", f"FROM {JOB} r INDEXED BY taskmq_job_key_running WHERE", 1)
assert KEY_FREE_INDEXED != KEY_FREE


class SqliteDialect(Dialect):
    vendor = "sqlite"
    name = "SQLite"
    clock = HOST
    row_locks = False
    greatest = "MAX"
    defers_flush = True
    insert_ignore = ("INSERT OR IGNORE INTO", "")
    key_free = KEY_FREE_INDEXED
    finished_indexed = True

    def seconds_between(self, later: str, earlier: str) -> str:
        return f"((julianday({later}) - julianday({earlier})) * 86400.0)"  # C, not a Python function per row

    def created_by_connecting(self, connection: Any) -> bool:
        name = str(connection.settings_dict.get("NAME") or "")
        return not connection.is_in_memory_db() and not name.startswith("file:") and not os.path.exists(name)

    def write_lock(self, connection: Any, cursor: Any) -> None:
        # A transaction that reads and then writes can fail at once with "database is locked" when
        # another writer committed in between: a first statement that writes takes the lock, as
        # BEGIN IMMEDIATE would.
        if connection.settings_dict.get("OPTIONS", {}).get("transaction_mode") != "IMMEDIATE":
            cursor.execute(f"UPDATE {QSTATE} SET served = served WHERE 0 = 1")

    @contextlib.contextmanager
    def flush_deferred(self, connection: Any, state: dict[str, Any]) -> Iterator[None]:
        """Run the block with ``synchronous NORMAL`` if the database is in WAL mode and the
        connection flushes at every commit (FULL or EXTRA); put the setting back afterwards.

        Outside WAL mode NORMAL could corrupt the database on a power loss: nothing changes there.
        """
        connection.ensure_connection()
        raw = connection.connection
        # (raw sqlite3 connection, its synchronous level when claims may defer the flush, else None)
        sync = state.get("sync")
        if sync is None or sync[0] is not raw:
            wal = raw.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
            level = raw.execute("PRAGMA synchronous").fetchone()[0]
            sync = state["sync"] = (raw, level if wal and level >= SYNC_FULL else None)
        level = sync[1]
        if level is None:
            yield
            return
        # (A connection that could not be put back is closed: it must not go on without flushing its acks.)
        with sqlite_pragma(connection, "synchronous", SYNC_NORMAL, level):
            yield

    def lock_wait(self, connection: Any, seconds: float) -> contextlib.AbstractContextManager[None]:
        connection.ensure_connection()
        before = connection.connection.execute("PRAGMA busy_timeout").fetchone()[0]
        # (A connection that could not be put back is closed: it must not give up on the lock so soon.)
        return sqlite_pragma(connection, "busy_timeout", int(seconds * 1000), before)

    def waker(self, broker: Any, burst: bool = False) -> Waker:
        return DataVersionWaker(broker.connection)

    def insert_many(self, cursor: Any, table: str, columns: str, width: int, rows: list[list]) -> None:
        # sqlite3's own executemany loops in C over one prepared statement.
        qmarks = ", ".join(["?"] * width)
        cursor.cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({qmarks})", rows)

    def insert_one(self, connection: Any, table: str, columns: str, width: int, values: list) -> bool:
        # sqlite3's own execute with its placeholders: Django's cursor would rewrite the %s of
        # this same statement with a regex on every call. Errors are still Django's.
        sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['?'] * width)})"
        with connection.cursor() as cursor, connection.wrap_database_errors:
            sqlite3.Cursor.execute(cursor.cursor, sql, values)
        return True

    def prepare(self, options: dict[str, Any], dead_connection_timeout: float | None = None) -> None:
        # Every transaction of the cluster writes or must see the latest commit: taking the lock at
        # BEGIN makes a busy writer wait for the busy timeout instead of failing at once with
        # "database is locked" when it would upgrade a read lock.
        options["transaction_mode"] = "IMMEDIATE"
        options["timeout"] = max(float(options.get("timeout", 5.0)), SQLITE_BUSY_TIMEOUT)

    def bound_statements(self, connection: Any, seconds: float) -> bool:
        # No socket: the only long wait is for another writer's lock, which the busy timeout bounds.
        raw = connection.connection
        before = raw.execute("PRAGMA busy_timeout").fetchone()[0]
        raw.execute(f"PRAGMA busy_timeout = {min(before, int(seconds * 1000))}")
        return True


register(SqliteDialect())


@contextlib.contextmanager
def sqlite_pragma(conn, name: str, value: int, restore: int) -> Iterator[None]:
    """Run the block with ``PRAGMA name = value`` on Django's SQLite connection ``conn`` (connected),
    then set it to ``restore`` again. A connection on which that fails is closed, so that it does
    not keep the block's setting."""
    raw = conn.connection
    raw.execute(f"PRAGMA {name} = {value}")
    try:
        yield
    finally:
        if conn.connection is raw:  # not closed by a failure inside
            try:
                raw.execute(f"PRAGMA {name} = {restore}")
            except Exception:
                try:
                    conn.close()
                except Exception:  # broken already: nothing more to drop
                    logger.debug("closing the connection of %r failed", conn.alias, exc_info=True)


class DataVersionWaker(Waker):
    """Wakes on another connection's commit: inotify where it works, ``data_version`` reads always."""

    def __init__(self, connection) -> None:
        super().__init__(connection)
        self._version = None
        self._watch: FileWatch | None = None

    def _wait(self, timeout: float, pipe: Connection | None) -> None:
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
