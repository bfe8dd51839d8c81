"""MySQL and MariaDB: what the ORM broker does differently on them, and how an idle pusher is woken.

Many hosts share one server, as on PostgreSQL: the clock is the server's (``UTC_TIMESTAMP(6)``),
and a claim locks the heads it reads (``FOR UPDATE SKIP LOCKED``: MySQL 8.0.1+, MariaDB 10.6+) so
concurrent clusters claim disjoint sets. What MySQL lacks, and what stands in for it:

* **No partial index.** Migration 0015 adds, on MySQL only, a virtual column ``pick_queue`` (the
  queue of a ready job, NULL otherwise) and ``pick_rank`` (``-priority``), and one index on
  ``(pick_queue, pick_rank, id)``: the ready set in the exact order of the pick, whatever the
  number of finished rows (MariaDB before 10.8 has no descending index, hence the negated rank).
* **No UPDATE ... RETURNING.** The claim updates the rows it has locked, then reads them back.
* **Gap locks.** Under ``REPEATABLE READ`` a locking read of the ready range also locks the gaps
  between rows, where new jobs are inserted: the cluster's connections run ``READ COMMITTED``
  (Django's default for MySQL) and a system check refuses another level.
* **No advisory locks that survive a pooler.** Flow control serializes on rows of the rate-limit
  table (``lock:<slot>``, a hash of the key or capped queue into 1024 slots), locked in one sorted
  order by ``INSERT ... ON DUPLICATE KEY UPDATE``.
* **No LISTEN/NOTIFY.** An idle pusher polls the largest ``inserted`` number (a column the server
  numbers at each insert, migration 0015: one index lookup), every few milliseconds just after work
  and more slowly while nothing arrives (:class:`NewestJobWaker`).
* **Deadlocks (1213) and lock wait timeouts (1205)** roll back the transaction: a claim's is
  retried whole (:meth:`retryable`), nothing it did stays, and no delivery is counted.
"""

from __future__ import annotations

import os
import socket
import time
import zlib
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from django.db import transaction

from ...policy.connections import keepalive_options
from ..clock import MYSQL, Clock
from .dialect import Dialect, register
from .sql import ACK, BUCKET, CHUNK, JOB, QSTATE, Head, chunks, marks
from .wakeup import Waker

MIN_VERSION = (8, 0, 1)  # SKIP LOCKED
MIN_MARIADB = (10, 6, 0)  # SKIP LOCKED
DEADLOCK, LOCK_WAIT_TIMEOUT = 1213, 1205
CONNECT_TIMEOUT = 5  # seconds a cluster's connection attempt may take, unless the project says
# Seconds between two looks for new jobs of an idle pusher: short right after a job arrived (work
# comes in bursts), longer and longer while none does.
LOOK_FIRST, LOOK_LAST, LOOK_GROWTH = 0.002, 0.05, 1.25
FLOW_LOCK = "lock:"  # rows of the rate-limit table that serve as flow control's locks
FLOW_SLOTS = 1024  # of them at most
ISOLATION_OK = {"read committed", "read uncommitted"}


