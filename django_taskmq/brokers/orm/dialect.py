"""What differs per database engine under the one ORM broker: the dialect seam.

The broker (``broker.py``) holds the rules and the statements every engine shares; a
:class:`Dialect` says what one engine does its own way: its clock (``brokers/clock.py``), whether a
claim locks the rows it reads (``FOR UPDATE SKIP LOCKED``), the scalar maximum, prepared
statements, the options of the cluster's connections, and how an idle pusher is woken. Each engine
is one module of this package named for Django's ``connection.vendor`` (``postgresql.py``,
``sqlite.py``) that registers its dialect when imported: a new engine is a new module.

An engine without a module is refused: by a system check at start-up (:func:`engine_problem`,
which needs no connection, so a missing driver does not hide the reason) and by
:func:`dialect_for`, never by SQL errors at the first claim.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...exceptions import ConfigError
from .sql import JOB, KEY_FREE, QSTATE, READY_SQL, Head, chunks, marks

if TYPE_CHECKING:
    from ..clock import Clock
    from .wakeup import Waker

#: What to say of engines Django supports that have no module here (yet).
NOT_YET = {"oracle": "Oracle is not supported"}
ADVICE = "Use PostgreSQL or MySQL/MariaDB (several hosts) or SQLite (one host) for TASKMQ['database']."

_DIALECTS: dict[str, Dialect] = {}


class Dialect:
    """One engine's ways. Subclasses set the attributes; the methods have the common default."""

    #: Django's ``connection.vendor`` of the engine, and the name of its module here.
    vendor: str
    #: The engine's name in messages.
    name: str
    #: Where the engine's statements read the time.
    clock: Clock
    #: True: a claim locks the heads it reads (``FOR UPDATE ... SKIP LOCKED``) so that concurrent
    #: claimers take disjoint sets; False: the claim's transaction holds the database's write lock.
    row_locks: bool
    #: The SQL function of the larger of two values (``GREATEST``; SQLite's scalar ``MAX``).
    greatest: str
    #: True: the served counters' update rides in the claim's own statement (a ``WITH`` prefix).
    counters_in_claim: bool = False
    #: True: :meth:`claim_plain` claims in one statement when only one queue has work.
    claims_plain: bool = False
    #: True: an UPDATE with a range condition locks every index entry it scans, not only the rows
    #: it changes (InnoDB): sweeps first find their rows with a plain read, then update by key.
    locks_scanned_rows: bool = False
    #: True: :meth:`flush_deferred` does something (the broker enters it only then).
    defers_flush: bool = False
    #: A ``FROM`` clause that makes the UPDATE it is added to (one that commits by itself) commit
    #: without waiting for the flush, inside a relaxed ``OrmBroker.bookkeeping`` block; "": none
    #: (the block's own setting covers it, or the engine has no such thing).
    no_flush_from: str = ""
    #: The condition on a ready row ``c`` that its concurrency key, if any, is below its limit
    #: (:data:`.sql.KEY_FREE`, or the engine's own way of finding the key's running rows).
    key_free: str = KEY_FREE
    #: Name the partial index of finished jobs in the queries of retention and ``save_limit``
    #: (see :func:`.sql.finished_in`).
    finished_indexed: bool = False
    #: (start, end) of an INSERT that skips rows whose key exists; {last} in the end is the last column.
    insert_ignore: tuple[str, str] = ("INSERT INTO", " ON CONFLICT DO NOTHING")

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """The condition that ``column`` is one of ``values``, and its parameters: ``IN`` with a
        placeholder a value."""
        return f"{column} IN ({marks(len(values))})", list(values)

    def server_problems(self, connection: Any) -> list[tuple[str, str, str]]:
        """Return (check id, problem, what to change) for each reason the broker cannot run on the
        server behind ``connection`` (its version, its settings); queries the database."""
        return []

    def retryable(self, exc: BaseException) -> bool:
        """True when ``exc`` rolled a transaction back for a reason that may not happen again
        (MySQL's deadlock and lock wait timeout): the claim that met it is retried whole."""
        return False

    def seconds_between(self, later: str, earlier: str) -> str:
        """SQL for the seconds from the datetime column ``earlier`` to ``later`` (a float)."""
        raise NotImplementedError(f"{type(self).__name__} must implement seconds_between()")

    def created_by_connecting(self, connection: Any) -> bool:
        """True when the database does not exist and connecting would create it empty (an SQLite
        file): the start-up check says so instead of connecting."""
        return False

    def connection_limit(self, connection: Any) -> tuple[int, str] | None:
        """Return how many connections the server allows clients like ours, and how that is
        computed (for messages); None: no limit worth checking (queries the database)."""
        return None

    def where(self, settings_dict: dict[str, Any]) -> str:
        """Name the database for messages: ``sqlite /path/db.sqlite3``."""
        return f"{self.vendor} {settings_dict.get('NAME')}"

    # -- transactions ------------------------------------------------------------------------
    def write_lock(self, connection: Any, cursor: Any) -> None:
        """Take the write lock at the start of a write transaction where the engine would take it late."""

    def flush_deferred(self, connection: Any, state: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
        """Run a block whose commits need not wait for the disk flush (a claim: see
        ``OrmBroker.write_transaction``); ``state`` is the broker's, for what the dialect keeps."""
        return contextlib.nullcontext()

    def relaxed(self, connection: Any, state: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
        """Run a block of the cluster's own bookkeeping whose commits need not wait for the disk
        flush (``TASKMQ['durable_outcomes']`` False; see ``OrmBroker.bookkeeping``). This default
        is :meth:`flush_deferred`'s: the connection's own setting, for the whole block. MySQL has
        none per session or transaction (``innodb_flush_log_at_trx_commit`` is global): nothing."""
        return self.flush_deferred(connection, state) if self.defers_flush else contextlib.nullcontext()

    def lock_wait(self, connection: Any, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Run a block that waits at most ``seconds`` for a lock another writer holds, where the
        engine would wait longer (SQLite's busy timeout); elsewhere as it is."""
        return contextlib.nullcontext()

    def lock_flow(self, cursor: Any, names: Sequence[str]) -> None:
        """Serialize the claims that admit jobs under the flow-control limits ``names`` (concurrency
        keys, capped queues) until the transaction ends. Nothing where one writer at a time is the rule."""

    def ready_in(self, queues: int, above: bool = False) -> str:
        """SQL: job ``c`` is ready in one of ``queues`` queues (one placeholder each), and with
        ``above`` of a priority greater than one more placeholder; it walks the index of ready jobs."""
        return f"c.state IN {READY_SQL} AND c.queue IN ({marks(queues)})" + (" AND c.priority > %s" if above else "")

    # -- statements: the portable form here, an engine's own where it has a faster one ----------
    def heads(self, cursor: Any, queues: Sequence[str], serve: Sequence[str], limit: int, clock: Clock,
              columns: str, floor: str, floor_params: list) -> tuple[dict[str, list[Head]], dict[str, int], float | None]:
        """Return the first ``limit`` ready rows of each queue in ``serve`` (``columns``, filtered by
        ``floor``), the served counter of each of ``queues``, and the time they were visible at
        (None: read it from the clock). Locked with ``SKIP LOCKED`` where the engine has row locks."""
        lock = " FOR UPDATE SKIP LOCKED" if self.row_locks else ""
        now = clock.local_now()  # one time for every queue's heads on a host clock
        now_sql, now_args = ("%s", [now]) if now is not None else clock.at()
        heads: dict[str, list[Head]] = {}
        for queue in serve:
            cursor.execute(
                f"SELECT {columns} FROM {JOB} AS c WHERE c.state IN {READY_SQL} AND c.queue = %s {floor}"
                f"AND c.visible_at <= {now_sql} ORDER BY c.priority DESC, c.id LIMIT %s{lock}",
                [queue, *floor_params, *now_args, limit],
            )
            heads[queue] = [Head(*row) for row in cursor.fetchall()]
        cursor.execute(f"SELECT queue, served FROM {QSTATE} WHERE queue IN ({marks(len(queues))})", list(queues))
        return heads, dict(cursor.fetchall()), now

    def claim_plain(self, cursor: Any, queues: Sequence[str], weights: Mapping[str, int], limit: int,
                    clock: Clock, sets: str, values: list) -> list[tuple] | None:
        """Claim in one statement that commits by itself, where :attr:`claims_plain`: the first
        ``limit`` ready rows of the one queue of ``queues`` that has work, counted in the served
        counters as :meth:`OrmBroker._reserve` counts them. Return the claimed rows (id, queue,
        priority, deliveries, yields, max_deliveries, payload), [] when no queue has work, or None
        when the claim needs the full transaction: several queues with work (the weighted pick), a
        head with flow control, expired or out of deliveries, or a counter row missing."""
        return None

    def claim(self, cursor: Any, sets: str, values: list, ids: Sequence[str], prefix: str = "",
              prefix_params: Sequence[Any] = ()) -> dict[str, tuple]:
        """Run the claim's ``UPDATE`` (``sets``, ``values``) on ``ids``; return (id, deliveries,
        yields, payload) by id for the rows it updated."""
        rows: dict[str, tuple] = {}
        for part in chunks(ids):
            cursor.execute(f"{sets} WHERE id IN ({marks(len(part))}) RETURNING id, deliveries, yields, payload",
                           [*values, *part])
            rows.update((r[0], r) for r in cursor.fetchall())
        return rows

    def update_returning(self, cursor: Any, update: str, params: Sequence[Any], columns: str, key: str,
                         key_params: Sequence[Any]) -> list[tuple]:
        """Run ``update`` and return ``columns`` of the rows it changed; ``key`` (a condition on the
        job table, with ``key_params``) finds them again where the engine has no ``RETURNING``."""
        cursor.execute(f"{update} RETURNING {columns}", list(params))
        return list(cursor.fetchall())

    def served_update(self, queues: Sequence[str], taken: dict[str, int],
                      lifted: dict[str, int]) -> tuple[str, str, list]:
        """Return (lock CTE or "", UPDATE, parameters) that add ``taken`` to the served counters and
        lift the ``lifted`` queues to at least their value."""
        cases, params = [], []
        for queue in queues:
            if queue in taken:
                cases.append("WHEN %s THEN served + %s")
                params += [queue, taken[queue]]
            else:
                cases.append(f"WHEN %s THEN {self.greatest}(served, %s)")
                params += [queue, lifted[queue]]
        # One writer at a time: no lock order to keep.
        return ("", f"UPDATE {QSTATE} SET served = CASE queue {' '.join(cases)} END WHERE queue IN ({marks(len(queues))})",
                [*params, *queues])

    def insert_or_skip(self, cursor: Any, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows`` (values of the quoted ``columns``, the key first) into ``table``, skipping
        those whose key exists; where the engine locks rows, an existing row is locked for writing
        (sorted: concurrent callers lock in one order)."""
        start, end = self.insert_ignore
        cursor.executemany(f"{start} {table} ({', '.join(columns)}) VALUES ({marks(len(columns))})"
                           f"{end.format(last=columns[-1])}", sorted(rows))

    def take_key(self, connection: Any, cursor: Any, table: str, key_column: str, key: str, job_id: str,
                 states: str) -> tuple[str, str]:
        """Make the coalescing key ``key`` of ``table`` exist (held by ``job_id`` for ``states`` if
        it is new), locked for writing until the transaction ends; return its (job_id, states):
        ``job_id`` itself when the key is new. The primary key decides between concurrent callers
        of one key, which wait here for each other. The portable form: an upsert whose update
        (a no-op) locks an existing row, with ``RETURNING`` where the engine has it."""
        returning = connection.features.can_return_columns_from_insert
        cursor.execute(f"INSERT INTO {table} ({key_column}, job_id, states) VALUES (%s, %s, %s) "
                       f"ON CONFLICT ({key_column}) DO UPDATE SET job_id = {table}.job_id"
                       f"{' RETURNING job_id, states' if returning else ''}", [key, job_id, states])
        if not returning:  # (an SQLite before 3.35: its write lock is held, nothing else to lock)
            cursor.execute(f"SELECT job_id, states FROM {table} WHERE {key_column} = %s", [key])
        holder, held_for = cursor.fetchone()
        return holder, held_for

    def add_to(self, cursor: Any, table: str, keys: Sequence[str], sums: Sequence[str],
               rows: Sequence[tuple]) -> None:
        """Add rows (values of ``keys``, then of ``sums``) to a rollup (the throughput's, the
        timings'): a new key is inserted, an existing one has the sums added (sorted: concurrent
        recorders lock in one order)."""
        added = ", ".join(f"{column} = {table}.{column} + excluded.{column}" for column in sums)
        columns = ", ".join([*keys, *sums])
        cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks(len(keys) + len(sums))}) "
                           f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {added}", sorted(rows))

    def insert_many(self, cursor: Any, table: str, columns: str, width: int, rows: list[list]) -> None:
        """Insert ``rows`` (values of ``columns``) into ``table``: multi-row INSERTs."""
        row = f"({marks(width)})"
        for part in chunks(rows, 100):
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * len(part))}",
                           [v for values in part for v in values])

    def insert_one(self, connection: Any, table: str, columns: str, width: int, values: list) -> bool:
        """Insert one row by the engine's fastest path if it has one; False: the broker's INSERT."""
        return False

    def ack_all(self, broker: Any, rows: list[tuple]) -> int | None:
        """Acknowledge ``rows`` (see ``OrmBroker._ack_rows``) in one statement if the engine can;
        None: the broker's statement per row. Inside a relaxed bookkeeping block
        (``broker.relaxed``) the statement says that its commit need not flush, where the engine
        says that per statement."""
        return None

    def analyze(self, connection: Any) -> None:
        """Refresh the planner's statistics of the job table when they are stale (where it matters)."""

    def released(self, broker: Any, cursor: Any) -> None:
        """Jobs became ready by an update (workflow steps released) in ``cursor``'s transaction:
        wake idle pushers where the engine's wake-up only sees inserts. This default does nothing
        (SQLite's wakes on any commit; a polling engine sees them at its next poll)."""

    def waker(self, broker: Any, burst: bool = False) -> Waker:
        """Return what an idle pusher of ``broker`` sleeps on; this default polls."""
        from .wakeup import Waker

        return Waker(broker.connection)

    def prepared_cursor_class(self) -> type | None:
        """A cursor class that prepares every statement it runs, for the hot statements; None: none."""
        return None

    def prepare(self, options: dict[str, Any], dead_connection_timeout: float | None = None) -> None:
        """Set the ``OPTIONS`` of the cluster's connections (timeouts, locking) in ``options``."""

    def connected(self, connection: Any, dead_connection_timeout: float | None) -> None:
        """Set up a new connection of the cluster (Django's, connected) where ``OPTIONS`` cannot."""

    def bound_statements(self, connection: Any, seconds: float) -> bool:
        """Make every statement of ``connection`` (Django's, connected) end within about ``seconds``
        where the engine can do it alone, and return True; False (this default): the cluster times
        them itself (``cluster/statement_clock.py``)."""
        return False


def register(dialect: Dialect) -> None:
    """Make ``dialect`` the one of its engine (an engine module calls this when imported)."""
    _DIALECTS[dialect.vendor] = dialect


def dialect_named(vendor: str) -> Dialect | None:
    """The dialect of the engine ``vendor`` (Django's ``connection.vendor``); None: not supported."""
    if vendor not in _DIALECTS and vendor.isidentifier():
        try:
            importlib.import_module(f"{__package__}.{vendor}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{vendor}":  # the module exists and lacks something
                raise
    return _DIALECTS.get(vendor)


def dialect_for(connection: Any) -> Dialect:
    """Return the dialect of Django's ``connection``; an engine without one is a ConfigError."""
    dialect = dialect_named(connection.vendor)
    if dialect is None:
        raise ConfigError(f"database {connection.alias!r}: {unsupported(connection.vendor)}. {ADVICE}")
    return dialect


def unsupported(vendor: str) -> str:
    return NOT_YET.get(vendor, f"the database engine {vendor!r} is not supported by django_taskmq")


def vendor_of(alias: str) -> str:
    """The vendor of the database ``alias`` without connecting: its backend's where the backend's
    driver imports, else guessed from the last part of its ``ENGINE`` (a missing driver must not
    hide the reason a check fails)."""
    from django.conf import settings
    from django.db.utils import load_backend

    engine = settings.DATABASES[alias].get("ENGINE", "")
    try:
        return load_backend(engine).DatabaseWrapper.vendor
    except Exception:
        name = engine.rsplit(".", 1)[-1]
        return {"sqlite3": "sqlite", "postgis": "postgresql", "spatialite": "sqlite"}.get(name, name)


def engine_problem(alias: str) -> str | None:
    """Say why the broker cannot run on the database ``alias``; None when its engine has a dialect."""
    vendor = vendor_of(alias)
    if dialect_named(vendor) is not None:
        return None
    from django.conf import settings

    engine = settings.DATABASES[alias].get("ENGINE", "")
    return f"TASKMQ['database'] {alias!r} uses the engine {engine!r}: {unsupported(vendor)}"
