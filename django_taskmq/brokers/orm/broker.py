"""The ORM broker: the Django database holds the messages (one ``Job`` row each).

Hot paths are a few SQL statements each, not per-job loops: a claim selects the heads of each
queue (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite runs the whole claim in one
``BEGIN IMMEDIATE`` transaction), plans the pick order in Python (``policy.pick``) and updates the
chosen rows in one statement; acks are one statement per batch (``executemany`` on SQLite, arrays
on PostgreSQL).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.models import Exists, F, FloatField, OuterRef, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.signals import post_delete, pre_delete
from django.utils import timezone

from ...conf import Settings
from ...exceptions import ConfigError, LeaseLost
from ...models import (Chore, Cluster, DeadLetter, IdempotencyKey, Job, QueuePause, Schedule,
                      State, UniqueKey, Workflow, WorkflowStep)
from ...policy import attempts, pick
from ...policy import throughput as throughput_policy
from ...policy import timings as timings_policy
from ...policy.priority import validate_priority
from ...policy.states import HAS_DELIVERIES_LEFT_SQL, JobState, used_up
from ...policy.unique import REPLACEABLE, Unique
from ...policy.workflow import KEY_PREFIX, WorkflowState
from ...signals import job_dead
from ...envelope import seal_result
from .. import pooling
from ..base import Ack, Broker, Reservation, StepRecord
from ..clock import Clock, FromNow, Skew
from .dialect import Dialect, dialect_for
from .flow import FlowGate
from .sql import (ACK, BURY, CANCEL, CHORE, CHUNK, DEAD_LETTER, EXPIRE, FAIL, FINISHED, GIVE, JOB, JOB_LABEL, KEYS,
                  OUTCOMES, QSTATE, READY_SQL, RECLAIM, REPLAY, RESERVE, RETRY, RUNNING, STOPPED, TIMINGS, UNIQUE_KEYS,
                  chunks, finished_in, literal, marks)
from .flow import status as flow_status
from . import durable, schedules, workflows

logger = logging.getLogger(__name__)

UNFINISHED = literal(JobState.RETRYING, JobState.RUNNING)  # a burst waits for these, and for...
RESERVE_FIRST = f"'{JobState.QUEUED.value}'"  # ...queued jobs already visible (not those for later)
COUNTED = literal(*JobState.READY, JobState.RUNNING, JobState.DEAD)  # the states stats() counts
# The first execution's start, set by every statement that records an execution (started_at is
# the latest's); a row from before the column existed falls back on its last known start.
# Both placeholders take the same value. The first start is set before the latest: MySQL runs an
# UPDATE's assignments in order, each seeing the ones before it (PostgreSQL and SQLite: the old row).
STARTED = "first_started_at = COALESCE(first_started_at, started_at, %s), started_at = %s"
assert RECLAIM.allowed == {JobState.RUNNING}  # the lease sweep says "state = RUNNING" (reclaim_expired)
LOG_FIELD = Job._meta.get_field("attempt_log")
#: Seconds after which the deletion of a state's oldest jobs walks its index from the oldest end again.
REWALK = 300.0
# A reservation handed back unstarted (defer, yield, a graceful stop): the delivery its claim
# counted never ran, so it is taken back.
GIVE_BACK = (f"state = {GIVE.to}, deliveries = deliveries - 1, lease_owner = NULL, lease_token = NULL, "
             "lease_until = NULL")
# Job times a caller may give as a duration from now (FromNow): the database's clock counts them.
TIMED = ("visible_at", "expires_at")
# psycopg prepares a statement after this many runs on a connection; the hot statements ask for it at
# once (prepare=True), so this only keeps psycopg's own counting from preparing anything else.
NO_AUTOMATIC_PREPARE = 2**31
REPLACEABLE_SQL = literal(*REPLACEABLE)  # a coalesced job takes new arguments only in these states
CLAIM_ATTEMPTS = 5  # tries of a claim or sweep the database rolled back for a deadlock or a lock wait timeout
T = TypeVar("T")


class OrmBroker(Broker):
    """Broker on the Django database ``alias``; see :class:`~.base.Broker` for the contract."""


    def __init__(self, settings: Settings, alias: str = "default") -> None:
        self.settings = settings
        self.alias = alias
        self._last_reclaim = 0.0
        self._rollup_slot: datetime.datetime | None = None  # the newest slot this broker added to
        # (connection, names, converters, fields, quoted columns) for inserts
        self._plan: tuple[Any, list[str], list, list, str, dict[str, Any]] | None = None
        self._flow: FlowGate | None = None
        # Whether the next claim tries the dialect's one-statement claim (PostgreSQL): while the
        # last one found work in one queue at most, and less than it could take. Several queues
        # with work need the weighted pick (the statement would find that out and fall back, a
        # round trip lost at each claim); and on a backlog, concurrent one-statement claims queue
        # for the served counters' row lock for longer than transactions do (a shared backlog
        # drained a third to a half slower, docs/performance.rst): an idle job's claim gains.
        self._plain_next = True
        # What the dialect keeps per broker (SQLite: the connection's synchronous level).
        self._engine_state: dict[str, Any] = {}
        # Per thread (a worker's threads share this broker): whether a bookkeeping() block whose
        # commits need not flush is open on this thread's connection.
        self._local = threading.local()
        # Per finished state: the finish time where the last deletion of its oldest jobs stopped,
        # and the monotonic time that walk started from the oldest end (see _oldest_finished).
        self._deleted_to: dict[str, tuple[Any, float]] = {}

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def connection(self):
        return connections[self.alias]

    @property
    def flow(self) -> FlowGate:
        if self._flow is None:  # built on first use: it needs the engine, known once connected
            self._flow = FlowGate(self.settings, self.dialect)
        return self._flow

    def flow_wait(self) -> float | None:
        return self.flow.wait()

    def flow_status(self) -> dict[str, Any]:
        with self.connection.cursor() as cursor:
            return flow_status(cursor, self.settings, self.clock)

    @property
    def dialect(self) -> Dialect:
        """What this broker's engine does its own way (see :mod:`.dialect`)."""
        return dialect_for(self.connection)

    @property
    def clock(self) -> Clock:
        """The clock this broker's statements compare and store (see :mod:`..clock`)."""
        return self.dialect.clock

    def now(self) -> float:
        """See :meth:`Broker.now`: the database's time on a server engine (one query)."""
        return self.clock.now(self.connection)

    def clock_skew(self) -> Skew | None:
        """See :meth:`Broker.clock_skew`."""
        return self.clock.skew(self.connection)

    def _at(self, seconds: float = 0.0) -> Any:
        """An ORM expression of the clock's time plus ``seconds`` (epoch seconds), for updates and filters."""
        return RawSQL(*self.clock.at(seconds), output_field=FloatField())

    def atomic(self, *, write: bool = False) -> contextlib.AbstractContextManager[None]:
        """See :meth:`Broker.atomic`: a Django ``atomic`` block (a savepoint when nested)."""
        if write:
            return self._write_lock_only()
        return transaction.atomic(using=self.alias)

    @contextlib.contextmanager
    def _write_lock_only(self) -> Iterator[None]:
        with self.write_transaction():
            yield

    def connect(self) -> None:
        self.connection.ensure_connection()

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:  # the connection may be broken already: nothing more to drop
            logger.debug("closing the connection of %r failed", self.alias, exc_info=True)

    def describe(self) -> str:
        """``'default' (postgresql taskmq at 127.0.0.1:5432)``, ``'default' (sqlite /path/db.sqlite3)``."""
        return f"{self.alias!r} ({self.dialect.where(self.connection.settings_dict)})"

    @contextlib.contextmanager
    def hot_cursor(self) -> Iterator[Any]:
        """A cursor for the statements of every claim and ack: on PostgreSQL with psycopg 3 and
        ``TASKMQ['prepared_statements']``, each is planned once per connection (a server-side
        prepared statement) instead of at every run, which cost as much as running it; not on a
        connection through a pooler, and never again after a pooler lost one (see :mod:`.pooling`).

        Django's own cursors bind parameters on the client and never prepare; this one binds them
        on the server. It is wrapped as Django wraps its cursors (errors, execute wrappers), and
        leaves the connection's other statements as they were. While queries are logged (``DEBUG``,
        ``CaptureQueriesContext``) it is Django's own cursor: the log could not show a prepared
        statement's text.
        """
        conn = self.connection
        prepared = self.dialect.prepared_cursor_class() if not conn.queries_logged else None
        if prepared is not None:
            conn.ensure_connection()
            raw = conn.connection
            with conn.wrap_database_errors:
                # Behind a pooler nothing is prepared (see pooling), psycopg's own preparing included.
                if not pooling.preparing(self.alias, self.settings.prepared_statements).allowed(raw):
                    prepared = None
        if prepared is None:
            with conn.cursor() as cursor:
                yield cursor
            return
        if raw.prepare_threshold is None:  # Django's default: psycopg prepares nothing, even when asked
            raw.prepare_threshold = NO_AUTOMATIC_PREPARE
        with conn.wrap_database_errors:
            plain = prepared(raw)
        cursor = conn.make_cursor(plain)
        try:
            yield cursor
        except Exception as exc:
            retry = pooling.preparing(self.alias, self.settings.prepared_statements).failed(exc, raw)
            if retry is None:
                raise
            raise retry from exc
        finally:
            cursor.close()

    def dedicate(self) -> None:
        """See :meth:`Broker.dedicate`. On PostgreSQL, where the hot statements are prepared on a
        direct connection: no JIT compilation of them (see :data:`.pooling.NO_JIT`)."""
        pooling.preparing(self.alias, self.settings.prepared_statements).dedicate()

    def waker(self, burst: bool = False):
        return self.dialect.waker(self, burst)

    @contextlib.contextmanager
    def bookkeeping(self) -> Iterator[None]:
        """See :meth:`Broker.bookkeeping`. With ``TASKMQ['durable_outcomes']`` False, the block's
        commits on this thread's connection need not wait for the disk flush: the dialect's
        :meth:`.Dialect.relaxed` (PostgreSQL: ``synchronous_commit`` off for each of its
        transactions; SQLite in WAL mode: ``synchronous NORMAL`` for the block; MySQL: nothing,
        its setting is the server's). A commit lost in a crash of the database leaves its jobs
        RUNNING: their leases run out and they run again (see docs/decisions.rst).
        """
        conn = self.connection
        if (self.settings.durable_outcomes or self.relaxed or conn.in_atomic_block
                or (conn.connection is not None and not conn.autocommit)):  # a transaction that is the caller's
            yield
            return
        with self.dialect.relaxed(conn, self._engine_state):
            self._local.relaxed = True
            try:
                yield
            finally:
                self._local.relaxed = False

    @property
    def relaxed(self) -> bool:
        """True inside a :meth:`bookkeeping` block whose commits need not flush (this thread's):
        statements that commit by themselves then say so (``Dialect.no_flush_from``)."""
        return getattr(self._local, "relaxed", False)

    def _no_flush_from(self) -> str:
        """A ``FROM`` clause for an UPDATE that commits by itself: the dialect's no-flush one inside
        a relaxed :meth:`bookkeeping` block, else nothing."""
        return self.dialect.no_flush_from if self.relaxed else ""

    @contextlib.contextmanager
    def write_transaction(self, durable: bool = True) -> Iterator[Any]:
        """Open a write transaction that holds the write lock from its first statement.

        On SQLite a transaction that reads and then writes can fail at once with "database is
        locked" when another writer committed in between; taking the write lock first (what
        ``BEGIN IMMEDIATE`` does) makes it wait for the busy timeout instead.

        ``durable=False`` commits without waiting for the disk flush where the dialect can
        (:meth:`.Dialect.flush_deferred`: SQLite in WAL mode). Only claims use it: a claim lost in a server or
        machine crash leaves its job ready to be claimed again (as if the cluster had died before
        claiming), and any later durable commit (an ack) flushes the claim before itself, the log
        being written in order. On PostgreSQL a claim says ``synchronous_commit off`` inside its
        first read instead (``postgresql.NO_FLUSH``), which costs no round trip of its own.
        (The cluster's other commits defer the flush only with ``TASKMQ['durable_outcomes']``
        False: see :meth:`bookkeeping`.)
        """
        conn = self.connection
        outermost = not conn.in_atomic_block
        dialect = self.dialect
        if not durable and outermost and dialect.defers_flush:
            with dialect.flush_deferred(conn, self._engine_state):
                with self.write_transaction() as cursor:
                    yield cursor
            return
        with transaction.atomic(using=self.alias):
            cursor = conn.cursor()
            if outermost:
                dialect.write_lock(conn, cursor)
            try:
                yield cursor
            finally:
                cursor.close()

    # -- enqueue ----------------------------------------------------------------------------
    def enqueue(self, job: Mapping[str, Any], key: str | None = None, unique: Unique | None = None) -> str:
        """Insert one job (its column values by attribute name).

        With ``key``, return the id of the job that key made within the TTL instead, if any. With
        ``unique``, return the id of the job that holds the coalescing key instead, if it is still
        in the key's states (see :meth:`Broker.enqueue`).
        """
        job_id = job["id"]
        if unique is not None:
            return self._enqueue_unique(job, unique)
        if key is None:
            self._insert([job])
            return job_id
        with self.write_transaction():
            holder = self._take_key(key, job_id)
            if holder != job_id:
                return holder
            self._insert([job])
        return job_id

    def _take_key(self, key: str, owner: str) -> str:
        """Take the idempotency ``key`` for ``owner`` (a job's or a workflow's id) for the TTL, in the
        caller's transaction; return the id that holds it: ``owner``, or the one that took it
        within the TTL."""
        until, until_args = self.clock.at(self.settings.idempotency_ttl)
        now, now_args = self.clock.at()
        key_column = self.connection.ops.quote_name("key")  # a reserved word on MySQL
        # The caller's transaction took SQLite's write lock at its start (see write_transaction), so
        # a statement added before the inserts can never make it fail with "database is locked" on
        # Django's default (deferred) transactions.
        # The primary key on the key table decides races between concurrent callers: the
        # loser's insert fails (after waiting for the winner's commit on PostgreSQL).
        try:
            with transaction.atomic(using=self.alias), self.connection.cursor() as cursor:
                cursor.execute(f"INSERT INTO {KEYS} ({key_column}, job_id, expires_at) VALUES (%s, %s, {until})",
                               [key, owner, *until_args])
        except Exception:
            with self.connection.cursor() as cursor:
                # A key whose TTL ran out (by the clock) is taken again; of concurrent callers
                # the first to update it wins, the others then read its holder.
                cursor.execute(f"UPDATE {KEYS} SET job_id = %s, expires_at = {until} "
                               f"WHERE {key_column} = %s AND expires_at <= {now}", [owner, *until_args, key, *now_args])
                if not cursor.rowcount:
                    cursor.execute(f"SELECT job_id FROM {KEYS} WHERE {key_column} = %s", [key])
                    row = cursor.fetchone()
                    if row is None:
                        raise
                    return row[0]
        return owner

    def _enqueue_unique(self, job: Mapping[str, Any], unique: Unique) -> str:
        """Enqueue with a coalescing key: the key row first (its primary key decides between
        concurrent callers, who wait for each other on it), then the holder job's row, locked for
        as long: a claim skips a job locked here (SKIP LOCKED), and one that holds it makes this
        call wait until it commits and then see the job RUNNING. Never a read-then-insert."""
        job_id = job["id"]
        conn = self.connection
        key_column = conn.ops.quote_name("key")  # a reserved word on MySQL
        dialect = self.dialect
        with self.write_transaction() as cursor:  # SQLite: the write lock first, as in enqueue
            holder, held_for = dialect.take_key(conn, cursor, UNIQUE_KEYS, key_column, unique.key, job_id, unique.column)
            if holder != job_id:
                # A job past its expiry that no claim marked EXPIRED yet will never run: it holds nothing.
                now, now_args = self.clock.at()
                cursor.execute(f"SELECT state, CASE WHEN expires_at <= {now} THEN 1 ELSE 0 END FROM {JOB} "
                               f"WHERE id = %s{' FOR UPDATE' if dialect.row_locks else ''}", [*now_args, holder])
                row = cursor.fetchone()
                if row is not None and not row[1] and unique.holds(row[0], held_for):
                    if unique.replace and JobState(row[0]) in REPLACEABLE:
                        self._replace(cursor, holder, job)
                    return holder
                # The holder ended (or was deleted): this job takes the key over, for its own states.
                cursor.execute(f"UPDATE {UNIQUE_KEYS} SET job_id = %s, states = %s WHERE {key_column} = %s",
                               [job_id, unique.column, unique.key])
            self._insert([job])
        return job_id

    def _replace(self, cursor: Any, holder: str, job: Mapping[str, Any]) -> None:
        """Give the waiting job ``holder`` the package and times of ``job`` (a debounce); only while
        it waits (the row is locked: it cannot start meanwhile)."""
        sets, params = ["payload = %s"], [job["payload"]]
        for name in TIMED:  # visible_at always (no delay: now), expires_at when given
            if job.get(name) is not None:
                sql, args = self.clock.value(self.connection, job[name])
                sets.append(f"{name} = {sql}")
                params += args
        cursor.execute(f"UPDATE {JOB} SET {', '.join(sets)} WHERE id = %s AND state IN {REPLACEABLE_SQL}",
                       [*params, holder])

    def enqueue_many(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """Insert many jobs given as column values by attribute name; missing ones take defaults.

        The bulk path: no model instance per job, values adapted by one converter per column,
        ``COPY`` on PostgreSQL and multi-row INSERTs elsewhere, all in one transaction.
        """
        columns, width, table = self._table(rows)
        with self.write_transaction() as cursor:  # the write lock first, as in enqueue
            self._resolve_times(table)
            self.dialect.insert_many(cursor, JOB, columns, width, table)
        return [row["id"] for row in rows]

    def _resolve_times(self, table: list[list]) -> None:
        """Turn the durations (:class:`~.clock.FromNow`) of ``table`` into the clock's times, for
        statements that take values only (``COPY``): one reading of the clock for the whole batch."""
        timed = [i for i in _timed_positions() if any(isinstance(values[i], FromNow) for values in table)]
        if not timed or self.clock.local:
            return
        now = self.clock.now(self.connection)
        for values in table:
            for i in timed:
                if isinstance(values[i], FromNow):
                    values[i] = now + values[i].seconds

    def _table(self, rows: Sequence[Mapping[str, Any]]) -> tuple[str, int, list[list]]:
        """Return (quoted column list, column count, DB-ready values per row).

        Values missing from a row take the field's default (computed once per call).
        """
        conn = self.connection
        if self._plan is None or self._plan[0] is not conn:
            names, convert, fields = _columns(conn)
            columns = ", ".join(conn.ops.quote_name(f.column) for f in fields)
            # Defaults that are not computed (all but the callables, such as enqueued_at's) are
            # converted once per connection, not once per enqueue.
            constant = {name: conv(field.get_default()) for name, conv, field in zip(names, convert, fields)
                        if not (field.has_default() and callable(field.default))}
            self._plan = (conn, names, convert, fields, columns, constant)
        _, names, convert, fields, columns, constant = self._plan
        defaults = dict(constant)
        table = []
        for row in rows:
            values = []
            for name, conv, field in zip(names, convert, fields):
                if name in row:
                    values.append(conv(row[name]))
                else:
                    if name not in defaults:
                        defaults[name] = conv(field.get_default())
                    values.append(defaults[name])
            table.append(values)
        return columns, len(names), table

    def _insert(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """INSERT jobs given as column values in one statement (the single-enqueue hot path)."""
        columns, width, table = self._table(rows)
        conn = self.connection
        if len(table) == 1 and self.dialect.insert_one(conn, JOB, columns, width, table[0]):
            return
        # The job times given as durations count from the clock's time at this INSERT.
        clock = self.clock
        rows_sql = []
        for values in table:
            row = ["%s"] * width
            for i in _timed_positions():
                if values[i] is not None:  # (every clock fragment has one placeholder)
                    row[i], (values[i],) = clock.value(conn, values[i])
            rows_sql.append(f"({', '.join(row)})")
        with conn.cursor() as cursor:
            cursor.execute(f"INSERT INTO {JOB} ({columns}) VALUES {', '.join(rows_sql)}",
                           [v for values in table for v in values])

    # -- reserve ----------------------------------------------------------------------------
    def reserve(self, queues: Sequence[str], limit: int, lease: float, owner: str,
                above: int | None = None, cluster: str | None = None) -> list[Reservation]:
        """See :meth:`Broker.reserve`; ``above`` limits the claim to priorities greater than it."""
        if limit <= 0 or not queues:
            return []
        queues = sorted(set(queues))
        if time.monotonic() - self._last_reclaim >= self.reclaim_every:
            self.reclaim_expired()
            self._last_reclaim = time.monotonic()
        # (A claim the database rolled back claimed and counted nothing: no delivery is counted twice.)
        return self._retried(lambda: self._reserve(queues, limit, lease, (owner, cluster), above))

    def _reserve(self, queues: list[str], limit: int, lease: float, holder: tuple[str, str | None],
                 above: int | None) -> list[Reservation]:
        # Read the clock after the sweep: reclaimed messages are visible from the sweep's time on,
        # and this claim must see them. A database clock is read by the heads' statement instead.
        clock = self.clock
        token = uuid.uuid4().hex
        owner = holder[0]
        if (above is None and self._plain_next and not self.flow.seen and self.dialect.claims_plain
                and not self.connection.in_atomic_block):
            with self.hot_cursor() as hot:
                rows = self.dialect.claim_plain(hot, queues, self.settings.weights(), limit, clock,
                                                *self._claim_sets(token, holder, lease))
            if rows is not None:
                self._plain_next = len(rows) < limit
                rows.sort(key=lambda r: (-r[2], r[0]))  # pick order: priority first, then the oldest id
                return [Reservation(r[0], r[1], r[2], r[3], r[4], token, owner, r[5], r[6]) for r in rows]
        with self.write_transaction(durable=False) as cursor, self.hot_cursor() as hot:
            serve, closed_funcs = self.flow.closed(cursor, queues, clock)
            candidates, served, now = self._heads(hot, queues, serve, limit, clock, above, closed_funcs)
            chosen = self.flow.choose(cursor, candidates, served, limit, now)
            if chosen is None:  # no flow limit among these candidates: the plain pick
                chosen, _ = pick.plan(candidates, served, self.settings.weights(), limit)
            expired = [c for c in chosen if c.expires_at is not None and c.expires_at <= now]
            poison = [c for c in chosen if used_up(c.deliveries, c.max_deliveries) and c not in expired]
            runnable = [c for c in chosen if c not in expired and c not in poison]
            if expired:
                self._mark_expired(cursor, [c.id for c in expired])
            if poison:
                self._bury(cursor, [
                    (c.id, c.queue, c.deliveries,
                     f"max deliveries exceeded: delivered {c.deliveries} times without an ack")
                    for c in poison
                ], None)
            # The locked (PostgreSQL) or write-locked (SQLite) runnable rows are all claimed.
            counters = self._counters(runnable, candidates, served, lift=above is None)
            reservations = self._claim(hot, runnable, token, holder, lease, counters)
        if above is None:
            self._plain_next = (len(reservations) < limit
                                and sum(1 for items in candidates.values() if items) <= 1)
        return reservations

    def reserve_job(self, job_id: str, lease: float, owner: str) -> Reservation | None:
        """Reserve one given job if it is ready (used by sync mode); an expired one becomes EXPIRED."""
        token = uuid.uuid4().hex
        now, now_args = self.clock.at()
        until, until_args = self.clock.at(lease)
        with self.write_transaction() as cursor:
            cursor.execute(
                f"SELECT expires_at FROM {JOB} WHERE id = %s AND state IN {READY_SQL} AND expires_at <= {now}",
                [job_id, *now_args],
            )
            if cursor.fetchone():
                self._mark_expired(cursor, [job_id])
                return None
            rows = self.dialect.update_returning(
                cursor,
                f"UPDATE {JOB} SET state = {RESERVE.to}, deliveries = deliveries + 1, lease_owner = %s, "
                f"lease_token = %s, lease_until = {until} WHERE id = %s AND state IN {RESERVE.sources} "
                f"AND {HAS_DELIVERIES_LEFT_SQL}",
                [owner, token, *until_args, job_id],
                "id, queue, priority, deliveries, yields, max_deliveries, payload",
                "id = %s AND lease_token = %s", [job_id, token],
            )
        if not rows:
            return None
        row = rows[0]
        return Reservation(row[0], row[1], row[2], row[3], row[4], token, owner, row[5], row[6])

    def has_ready(self, queues: Sequence[str], above: int | None = None) -> bool:
        """Return True when a ready message waits in ``queues`` (above a priority) whose concurrency
        key is free; a read only."""
        now, now_args = self.clock.at()
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {JOB} AS c WHERE {self.dialect.ready_in(len(queues), above is not None)} "
                f"AND c.visible_at <= {now} AND {self.dialect.key_free} LIMIT 1",
                [*queues, *([above] if above is not None else []), *now_args],
            )
            return cursor.fetchone() is not None

    def _heads(self, cursor, queues: Sequence[str], serve: Sequence[str], limit: int, clock: Clock,
               above: int | None = None,
               closed_funcs: Sequence[str] = ()) -> tuple[dict[str, list], dict[str, int], float]:
        """Return the first ``limit`` ready messages of each queue in ``serve``, head first (locked on
        PostgreSQL), the served counter of each queue in ``queues``, and the clock's time the heads
        were visible at (read by the same statement on a database clock).

        Messages whose concurrency key is at its limit, or whose task's rate limit is closed
        (``closed_funcs``), are left out: they are held, and must not hide the ones behind them.
        """
        floor = f"AND {self.dialect.key_free} " + ("AND priority > %s " if above is not None else "")
        floor_params: list = [above] if above is not None else []
        if closed_funcs:
            floor += f"AND (c.rate_limit IS NULL OR c.func NOT IN ({marks(len(closed_funcs))})) "
            floor_params += list(closed_funcs)
        columns = ("c.id, c.queue, c.priority, c.deliveries, c.max_deliveries, c.expires_at, c.func, "
                   "c.concurrency_key, c.concurrency_limit, c.rate_limit")
        heads, served, now = self.dialect.heads(cursor, queues, serve, limit, clock, columns, floor, floor_params)
        missing = [q for q in queues if q not in served]
        if missing:
            # A queue's first claim (or its row was deleted): without the row the served counters
            # would silently stop counting. Created here, in the claim's own transaction, it costs
            # no commit of its own, and nothing at all once the rows exist (every later start).
            # (Django's own cursor: a statement this rare is not worth a prepared one on PostgreSQL.)
            with self.connection.cursor() as plain:
                self.dialect.insert_or_skip(plain, QSTATE, ["queue", "served"], [(q, 0) for q in missing])
        return heads, served, now if now is not None else clock.now(self.connection)

    def _claim(self, cursor, chosen: list, token: str, holder: tuple[str, str | None], lease: float,
               counters: tuple[str, str, list] | None = None) -> list[Reservation]:
        """Reserve ``chosen`` (their rows are locked, or the write lock is held) for ``lease`` seconds
        from the statement's time; ``counters`` (see :meth:`_counters`) are updated by the same
        statement on PostgreSQL, one round trip fewer."""
        prefix, prefix_params = "", []  # type: tuple[str, list]
        if counters is not None:
            if self.dialect.counters_in_claim and chosen:
                prefix, prefix_params = f"WITH {counters[0]}, counted AS ({counters[1]}) ", counters[2]
            else:
                cursor.execute(*self._counters_statement(counters))
        sets, values = self._claim_sets(token, holder, lease)
        ids = [c.id for c in chosen]
        rows = self.dialect.claim(cursor, sets, values, ids, prefix, prefix_params)
        return [
            Reservation(c.id, c.queue, c.priority, rows[c.id][1], rows[c.id][2], token, holder[0],
                        c.max_deliveries, rows[c.id][3])
            for c in chosen if c.id in rows
        ]

    def _claim_sets(self, token: str, holder: tuple[str, str | None], lease: float) -> tuple[str, list]:
        """The claim's UPDATE without its WHERE, and its parameters: reserved for ``lease`` seconds
        from the statement's time by ``holder`` (the sentinel's id, the cluster's name)."""
        until, until_args = self.clock.at(lease)
        owner, cluster = holder
        return (f"UPDATE {JOB} SET state = {RESERVE.to}, deliveries = deliveries + 1, lease_owner = %s, "
                f"lease_token = %s, lease_until = {until}, cluster = %s"), [owner, token, *until_args, cluster]

    def _counters(self, taking: list, candidates: dict, served: dict, lift: bool = True) -> tuple[str, str, list] | None:
        """Return how a claim of ``taking`` moves the served counters, or None when it moves none.

        The queues taken from count up; with ``lift``, idle queues are lifted towards the busy ones
        (:func:`pick.lift_idle`). The result is (lock CTE, UPDATE, parameters) on PostgreSQL, where
        the rows are locked in one global order (by queue name) first, since concurrent claims that
        lock the same rows in different orders deadlock; elsewhere ("", UPDATE, parameters).
        """
        taken: dict[str, int] = {}
        for c in taking:
            taken[c.queue] = taken.get(c.queue, 0) + 1
        lifted: dict[str, int] = {}
        if lift:  # a claim limited to high priorities says nothing about which queues are idle
            after = {q: served.get(q, 0) + taken.get(q, 0) for q in candidates}
            busy = [q for q, items in candidates.items() if items]
            idle = [q for q, items in candidates.items() if not items]
            lifted = pick.lift_idle(after, self.settings.weights(), busy, idle)
        queues = sorted(set(taken) | set(lifted))
        if not queues:
            return None
        return self.dialect.served_update(queues, taken, lifted)

    @staticmethod
    def _counters_statement(counters: tuple[str, str, list]) -> tuple[str, list]:
        """The counters' update alone, as one statement."""
        lock, update, params = counters
        return (f"WITH {lock} {update}" if lock else update), params

    def _mark_expired(self, cursor, ids: Sequence[str]) -> None:
        finished, finished_args = self.clock.stamp(self.connection)
        for part in chunks(ids):
            cursor.execute(
                f"UPDATE {JOB} SET state = {EXPIRE.to}, finished_at = {finished}, lease_owner = NULL, "
                f"lease_token = NULL, lease_until = NULL WHERE state IN {EXPIRE.sources} AND id IN ({marks(len(part))})",
                [*finished_args, *part],
            )
        workflows.ended(self, ids)

    def _bury(self, cursor, jobs: Sequence[tuple[str, str, int, str]], token: str | None,
              error: str = "", traceback: str = "", started_at: datetime.datetime | None = None,
              attempt_log: Any = None) -> int:
        """Dead-letter jobs (id, queue, deliveries, reason): job DEAD plus one DeadLetter row each.

        Without ``error`` the job keeps its last error (a crash loop's, say) and its letter carries
        it. With ``started_at`` the delivery being buried ran: it counts as an execution, and
        ``attempt_log`` (the column's new value, see :meth:`_logged`) records its failure.
        """
        finished, finished_args = self.clock.stamp(self.connection)
        fence = "AND lease_token = %s" if token else ""
        ran = f", attempt = attempt + 1, {STARTED}" if started_at else ""
        if started_at and attempt_log is not None:
            ran += ", attempt_log = %s"
        last_errors: dict[str, str] = {}
        if not error:
            for part in chunks([j[0] for j in jobs]):
                cursor.execute(f"SELECT id, error FROM {JOB} WHERE id IN ({marks(len(part))})", list(part))
                last_errors.update(cursor.fetchall())
        buried = []
        for job_id, queue, deliveries, reason in jobs:
            params = [*finished_args, *([self._adapt(started_at)] * 2 if started_at else [])]
            params += [attempt_log] if started_at and attempt_log is not None else []
            sets = "error = %s, traceback = %s, " if error else ""
            params += [error, traceback] if error else []
            params += [job_id] + ([token] if token else [])
            cursor.execute(
                f"UPDATE {JOB} SET state = {BURY.to}, finished_at = {finished}{ran}, {sets}"
                f"lease_owner = NULL, lease_until = NULL WHERE id = %s AND state IN {BURY.sources} {fence}",
                params,
            )
            if cursor.rowcount:
                buried.append(DeadLetter(job_id=job_id, queue=queue, reason=reason,
                                         error=error or last_errors.get(job_id) or "", deliveries=deliveries,
                                         failed_at=timezone.now()))
        DeadLetter.objects.using(self.alias).bulk_create(buried)
        workflows.ended(self, [d.job_id for d in buried])
        if buried:  # one statement copies the task names (the letter is searched by it, see models)
            DeadLetter.objects.using(self.alias).filter(job_id__in=[d.job_id for d in buried], task_name="").update(
                task_name=Subquery(Job.objects.using(self.alias).filter(pk=OuterRef("job_id")).values("task_name")[:1]))
        if buried and job_dead.has_listeners():
            transaction.on_commit(lambda: [
                job_dead.send_robust(sender=Job, job_id=d.job_id, queue=d.queue, reason=d.reason) for d in buried
            ], using=self.alias)
        return len(buried)

    def _adapt(self, value: datetime.datetime | None):
        return self.connection.ops.adapt_datetimefield_value(value)

    # -- ending a delivery --------------------------------------------------------------------
    def _fenced(self, reservation: Reservation, sets: str, params: list) -> bool:
        """Run a token-fenced update of a leased job; return False for a holder's repeated call,
        raise LeaseLost."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {JOB} SET {sets} WHERE id = %s AND lease_token = %s AND state = {RUNNING}",
                [*params, reservation.job_id, reservation.token],
            )
            if cursor.rowcount:
                return True
        self._raise_if_lost(reservation)
        return False

    def _raise_if_lost(self, reservation: Reservation) -> None:
        row = Job.objects.using(self.alias).filter(pk=reservation.job_id).values_list("state", "lease_token").first()
        if row is None or row[1] != reservation.token:
            raise LeaseLost(f"job {reservation.job_id}: lease lost (token {reservation.token} no longer holds it)")

    def ack_many(self, acks: Iterable[Ack]) -> list[Reservation]:
        acks = list(acks)
        if not acks or self._ack_rows(acks) == len(acks):
            return []
        return self._lost_among([a.reservation for a in acks])

    def count_outcomes(self, counts: Mapping[tuple[datetime.datetime, str], tuple[int, int]]) -> None:
        if not counts:
            return
        adapt = self.connection.ops.adapt_datetimefield_value
        with self.connection.cursor() as cursor:
            self.dialect.add_to(cursor, OUTCOMES, ("at", "queue"), ("succeeded", "failed"),
                                [(adapt(at), queue, ok, failed) for (at, queue), (ok, failed) in counts.items()])
            # Slots older than the rollups keep go when a new slot starts (once per slot, per process).
            newest = max(at for at, _queue in counts)
            if newest != self._rollup_slot:
                self._rollup_slot = newest
                for table in (OUTCOMES, TIMINGS):
                    cursor.execute(f"DELETE FROM {table} WHERE at < %s", [adapt(newest - throughput_policy.KEPT)])

    def time_outcomes(self, finished: Mapping[str, datetime.datetime]) -> None:
        if not finished:
            return
        seconds = self.dialect.seconds_between
        timed = []
        with self.connection.cursor() as cursor:
            # The rows were written in this transaction: the pruning that deletes them has not seen them.
            for part in chunks(sorted(finished), CHUNK):
                cursor.execute(
                    f"SELECT id, queue, task_name, {seconds('first_started_at', 'enqueued_at')}, "
                    f"{seconds('finished_at', 'started_at')} FROM {JOB} WHERE id IN ({marks(len(part))}) "
                    f"AND first_started_at IS NOT NULL AND started_at IS NOT NULL AND finished_at IS NOT NULL",
                    part)
                timed += [(finished[job_id], queue, task, float(wait), float(run))
                          for job_id, queue, task, wait, run in cursor.fetchall()]
            rows = timings_policy.tally(timed)
            if rows:
                adapt = self.connection.ops.adapt_datetimefield_value
                self.dialect.add_to(cursor, TIMINGS, ("at", "queue", "task_name", "bucket"),
                                    ("waits", "wait_seconds", "runs", "run_seconds"),
                                    [(adapt(at), queue, task, bucket, *sums)
                                     for (at, queue, task, bucket), sums in rows.items()])

    def _ack_rows(self, acks: Sequence[Ack]) -> int:
        """Mark acknowledged rows SUCCEEDED in one transaction; return how many were still held."""
        now = timezone.now()
        adapt = self.connection.ops.adapt_datetimefield_value
        name, compress = self.settings.name, self.settings.compress
        rows = [
            (
                seal_result(a.result, name, compress),  # workers send results sealed already
                started,
                started,
                adapt(a.finished_at or now),
                a.reservation.job_id,
                a.reservation.token,
            )
            for a in acks
            for started in (adapt(a.started_at or now),)  # one adaptation for both of its uses
        ]
        conn = self.connection
        done = self.dialect.ack_all(self, rows)
        if done is not None:
            return done
        sql = (f"UPDATE {JOB} SET state = {ACK.to}, result_package = %s, {STARTED}, "
               f"finished_at = %s, "
               f"attempt = attempt + 1, lease_owner = NULL, lease_until = NULL, error = '', traceback = '' "
               f"WHERE id = %s AND lease_token = %s AND state IN {ACK.sources}")
        if len(rows) == 1 and conn.get_autocommit() and not conn.in_atomic_block:
            # One statement commits by itself: no BEGIN and COMMIT of the transaction block.
            with self.hot_cursor() as cursor:
                cursor.execute(sql, rows[0])
                return cursor.rowcount
        # No savepoint of its own: callers that must survive its failure open one (the recorder).
        with transaction.atomic(using=self.alias, savepoint=False), self.hot_cursor() as cursor:
            cursor.executemany(sql, rows)
            return cursor.rowcount

    def _lost_among(self, reservations: Sequence[Reservation]) -> list[Reservation]:
        """Return the reservations whose token no longer holds their job."""
        tokens = dict(
            Job.objects.using(self.alias).filter(pk__in=[r.job_id for r in reservations]).values_list("id", "lease_token")
        )
        return [r for r in reservations if tokens.get(r.job_id) != r.token]

    def settle(self, reservation: Reservation, *, requeue: bool = True, delay: float = 0, error: str = "",
               traceback: str = "", started_at: datetime.datetime | None = None) -> JobState | None:
        """See :meth:`Broker.settle`; ``started_at`` is when the failed execution started (default now).

        The one poison guard of a failed execution: the deliveries are read under the lease.
        """
        started_at = started_at or timezone.now()
        with self.write_transaction():  # it reads, then writes: the write lock first (SQLite)
            held = self._held(reservation)
            deliveries = held[0] if held is not None else None
            if not requeue or (deliveries is not None and used_up(deliveries, reservation.max_deliveries)):
                reason = (error or "rejected") if not requeue else f"max deliveries exceeded: failed {deliveries} times"
                buried = self.dead_letter(reservation, reason, error, traceback, started_at=started_at)
                return BURY.target if buried else None
            if held is None:
                self._raise_if_lost(reservation)
                return None
            visible, visible_args = self.clock.at(max(delay, 0))
            retried = self._fenced(
                reservation,
                f"state = {RETRY.to}, visible_at = {visible}, attempt = attempt + 1, {STARTED}, "
                "error = %s, traceback = %s, attempt_log = %s, lease_owner = NULL, lease_until = NULL",
                [*visible_args, self._adapt(started_at), self._adapt(started_at), error, traceback,
                 self._logged(held, started_at, error, traceback)],
            )
            return RETRY.target if retried else None

    def fail(self, reservation: Reservation, error: str, traceback: str = "", started_at=None,
             finished_at=None) -> bool:
        """Acknowledge a failure (``ack_failures``): the job ends FAILED, no redelivery."""
        adapt = self.connection.ops.adapt_datetimefield_value
        now = timezone.now()
        started_at = started_at or now
        with self.write_transaction():  # it reads, then writes: the write lock first (SQLite)
            held = self._held(reservation)
            if held is None:
                self._raise_if_lost(reservation)
                return False
            return self._fenced(
                reservation,
                f"state = {FAIL.to}, error = %s, traceback = %s, {STARTED}, finished_at = %s, "
                "attempt = attempt + 1, attempt_log = %s, lease_owner = NULL, lease_until = NULL",
                [error, traceback, adapt(started_at), adapt(started_at), adapt(finished_at or now),
                 self._logged(held, started_at, error, traceback)],
            )

    def _held(self, reservation: Reservation) -> tuple[int, int, Any] | None:
        """Return (deliveries, attempt, attempt_log) of the job while ``reservation`` holds it, else None.

        The one read of a failure's recording: under the lease token only the holder writes these
        columns, and its fenced update changes nothing if the lease was lost since.
        """
        return (
            Job.objects.using(self.alias)
            .filter(pk=reservation.job_id, lease_token=reservation.token, state=State.RUNNING)
            .values_list("deliveries", "attempt", "attempt_log")
            .first()
        )

    def _logged(self, held: tuple[int, int, Any], started_at: datetime.datetime, error: str, traceback: str) -> Any:
        """Return the ``attempt_log`` column value with this failed execution appended (capped: policy.attempts)."""
        _, attempt, log = held
        value = attempts.record(log, attempt + 1, started_at.isoformat(), error, traceback)
        return LOG_FIELD.get_db_prep_save(value, self.connection)

    def defer(self, reservation: Reservation, delay: float = 0) -> bool:
        visible, visible_args = self.clock.at(max(delay, 0))
        return self._fenced(reservation, f"{GIVE_BACK}, visible_at = {visible}", visible_args)

    def defer_many(self, reservations: Sequence[Reservation]) -> int:
        """Put many unstarted reservations back at once (a graceful stop); return how many."""
        return self._give_back_many(reservations, "", [])

    def return_interrupted(self, reservations: Sequence[Reservation], reason: str) -> int:
        """See :meth:`Broker.return_interrupted`: :meth:`defer_many` that also says why."""
        return self._give_back_many(reservations, ", error = %s", [reason])

    def _give_back_many(self, reservations: Sequence[Reservation], sets: str, params: list) -> int:
        if not reservations:
            return 0
        with transaction.atomic(using=self.alias), self.connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {JOB} SET {GIVE_BACK}{sets}{self._no_flush_from()} "
                f"WHERE id = %s AND lease_token = %s AND state IN {GIVE.sources}",
                [(*params, r.job_id, r.token) for r in reservations],
            )
            return cursor.rowcount

    def yield_reservation(self, reservation: Reservation, delay: float = 0) -> bool:
        visible, visible_args = self.clock.at(max(delay, 0))
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {JOB} SET {GIVE_BACK}, visible_at = {visible}, yields = yields + 1 "
                f"WHERE id = %s AND lease_token = %s AND state IN {GIVE.sources} AND yields < %s",
                [*visible_args, reservation.job_id, reservation.token, self.settings.max_yields],
            )
            if cursor.rowcount:
                return True
        self._raise_if_lost(reservation)
        return False

    def report_progress(self, reservation: Reservation, report: Mapping[str, Any]) -> bool:
        return bool(Job.objects.using(self.alias).filter(
            pk=reservation.job_id, lease_token=reservation.token, state=JobState.RUNNING.value,
        ).update(progress_report=dict(report)))

    def extend_leases(self, owner: str, job_ids: Sequence[str], seconds: float) -> int:
        """Renew the leases ``owner`` holds on ``job_ids`` (one statement per 500); return how many.

        Only jobs the caller knows it still holds are renewed: a reservation lost with a crashed
        process must run out and come back, not be kept alive by the survivors.
        """
        until, until_args = self.clock.at(seconds)

        def renew(part: Sequence[str]) -> int:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {JOB} SET lease_until = {until}{self._no_flush_from()} WHERE lease_owner = %s "
                    f"AND state = {RUNNING} AND id IN ({marks(len(part))})",
                    [*until_args, owner, *part],
                )
                return cursor.rowcount

        # InnoDB may pick a renewal as a deadlock's victim (another cluster's claim locks the same
        # rows through the ready index first): each statement commits alone, so it is tried again.
        renewed = 0
        for part in chunks(list(job_ids)):
            renewed += self._retried(functools.partial(renew, part))
        return renewed

    def dead_letter(self, reservation: Reservation, reason: str, error: str = "", traceback: str = "",
                    started_at: datetime.datetime | None = None) -> bool:
        """See :meth:`Broker.dead_letter`; with ``started_at``, the delivery ran (an execution counts)."""
        with self.write_transaction() as cursor:
            held = self._held(reservation)
            if held is None:
                self._raise_if_lost(reservation)
                return False
            log = self._logged(held, started_at, error, traceback) if started_at else None
            return bool(self._bury(cursor, [(reservation.job_id, reservation.queue, held[0], reason)],
                                   reservation.token, error, traceback, started_at=started_at, attempt_log=log))

    def dead_letter_package(self, reservation: Reservation, reason: str) -> bool:
        """Dead-letter a package that failed to verify or unpickle (never executed)."""
        return self.dead_letter(reservation, reason, error=reason)

    # -- the DLQ ------------------------------------------------------------------------------
    def dead_letters(self, queue: str | None = None):
        qs = DeadLetter.objects.using(self.alias).filter(replayed_at__isnull=True).select_related("job")
        return qs.filter(queue=queue) if queue else qs

    def replay_dead(self, dead_letter_id: int, queue: str | None = None, priority: int | None = None) -> str:
        if queue is not None:
            self.settings.check_queue(queue)
        if priority is not None:
            validate_priority(priority, ConfigError)
        with transaction.atomic(using=self.alias):
            letter = DeadLetter.objects.using(self.alias).select_for_update().filter(pk=dead_letter_id).first()
            if letter is None:
                raise ConfigError(f"there is no dead letter {dead_letter_id}")
            if letter.replayed_at is not None:
                raise ConfigError(f"dead letter {dead_letter_id} was already replayed at {letter.replayed_at}")
            if not self._requeue_dead([letter.job_id], queue, priority):
                state = Job.objects.using(self.alias).filter(pk=letter.job_id).values_list("state", flat=True).first()
                raise ConfigError(f"dead letter {dead_letter_id}: its job {letter.job_id} is no longer dead "
                                  f"({state or 'deleted'}); nothing replayed")
            DeadLetter.objects.using(self.alias).filter(pk=letter.pk).update(
                replayed_at=timezone.now(), replay_count=letter.replay_count + 1
            )
        return letter.job_id

    def _requeue_dead(self, job_ids: Sequence[str], queue: str | None, priority: int | None) -> int:
        changes: dict[str, Any] = dict(
            state=REPLAY.target, deliveries=0, yields=0, visible_at=self._at(), lease_owner=None,
            lease_token=None, lease_until=None, finished_at=None, cancel_requested_at=None,
        )
        if queue is not None:
            changes["queue"] = queue
        if priority is not None:
            changes["priority"] = priority
        count = Job.objects.using(self.alias).filter(pk__in=job_ids, state__in=REPLAY.allowed).update(**changes)
        if count:
            workflows.reopened(self, job_ids)
        return count

    def replay_all(self, queue: str | None = None) -> int:
        """See :meth:`Broker.replay_all`; letters whose job is no longer dead are left as they are."""
        with transaction.atomic(using=self.alias):
            letters = list(
                self.dead_letters(queue).filter(job__state__in=REPLAY.allowed)
                # (MariaDB has no FOR UPDATE OF: the jobs joined are locked too, which is harmless.)
                .select_for_update(of=("self",) if self.connection.features.has_select_for_update_of else ())
                .values_list("pk", "job_id")
            )
            for part in chunks(letters):
                self._requeue_dead([job_id for _, job_id in part], None, None)
                DeadLetter.objects.using(self.alias).filter(pk__in=[pk for pk, _ in part]).update(
                    replayed_at=timezone.now(), replay_count=F("replay_count") + 1
                )
        return len(letters)

    def cancel(self, job_ids: Sequence[str]) -> int:
        """Cancel jobs that have not started (QUEUED or RETRYING); return how many.

        A job already leased, running or finished is left as it is: :meth:`request_cancel` asks its
        holder to stop one that runs.
        """
        with transaction.atomic(using=self.alias):
            count = self._update_each(job_ids, f"state = {CANCEL.to}, finished_at = {{now}}", f"state IN {CANCEL.sources}")
            if count:
                workflows.ended(self, job_ids)
        return count

    # -- workflows ------------------------------------------------------------------------------
    def enqueue_workflow(self, workflow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]],
                         edges: Sequence[tuple[str, str]], key: str | None = None) -> str:
        with self.write_transaction():  # the write lock first, as in enqueue
            if key is not None:
                holder = self._take_key(KEY_PREFIX + key, workflow["id"])
                if holder != workflow["id"]:
                    return holder
            workflows.insert(self, workflow, steps, edges)
        return workflow["id"]

    def workflow_ended(self, job_ids: Sequence[str]) -> None:
        workflows.ended(self, job_ids)

    def cancel_workflow(self, workflow_id: str) -> int:
        with self.write_transaction():
            ids = dict(WorkflowStep.objects.using(self.alias).filter(workflow_id=workflow_id, ended=False)
                       .values_list("job_id", "job__state"))
            if ids:  # a workflow that ended keeps its state
                Workflow.objects.using(self.alias).filter(pk=workflow_id).update(cancelled=True)
            waiting = sorted(j for j, state in ids.items() if JobState(state) in CANCEL.allowed)
            running = sorted(j for j, state in ids.items() if state == JobState.RUNNING.value)
            return self.cancel(waiting) + self.request_cancel(running)

    # -- durable tasks (see .durable) ---------------------------------------------------------
    def steps(self, job_id: str) -> list[StepRecord]:
        return durable.steps(self, job_id)

    def save_step(self, reservation: Reservation, record: StepRecord) -> None:
        durable.save_step(self, reservation, record)

    def finish_step(self, reservation: Reservation, name: str, result: str | None = None) -> None:
        durable.finish_step(self, reservation, name, result)

    def take_signal(self, reservation: Reservation, name: str, signal: str) -> tuple[bool, str | None]:
        return durable.take_signal(self, reservation, name, signal)

    def suspend(self, reservation: Reservation, wake_at: float | None, signal: str = "") -> JobState | None:
        return durable.suspend(self, reservation, wake_at, signal)

    def send_signal(self, job_id: str, signal: str, payload: str | None) -> bool:
        return durable.send_signal(self, job_id, signal, payload)

    def suspended(self) -> dict[str, int]:
        return durable.suspended(self)

    def request_cancel(self, job_ids: Sequence[str]) -> int:
        """See :meth:`Broker.request_cancel`: one statement per 500 ids; a repeated request keeps the first time."""
        return self._update_each(job_ids, "cancel_requested_at = COALESCE(cancel_requested_at, {now})",
                                 f"state = {RUNNING}")

    def _update_each(self, job_ids: Sequence[str], sets: str, where: str) -> int:
        """``UPDATE ... SET sets WHERE where`` for the jobs of ``job_ids``, 500 ids a statement, in
        one transaction; ``{now}`` in ``sets`` is the clock's time as a date. Return the rows changed."""
        changed = 0
        now, now_args = self.clock.stamp(self.connection)
        with transaction.atomic(using=self.alias), self.connection.cursor() as cursor:
            for part in chunks(list(job_ids)):
                cursor.execute(f"UPDATE {JOB} SET {sets.format(now=now)} WHERE {where} AND id IN ({marks(len(part))})",
                               [*now_args, *part])
                changed += cursor.rowcount
        return changed

    def cancel_requested(self, job_ids: Sequence[str]) -> list[str]:
        """See :meth:`Broker.cancel_requested`: a primary-key read, one statement per 500 ids."""
        found: list[str] = []
        with self.connection.cursor() as cursor:
            for part in chunks(list(job_ids)):
                cursor.execute(
                    f"SELECT id FROM {JOB} WHERE id IN ({marks(len(part))}) AND state = {RUNNING} "
                    "AND cancel_requested_at IS NOT NULL",
                    list(part),
                )
                found += [row[0] for row in cursor.fetchall()]
        return found

    def end_cancelled(self, reservation: Reservation, error: str, traceback: str = "",
                      started_at: datetime.datetime | None = None,
                      finished_at: datetime.datetime | None = None) -> bool:
        """See :meth:`Broker.end_cancelled`."""
        sets = f"state = {STOPPED.to}, error = %s, traceback = %s, finished_at = %s, lease_owner = NULL, lease_until = NULL"
        params: list[Any] = [error, traceback, self._adapt(finished_at or timezone.now())]
        if started_at is not None:  # it ran: an execution counts
            sets += f", attempt = attempt + 1, {STARTED}"
            params += [self._adapt(started_at), self._adapt(started_at)]
        return self._fenced(reservation, sets, params)

    def retry_jobs(self, job_ids: Sequence[str], queue: str | None = None, priority: int | None = None) -> int:
        """See :meth:`Broker.retry_jobs`: the rows are locked, requeued and their pending letters marked."""
        if queue is not None:
            self.settings.check_queue(queue)
        if priority is not None:
            validate_priority(priority, ConfigError)
        retried = 0
        with self.write_transaction():
            for part in chunks(list(job_ids)):
                jobs = Job.objects.using(self.alias).filter(pk__in=part, state__in=REPLAY.allowed)
                found = dict(jobs.select_for_update().values_list("pk", "state"))
                if not found:
                    continue
                jobs.filter(pk__in=found, expires_at__lte=self._at()).update(expires_at=None)
                retried += self._requeue_dead(list(found), queue, priority)
                dead = [pk for pk, state in found.items() if state == State.DEAD]
                DeadLetter.objects.using(self.alias).filter(job_id__in=dead, replayed_at__isnull=True).update(
                    replayed_at=timezone.now(), replay_count=F("replay_count") + 1
                )
        return retried

    def purge_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        """See :meth:`Broker.purge_dead`; ``ids`` limits the purge to these dead letters."""
        with transaction.atomic(using=self.alias):
            letters = self.dead_letters(queue)
            if ids is not None:
                letters = letters.filter(pk__in=ids)
            letters = list(letters.values_list("pk", "job_id"))
            for part in chunks(letters):
                Job.objects.using(self.alias).filter(pk__in=[j for _, j in part], state=State.DEAD).delete()
                DeadLetter.objects.using(self.alias).filter(pk__in=[pk for pk, _ in part]).delete()
        return len(letters)

    def forget_group(self, group: str, delete: bool = False) -> int:
        """See :meth:`Broker.forget_group` (django-q2's ``delete_group``); finished jobs only."""
        jobs = Job.objects.using(self.alias).filter(group=group, state__in=FINISHED)
        if delete:
            with transaction.atomic(using=self.alias):
                return jobs.delete()[1].get(JOB_LABEL, 0)
        return jobs.update(group=None)

    # -- upkeep -------------------------------------------------------------------------------
    def wake_by_test_clock(self, clock_now: float) -> list[str]:
        """Make ready the durable jobs a test clock at ``clock_now`` has woken (``testing.frozen_clock``)."""
        return durable.wake_by_test_clock(self, clock_now)

    def reclaim_expired(self) -> int:
        # Clearing the token fences the old holder: its ack no longer matches anything.
        # "state = RUNNING" is the partial index's own term (taskmq_job_leased), the only one SQLite
        # matches it with: "state IN ('RUNNING')", under the statistics of a table of a million
        # finished jobs, scanned the whole table (250 ms a sweep, once a second, write lock held).
        count = self._retried(self._reclaim_expired)
        if count:
            logger.warning("reclaimed %d message(s) whose lease ran out", count)
        # The same sweep wakes durable jobs due before the next one (see durable.wake_due).
        self._retried(lambda: durable.wake_due(self, durable.WAKE_AHEAD))
        return count

    def _reclaim_expired(self) -> int:
        now, now_args = self.clock.at()
        sets = (f"UPDATE {JOB} SET state = {RECLAIM.to}, lease_owner = NULL, lease_token = NULL, lease_until = NULL, "
                f"error = 'lease expired', visible_at = {now}{self._no_flush_from()} "
                f"WHERE state = {RUNNING} AND lease_until < {now}")
        with self.connection.cursor() as cursor:
            if not self.dialect.locks_scanned_rows:
                cursor.execute(sets, [*now_args, *now_args])
                return cursor.rowcount
            # InnoDB: a plain read finds the rows (no lock; nearly always none), then they are
            # updated by primary key, their conditions checked again under the lock.
            cursor.execute(f"SELECT id FROM {JOB} WHERE state = {RUNNING} AND lease_until < {now}", now_args)
            ids = [row[0] for row in cursor.fetchall()]
            count = 0
            for part in chunks(ids):
                cursor.execute(f"{sets} AND id IN ({marks(len(part))})", [*now_args, *now_args, *part])
                count += cursor.rowcount
            return count

    def _retried(self, operation: Callable[[], T]) -> T:
        """Run ``operation`` (one transaction of its own); again, up to :data:`CLAIM_ATTEMPTS`
        times, when the database rolled it back for a deadlock or a lock wait timeout (MySQL):
        nothing it did stays, and another try usually goes through. Not inside a caller's
        transaction, which the rollback ended too."""
        for attempt in range(CLAIM_ATTEMPTS):
            try:
                return operation()
            except Exception as exc:
                if attempt + 1 == CLAIM_ATTEMPTS or self.connection.in_atomic_block or not self.dialect.retryable(exc):
                    raise
                logger.debug("rolled back (%s): trying again", exc)
        raise AssertionError("unreachable")

    def analyze(self) -> None:
        """Refresh the planner's statistics of the job table when they are stale, and vacuum it where
        the server does not (PostgreSQL: see :meth:`.postgresql.PostgresqlDialect.analyze`)."""
        self.dialect.analyze(self.connection)

    def prune_keys(self, batch: int = 1000) -> int:
        """Delete idempotency keys whose TTL ran out and coalescing keys whose job ended (or is
        gone), at most ``batch`` of each per call; return how many."""
        keys = IdempotencyKey.objects.using(self.alias)
        expired = list(keys.filter(expires_at__lt=self._at()).values_list("pk", flat=True)[:batch])
        deleted = keys.filter(pk__in=expired, expires_at__lt=self._at()).delete()[0] if expired else 0
        # A coalescing key whose job ended holds nothing: its next enqueue would take it over, but
        # a key never used again would stay for ever (one row per distinct key).
        unique = UniqueKey.objects.using(self.alias)
        # Looked up by each key's job (NOT EXISTS, by primary key), not as NOT IN the set of every
        # unfinished job: PostgreSQL planned that set as a scan of the whole job table, and on a table
        # of 10 million rows JIT-compiled the plan at every call (0.14 s), even with no key at all.
        holding = Exists(Job.objects.using(self.alias).filter(pk=OuterRef("job_id")).exclude(state__in=FINISHED))
        ended = list(unique.filter(~holding).values_list("pk", flat=True)[:batch])
        if ended:
            # Checked again in the DELETE itself: a job replayed, or a key taken over, since the read stays.
            deleted += unique.filter(~holding, pk__in=ended).delete()[0]
        return deleted

    def prune_workflows(self, batch: int = 100) -> int:
        """See :meth:`Broker.prune_workflows`: a workflow goes once retention deleted its last job."""
        flows = Workflow.objects.using(self.alias)
        jobs_left = Exists(Job.objects.using(self.alias).filter(workflow_step__workflow=OuterRef("pk")))
        ids = list(flows.exclude(state=WorkflowState.RUNNING.value).filter(~jobs_left)
                   .values_list("pk", flat=True)[:batch])
        if not ids:
            return 0
        # (Nothing can reopen them meanwhile: a replay needs a job.) Steps and edges go with them.
        with transaction.atomic(using=self.alias):
            return flows.filter(pk__in=ids).delete()[1].get(Workflow._meta.label, 0)

    def prune(self, keep: int, batch: int = 1000) -> int:
        """Delete the oldest SUCCEEDED jobs beyond the newest ``keep``, at most ``batch`` per call."""
        if keep <= 0:
            return 0
        # The newest success past ``keep`` (the edge), then the oldest ones before it: on a table
        # with a large surplus (millions of rows, or save_limit lowered) the history goes from its
        # old end, never leaving a hole behind the newest ``keep``. Both statements walk the partial
        # index of successes by finish time. Every row deleted finished before the edge, or is the
        # edge, so the newest ``keep`` stay whatever the ties.
        succeeded = JobState.SUCCEEDED.value
        edge = self._finished(succeeded, "finished_at, id", "ORDER BY finished_at DESC LIMIT 1 OFFSET %s", [keep])
        if not edge:
            return 0
        (edge_at, edge_id), = edge  # the edge's time goes back as it came: the same column's format
        ids = self._oldest_finished(succeeded, edge_at, batch)
        if len(ids) < batch:
            ids.append(edge_id)
        return self._delete_jobs(ids, JobState.SUCCEEDED.value)

    def _oldest_finished(self, state: str, before: Any, batch: int) -> list[str]:
        """Ids of the ``batch`` oldest jobs finished in ``state`` before ``before``, for deletion.

        A deleted row stays in the index of finish times until the table is vacuumed, and a walk
        from the index's oldest end steps over every such row: beside 1.1 million deleted rows
        (PostgreSQL, no vacuum since) the select of 100 ids read 2,192 index pages, 19 ms a batch.
        So each walk starts where the last one stopped: a job of ``state`` that finished earlier
        was deleted, or kept (a step of a running workflow), and a job finishing now finishes
        later. Every :data:`REWALK` s a walk starts from the oldest end again, for the kept ones.
        """
        mark = self._deleted_to.get(state)
        if mark is not None and time.monotonic() - mark[1] >= REWALK:
            mark = None
        since, args = ("AND finished_at >= %s ", [mark[0]]) if mark is not None else ("", [])
        rows = self._finished(state, "id, finished_at", f"AND finished_at < %s {since}ORDER BY finished_at LIMIT %s",
                              [before, *args, batch])
        if rows:  # the finish time goes back as it came: the same column's format
            self._deleted_to[state] = (rows[-1][1], mark[1] if mark is not None else time.monotonic())
        return [row[0] for row in rows]

    def _finished(self, state: str, columns: str, rest: str, params: list) -> list[tuple]:
        """Rows of the jobs finished in ``state`` (see :func:`.sql.finished_in`): ``SELECT columns``,
        then ``rest`` of the statement."""
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT {columns} {finished_in(state, self.dialect.finished_indexed)} {rest}", params)
            return cursor.fetchall()

    def paused_queues(self) -> frozenset[str]:
        return frozenset(QueuePause.objects.using(self.alias).values_list("queue", flat=True))

    def pause_queue(self, queue: str, by: str = "") -> bool:
        return QueuePause.objects.using(self.alias).get_or_create(queue=queue, defaults={"paused_by": by})[1]

    def resume_queue(self, queue: str) -> bool:
        return bool(QueuePause.objects.using(self.alias).filter(queue=queue).delete()[0])

    def delete_finished(self, state: str, before: float, batch: int = 500) -> int:
        return self._delete_jobs(self._oldest_finished(state, self._adapt(_aware(before)), batch), state)

    def count_finished(self, state: str, before: float) -> int:
        return self._finished(state, "COUNT(*)", "AND finished_at < %s", [self._adapt(_aware(before))])[0][0]

    def _delete_jobs(self, ids: list[str], state: str) -> int:
        """Delete the jobs of ``ids`` still in ``state``, with their dead letters; return how many.

        Steps of a workflow that has not ended are kept: a step still to run reads its
        dependencies' results (``current_job().upstream``), and a replay needs the failed one.
        """
        if ids:
            among, args = self.dialect.among("s.job_id", ids)
            with self.connection.cursor() as cursor:  # raw: the ORM's query took three times as long
                cursor.execute(f"SELECT s.job_id FROM {workflows.STEP} s JOIN {workflows.FLOW} w "
                               f"ON w.id = s.workflow_id WHERE {among} AND w.state = %s",
                               [*args, WorkflowState.RUNNING.value])
                held = {row[0] for row in cursor.fetchall()}
            ids = [i for i in ids if i not in held]
        if not ids:
            return 0
        if pre_delete.has_listeners(Job) or post_delete.has_listeners(Job):  # the project's receivers run
            return Job.objects.using(self.alias).filter(pk__in=ids, state=state).delete()[0]
        # Two statements instead of Django's collector (a query per relation, then per batch): the
        # monitor prunes while the cluster runs, and at thousands of jobs a second this was a third
        # of its time. A job's dead letters go with it (CASCADE).
        letters, letter_args = self.dialect.among("job_id", ids)
        jobs_, job_args = self.dialect.among("id", ids)
        with self.write_transaction() as cursor:
            cursor.execute(f"DELETE FROM {DEAD_LETTER} WHERE {letters}", letter_args)
            durable.delete_for(cursor, letters, letter_args)  # a durable job's steps and signals go with it
            cursor.execute(f"DELETE FROM {JOB} WHERE {jobs_} AND state = %s", [*job_args, state])
            return cursor.rowcount

    def hold_chore(self, name: str, owner: str, seconds: float) -> bool:
        now, now_args = self.clock.at()
        until, until_args = self.clock.at(seconds)
        with self.connection.cursor() as cursor:
            cursor.execute(f"UPDATE {CHORE} SET owner = %s, until = {until}{self._no_flush_from()} "
                           f"WHERE name = %s AND (until < {now} OR owner = %s)", [owner, *until_args, name, *now_args, owner])
            if cursor.rowcount:
                return True
        # The first time: one of the clusters that race here creates the row, the others see it.
        return Chore.objects.using(self.alias).get_or_create(
            name=name, defaults={"owner": owner, "until": self.now() + seconds})[1]

    def chore_done(self, name: str, deleted: int) -> None:
        chores = Chore.objects.using(self.alias)
        if chores.filter(name=name).update(deleted=F("deleted") + deleted, last_run=timezone.now()):
            return
        # No cluster held it yet (qprune on a new database): the row is created, held by nobody.
        _, created = chores.get_or_create(name=name, defaults={"deleted": deleted, "last_run": timezone.now()})
        if not created:
            chores.filter(name=name).update(deleted=F("deleted") + deleted, last_run=timezone.now())

    def unfinished(self, queues: Sequence[str]) -> bool:
        # One query, one snapshot: separate queries could each miss a job that moves from
        # RUNNING to RETRYING between them.
        now, now_args = self.clock.at()
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {JOB} WHERE queue IN ({marks(len(queues))}) AND (state IN {UNFINISHED} "
                f"OR (state = {RESERVE_FIRST} AND visible_at <= {now})) LIMIT 1",
                [*queues, *now_args],
            )
            return cursor.fetchone() is not None

    def publish_heartbeat(self, cluster_id: str, **fields: Any) -> None:
        """See :meth:`Broker.publish_heartbeat`: ``beat_at`` is the clock's time of the write."""
        beat = RawSQL(*self.clock.stamp(self.connection), output_field=Cluster._meta.get_field("beat_at"))
        Cluster.objects.using(self.alias).update_or_create(id=cluster_id, defaults={**fields, "beat_at": beat})

    def silent_clusters(self, host: str | None, longer_than: float, shorter_than: float) -> list[tuple[str, int]]:
        field = Cluster._meta.get_field("beat_at")
        before = RawSQL(*self.clock.stamp(self.connection, -longer_than), output_field=field)
        after = RawSQL(*self.clock.stamp(self.connection, -shorter_than), output_field=field)
        rows = Cluster.objects.using(self.alias).filter(beat_at__lt=before, beat_at__gt=after).exclude(state="stopped")
        if host is not None:
            rows = rows.filter(host=host)
        return list(rows.values_list("id", "pid"))

    def expire_leases(self, owners: Sequence[str]) -> int:
        """See :meth:`Broker.expire_leases`: the lease ends at the clock's time now (the sweep takes
        what ended before its own now)."""
        now, now_args = self.clock.at()
        expired = 0
        with self.connection.cursor() as cursor:
            for part in chunks(list(owners)):
                cursor.execute(
                    f"UPDATE {JOB} SET lease_until = {now}{self._no_flush_from()} WHERE state = {RUNNING} "
                    f"AND lease_owner IN ({marks(len(part))}) AND lease_until > {now}",
                    [*now_args, *part, *now_args],
                )
                expired += cursor.rowcount
        return expired

    def due_schedules(self, now: datetime.datetime, limit: int = 100) -> list[Schedule]:
        return schedules.due(self, now, limit)

    def disable_schedule(self, schedule_id: int) -> None:
        Schedule.objects.using(self.alias).filter(pk=schedule_id).update(repeats=0)

    def store_schedule(self, name: str, values: Mapping[str, Any], replace: bool = False) -> Schedule:
        return schedules.store(self, name, values, replace)

    def save_schedule(self, schedule: Schedule, fields: Sequence[str] | None = None) -> None:
        schedules.save(self, schedule, fields)

    def pause_schedules(self, schedule_ids: Sequence[int], paused: bool) -> int:
        return schedules.set_paused(self, schedule_ids, paused)

    def delete_schedules(self, schedule_ids: Sequence[int]) -> int:
        return schedules.delete(self, schedule_ids)

    def jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        return Job.objects.using(self.alias).in_bulk(list(job_ids))

    def stats(self) -> list[dict[str, Any]]:
        now, now_args = self.clock.at()
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT queue, priority, "
                f"SUM(CASE WHEN state IN {READY_SQL} AND visible_at <= {now} THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN state IN {READY_SQL} AND visible_at > {now} THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN state = {RUNNING} THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN state = {BURY.to} THEN 1 ELSE 0 END) "
                f"FROM {JOB} WHERE state IN {COUNTED} "
                f"GROUP BY queue, priority ORDER BY queue, priority DESC",
                [*now_args, *now_args],
            )
            return [
                dict(queue=q, priority=p, ready=int(r), delayed=int(d), reserved=int(s), dead=int(x))
                for q, p, r, d, s, x in cursor.fetchall()
            ]


@functools.cache
def _insert_fields() -> list:
    return [f for f in Job._meta.concrete_fields]


@functools.cache
def _timed_positions() -> tuple[int, ...]:
    """The positions of the :data:`TIMED` columns in an insert's values (see :func:`_columns`)."""
    names = [f.attname for f in _insert_fields()]
    return tuple(names.index(name) for name in TIMED)


def _columns(connection) -> tuple[list[str], list, list]:
    """Return (attribute names, converter per column, fields) for inserts.

    Plain values (text, numbers, None) go to the driver as they are; only datetimes and the
    pickled result need the field's own preparation.
    """
    names, converters, fields = [], [], []
    plain = ("TextField", "CharField", "FloatField", "SmallIntegerField", "PositiveIntegerField", "IntegerField",
             "BigIntegerField")
    for field in _insert_fields():
        names.append(field.attname)
        fields.append(field)
        if field.get_internal_type() in plain:
            converters.append(_same)
        else:
            converters.append(functools.partial(_prepare, field, connection))
    return names, converters, fields


def _same(value: Any) -> Any:
    return value


def _prepare(field: Any, connection: Any, value: Any) -> Any:
    return field.get_db_prep_save(value, connection)


def _aware(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