class MysqlDialect(Dialect):
    vendor = "mysql"
    name = "MySQL/MariaDB"
    clock = MYSQL
    row_locks = True
    locks_scanned_rows = True
    greatest = "GREATEST"
    # An existing row is locked for writing (INSERT IGNORE would take a shared lock, and two
    # claims upgrading theirs deadlock).
    insert_ignore = ("INSERT INTO", " ON DUPLICATE KEY UPDATE {last} = {last}")

    def seconds_between(self, later: str, earlier: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, {earlier}, {later}) / 1e6"

    def ready_in(self, queues: int, above: bool = False) -> str:
        # The pick index's own columns (migration 0015): "state IN (...)" could only scan the
        # (state, queue) index, every waiting job of the queues (41 ms at 20,000 of them).
        return f"c.pick_queue IN ({marks(queues)})" + (" AND c.pick_rank < -%s" if above else "")

    def take_key(self, connection: Any, cursor: Any, table: str, key_column: str, key: str, job_id: str,
                 states: str) -> tuple[str, str]:
        # The duplicate is locked for writing at once: a plain INSERT's duplicate-key error would
        # leave a shared lock (a savepoint's rollback keeps it), and two callers upgrading theirs
        # deadlock. The locking read then sees the row as committed, not as the snapshot had it.
        cursor.execute(f"INSERT INTO {table} ({key_column}, job_id, states) VALUES (%s, %s, %s) "
                       f"ON DUPLICATE KEY UPDATE job_id = job_id", [key, job_id, states])
        cursor.execute(f"SELECT job_id, states FROM {table} WHERE {key_column} = %s FOR UPDATE", [key])
        holder, held_for = cursor.fetchone()
        return holder, held_for

    def add_to(self, cursor: Any, table: str, keys: Sequence[str], sums: Sequence[str],
               rows: Sequence[tuple]) -> None:
        added = ", ".join(f"{column} = {column} + VALUES({column})" for column in sums)
        columns = ", ".join([*keys, *sums])
        cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks(len(keys) + len(sums))}) "
                           f"ON DUPLICATE KEY UPDATE {added}", sorted(rows))

    def connection_limit(self, connection: Any) -> tuple[int, str] | None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@max_connections")
            (limit,) = cursor.fetchone()
        return int(limit), f"max_connections {limit}"

    def where(self, settings_dict: dict[str, Any]) -> str:
        host = settings_dict.get("HOST") or "the local socket"
        return f"{super().where(settings_dict)} at {host}:{settings_dict.get('PORT') or 3306}"

    def lock_flow(self, cursor: Any, names: Sequence[str]) -> None:
        if names:
            # One row per slot, not per name: the concurrency keys may be endless (one per
            # customer), the rows stay FLOW_SLOTS at most. Two names in one slot wait for each
            # other, as two keys whose hashes collide do on PostgreSQL's advisory locks.
            slots = sorted({f"{FLOW_LOCK}{zlib.crc32(name.encode()) % FLOW_SLOTS}" for name in names})
            self.insert_or_skip(cursor, BUCKET, [cursor.db.ops.quote_name("key"), "tat"], [(s, 0) for s in slots])

    def heads(self, cursor: Any, queues: Sequence[str], serve: Sequence[str], limit: int, clock: Clock,
              columns: str, floor: str, floor_params: list) -> tuple[dict[str, list[Head]], dict[str, int], float | None]:
        # The counters' read also reads the server's time, which every comparison of the claim then
        # uses; then one statement for every queue's heads: a UNION ALL of one locking read per
        # queue on the pick index (migration 0015), each in its order.
        now_sql, now_args = clock.at()
        cursor.execute(f"SELECT queue, served, {now_sql} FROM {QSTATE} WHERE queue IN ({marks(len(queues))})",
                       [*now_args, *queues])
        rows = cursor.fetchall()
        served = {queue: count for queue, count, _ in rows}
        if rows:
            now = rows[0][2]
        else:  # no counter yet (a queue's first claim)
            cursor.execute(f"SELECT {now_sql}", now_args)
            (now,) = cursor.fetchone()
        heads: dict[str, list[Head]] = {queue: [] for queue in serve}
        if not serve:
            return heads, served, now
        part = (f"(SELECT {columns} FROM {JOB} AS c FORCE INDEX (taskmq_job_ready) WHERE c.pick_queue = %s {floor}"
                f"AND c.visible_at <= %s ORDER BY c.pick_rank, c.id LIMIT %s FOR UPDATE SKIP LOCKED)")
        cursor.execute(" UNION ALL ".join([part] * len(serve)),
                       [p for queue in serve for p in (queue, *floor_params, now, limit)])
        for row in cursor.fetchall():
            head = Head(*row)
            heads[head.queue].append(head)
        for items in heads.values():  # (a UNION keeps no order)
            items.sort(key=lambda h: (-h.priority, h.id))
        return heads, served, now

    def claim(self, cursor: Any, sets: str, values: list, ids: Sequence[str], prefix: str = "",
              prefix_params: Sequence[Any] = ()) -> dict[str, tuple]:
        rows: dict[str, tuple] = {}
        for part in chunks(ids):
            # The rows are locked by this transaction (heads): the UPDATE changes each of them,
            # and the read that follows sees its own writes.
            cursor.execute(f"{sets} WHERE id IN ({marks(len(part))})", [*values, *part])
            cursor.execute(f"SELECT id, deliveries, yields, payload FROM {JOB} WHERE id IN ({marks(len(part))})",
                           list(part))
            rows.update((r[0], r) for r in cursor.fetchall())
        return rows

    def ack_all(self, broker: Any, rows: list[tuple]) -> int | None:
        if len(rows) < 2:
            return None  # the broker's one UPDATE, in autocommit
        # One UPDATE joined with the batch as a derived table (UNION ALL: MySQL's and MariaDB's
        # VALUES constructors differ), instead of one statement per row. The first start before
        # the latest: MySQL's assignments see the ones before them.
        # (CHUNK rows a statement, as the other batch statements: a statement must fit in the
        # server's max_allowed_packet, 16 MiB by default on MariaDB, 64 MiB on MySQL.)
        done = 0
        with transaction.atomic(using=broker.alias, savepoint=False), broker.connection.cursor() as cursor:
            for part in chunks(rows, CHUNK):
                batch = " UNION ALL ".join(["SELECT %s AS result, %s AS started, %s AS finished, %s AS id, %s AS token"]
                                           * len(part))
                cursor.execute(
                    f"UPDATE {JOB} AS j JOIN ({batch}) AS a ON j.id = a.id AND j.lease_token = a.token "
                    f"SET j.state = {ACK.to}, j.result_package = a.result, "
                    f"j.first_started_at = COALESCE(j.first_started_at, j.started_at, a.started), "
                    f"j.started_at = a.started, j.finished_at = a.finished, j.attempt = j.attempt + 1, "
                    f"j.lease_owner = NULL, j.lease_until = NULL, j.error = '', j.traceback = '' "
                    f"WHERE j.state IN {ACK.sources}",
                    [v for result, started, _, finished, job_id, token in part
                     for v in (result, started, finished, job_id, token)])
                done += cursor.rowcount
        return done

    def update_returning(self, cursor: Any, update: str, params: Sequence[Any], columns: str, key: str,
                         key_params: Sequence[Any]) -> list[tuple]:
        cursor.execute(update, list(params))
        if not cursor.rowcount:
            return []
        cursor.execute(f"SELECT {columns} FROM {JOB} WHERE {key}", list(key_params))
        return list(cursor.fetchall())

    def retryable(self, exc: BaseException) -> bool:
        code = _error_code(exc)
        return code in (DEADLOCK, LOCK_WAIT_TIMEOUT)

    def waker(self, broker: Any, burst: bool = False) -> Waker:
        return NewestJobWaker(broker.connection)

    def analyze(self, connection: Any) -> None:
        # InnoDB samples its statistics itself (innodb_stats_auto_recalc); the claim names its index.
        return None

    def prepare(self, options: dict[str, Any], dead_connection_timeout: float | None = None) -> None:
        options.setdefault("connect_timeout", CONNECT_TIMEOUT)
        # Django's default; a project's other level is refused by a system check (taskmq.E014).
        options.setdefault("isolation_level", "read committed")

    def connected(self, connection: Any, dead_connection_timeout: float | None) -> None:
        """The driver has no keepalive options (libpq's ``keepalives_*``, ``tcp_user_timeout``):
        the same are set on its socket, so that a connection whose far side went silent fails
        within ``dead_connection_timeout`` instead of about 15 minutes (a query) or 2 hours (idle).
        Unlike ``read_timeout``, a slow query is not cut: the server acknowledges what it receives."""
        set_keepalive(connection.connection.fileno(), keepalive_options(dead_connection_timeout))

    def server_problems(self, connection: Any) -> list[tuple[str, str, str]]:
        return server_problems(connection)


register(MysqlDialect())


def set_keepalive(fd: int, options: dict[str, int]) -> None:
    """Apply libpq-style keepalive ``options`` (see ``policy.connections.keepalive_options``) to the
    TCP socket ``fd``; a Unix socket has no such options, and is left alone."""
    if not options:
        return
    sock = socket.socket(fileno=os.dup(fd))  # a second descriptor of the same socket
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, option in (("keepalives_idle", "TCP_KEEPIDLE"), ("keepalives_interval", "TCP_KEEPINTVL"),
                             ("keepalives_count", "TCP_KEEPCNT"), ("tcp_user_timeout", "TCP_USER_TIMEOUT")):
            if hasattr(socket, option):  # Linux; elsewhere the system's defaults
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), options[name])
    finally:
        sock.close()


def _error_code(exc: BaseException) -> int | None:
    """The MySQL error number of ``exc`` or of the driver error Django wrapped in it."""
    for error in (exc, exc.__cause__):
        args = getattr(error, "args", ())
        if args and isinstance(args[0], int):
            return args[0]
    return None


def server_problems(connection: Any) -> list[tuple[str, str, str]]:
    """Return (check id, problem, what to change) for each reason the broker cannot run on the
    MySQL/MariaDB server behind ``connection``: its version, the job table's storage engine, the
    session's isolation level. Queries the server."""
    connection.ensure_connection()
    version = connection.mysql_version
    mariadb = connection.mysql_is_mariadb
    problems = [p for p in [version_problem(version, mariadb)] if p is not None]
    with connection.cursor() as cursor:
        cursor.execute("SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                       "AND TABLE_NAME LIKE 'django\\_taskmq\\_%%'")
        other = sorted(f"{name} ({engine})" for name, engine in cursor.fetchall() if (engine or "").lower() != "innodb")
        cursor.execute("SELECT @@SESSION.tx_isolation" if mariadb and version < (11, 1) else
                       "SELECT @@SESSION.transaction_isolation")
        (isolation,) = cursor.fetchone()
    if other:
        problems.append((
            "taskmq.E013",
            f"django_taskmq's tables must use InnoDB (row locks, transactions); these do not: {', '.join(other)}",
            "ALTER TABLE <table> ENGINE=InnoDB for each, or set default_storage_engine=InnoDB before migrating.",
        ))
    level = str(isolation).replace("-", " ").lower()
    if level not in ISOLATION_OK:
        problems.append((
            "taskmq.E014",
            f"the database's connections run at {level.upper()}: the claim needs READ COMMITTED (under "
            f"REPEATABLE READ its locking reads also lock the gaps where new jobs are inserted)",
            f"Set DATABASES[{connection.alias!r}]['OPTIONS']['isolation_level'] = 'read committed' (Django's default "
            f"for MySQL) and remove any 'SET TRANSACTION ISOLATION LEVEL' from OPTIONS['init_command'].",
        ))
    return problems


def version_problem(version: tuple[int, ...], mariadb: bool) -> tuple[str, str, str] | None:
    """The check of the server's version (see :func:`server_problems`); None when it will do."""
    least = MIN_MARIADB if mariadb else MIN_VERSION
    if tuple(version) >= least:
        return None
    product = "MariaDB" if mariadb else "MySQL"
    return ("taskmq.E012",
            f"{product} {'.'.join(map(str, version))} is too old for django_taskmq: it needs {product} "
            f"{'.'.join(map(str, least))} or later (FOR UPDATE SKIP LOCKED)",
            "Upgrade the server, or use PostgreSQL or SQLite for TASKMQ['database'].")


class NewestJobWaker(Waker):
    """Wakes when a job was inserted: the server numbers each insert (``inserted``, migration 0015),
    so the largest number is one index lookup, and it grows whatever the clocks of the hosts that
    made the job ids (ids from a host ahead would hide newer ones from ``MAX(id)``). Looks every
    :data:`LOOK_FIRST` seconds after a job arrived, growing to :data:`LOOK_LAST` while none does;
    retries and delays that come due wait for the poll interval, as they do on PostgreSQL."""

    def __init__(self, connection) -> None:
        super().__init__(connection)
        self._newest: int | None = None
        self._every = LOOK_FIRST

    def _wait(self, timeout: float, pipe: Connection | None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self.connection.cursor() as cursor:  # autocommit: each look sees the latest commits
                cursor.execute(f"SELECT MAX(inserted) FROM {JOB}")
                (newest,) = cursor.fetchone()
            if self._newest is None:
                self._newest = newest or 0
            elif (newest or 0) != self._newest:
                self._newest = newest or 0
                self._every = LOOK_FIRST
                self.woken = True
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if pipe is not None:
                if pipe.poll(min(self._every, remaining)):
                    return
            else:
                time.sleep(min(self._every, remaining))
            self._every = min(self._every * LOOK_GROWTH, LOOK_LAST)
