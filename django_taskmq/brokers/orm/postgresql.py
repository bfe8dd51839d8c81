"""PostgreSQL: what the ORM broker does differently on it, and how an idle pusher is woken.

Many hosts share one server: the clock is the server's (``statement_timestamp()``), a claim locks
the heads it reads (``FOR UPDATE SKIP LOCKED``) so concurrent clusters claim disjoint sets,
``GREATEST`` is the scalar maximum, and the hot statements are prepared (psycopg 3).

Waking: ``LISTEN`` on the channel a trigger on the job table notifies after each insert, on the
broker's connection or on ``TASKMQ['listen_database']``'s (a direct one, beside a pooled broker
alias). Before the first wait a probe (:mod:`.notify_probe`) checks that notifications arrive
there; where they do not (a pooler in transaction mode drops them without an error), one warning,
and the pusher polls.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import select
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from django.db import connections, transaction

from ...policy.connections import keepalive_options
from ..clock import POSTGRESQL, Clock
from .dialect import Dialect, register
from .notify_probe import PROBE_WAIT, probe
from .sql import ACK, JOB, QSTATE, READY_SQL, RUNNING, Head
from .wakeup import Waker, sleep

logger = logging.getLogger(__name__)

CHANNEL = "taskmq_job"
ANALYZE_BASE, ANALYZE_SHARE = 50, 0.1  # PostgreSQL's autovacuum_analyze_threshold and _scale_factor
VACUUM_BASE, VACUUM_SHARE = 50, 0.2  # its autovacuum_vacuum_threshold and _scale_factor
# In a FROM clause of a PostgreSQL claim's read: the transaction commits without waiting for the WAL
# flush (what SET LOCAL synchronous_commit TO OFF does, without a round trip of its own).
NO_FLUSH = "set_config('synchronous_commit', 'off', true) AS no_flush"
# The same as a statement of its own, for a transaction whose first statement does not carry it.
SAY_NO_FLUSH = f"SELECT {NO_FLUSH}"
# The ack: the rows of OrmBroker._ack_rows as columns, one array each (started appears twice).
ACK_ARRAYS_SQL = (
    f"UPDATE {JOB} AS j SET state = {ACK.to}, result_package = a.result, started_at = a.started, "
    f"first_started_at = COALESCE(j.first_started_at, j.started_at, a.first), finished_at = a.finished, "
    f"attempt = j.attempt + 1, lease_owner = NULL, lease_until = NULL, error = '', traceback = '' "
    f"FROM unnest(%s::text[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::text[], %s::text[]) "
    f"AS a(result, started, first, finished, id, token) "
    f"WHERE j.id = a.id AND j.lease_token = a.token AND j.state = ANY(%s::text[])"
)
# ACK_ARRAYS_SQL's last parameter: the states an ack may end. A parameter, not literals: planned
# once with the value unknown, the state is not read as "the few RUNNING rows the statistics
# count", which made the planner scan every RUNNING entry of the state index and hash them for
# each ack (16 to 19 ms for a batch on a 10M-row table during a drain) instead of looking the
# acknowledged jobs up by id (docs/decisions.rst).
ACK_STATES = sorted(state.value for state in ACK.allowed)
# The ack of a relaxed bookkeeping block (TASKMQ['durable_outcomes'] False): the same, its commit
# not waiting for the flush. One statement either way, in autocommit or a transaction of its own.
ACK_ARRAYS_NO_FLUSH_SQL = ACK_ARRAYS_SQL.replace(" FROM unnest(", f" FROM {NO_FLUSH}, unnest(", 1)
assert ACK_ARRAYS_NO_FLUSH_SQL != ACK_ARRAYS_SQL
# PostgreSQL's planner counted a key's running rows through whichever partial index of running rows
# it liked best, walking all of them for each keyed row the claim passed: with 300 jobs running and
# 20,000 held behind a key at its limit, 0.8 s a claim, fresh statistics or not. The running rows'
# counts by key are read once per statement instead (an InitPlan, run only when a keyed row is met),
# and each keyed row looks its key up in them (docs/decisions.rst).
KEY_FREE = ("(c.concurrency_key IS NULL OR c.concurrency_limit > COALESCE(((SELECT jsonb_object_agg(k.key, k.n) "
            f"FROM (SELECT r.concurrency_key AS key, COUNT(*) AS n FROM {JOB} r WHERE r.state = {RUNNING} "
            "AND r.concurrency_key IS NOT NULL GROUP BY r.concurrency_key) AS k) ->> c.concurrency_key)::bigint, 0))")
# PostgresqlDialect.claim_plain's statement; {now} is the clock's time, {sets} the claim's UPDATE.
# Parameters: the queues and their weights (arrays), the heads' time, the limit per queue, the time
# again, the claim's values.
PLAIN_CLAIM_SQL = (
    "WITH weighted AS (SELECT * FROM unnest(%s::text[], %s::bigint[]) AS w(queue, weight)), "
    f"heads AS MATERIALIZED (SELECT h.* FROM {NO_FLUSH}, weighted AS q CROSS JOIN LATERAL ("
    f"SELECT c.id, c.queue, c.deliveries, c.max_deliveries, c.expires_at, c.concurrency_key, c.rate_limit "
    f"FROM {JOB} AS c WHERE c.state IN {READY_SQL} AND c.queue = q.queue AND {KEY_FREE} "
    "AND c.visible_at <= {now} ORDER BY c.priority DESC, c.id LIMIT %s FOR UPDATE OF c SKIP LOCKED) AS h), "
    "kinds AS MATERIALIZED (SELECT count(DISTINCT h.queue) AS busy, count(DISTINCT h.queue) = 1 "
    "AND COALESCE(bool_and(h.concurrency_key IS NULL AND h.rate_limit IS NULL "
    "AND (h.expires_at IS NULL OR h.expires_at > {now}) AND h.deliveries < h.max_deliveries), FALSE) "
    f"AND (SELECT count(*) FROM {QSTATE} AS s JOIN weighted AS w ON w.queue = s.queue) "
    "= (SELECT count(*) FROM weighted) AS plain FROM heads AS h), "
    "busy AS MATERIALIZED (SELECT h.queue, count(*) AS n, max(s.served) + count(*) AS after, max(w.weight) AS weight "
    f"FROM heads AS h JOIN {QSTATE} AS s ON s.queue = h.queue JOIN weighted AS w ON w.queue = h.queue "
    "GROUP BY h.queue), "
    "moves AS MATERIALIZED (SELECT s.queue, s.queue = b.queue AS take, CASE WHEN s.queue = b.queue THEN b.n "
    "ELSE (b.after * w.weight + b.weight - 1) / b.weight END AS v "
    f"FROM kinds AS k, busy AS b, weighted AS w JOIN {QSTATE} AS s ON s.queue = w.queue "
    "WHERE k.plain AND (s.queue = b.queue OR s.served < (b.after * w.weight + b.weight - 1) / b.weight)), "
    f"locked AS MATERIALIZED (SELECT queue FROM {QSTATE} WHERE queue IN (SELECT queue FROM moves) "
    "ORDER BY queue FOR UPDATE), "
    f"counted AS (UPDATE {QSTATE} AS s SET served = CASE WHEN m.take THEN s.served + m.v "
    "ELSE GREATEST(s.served, m.v) END FROM moves AS m WHERE s.queue = m.queue AND s.queue IN (SELECT queue FROM locked)), "
    # By primary key, as the full claim's UPDATE: the heads are locked by this statement and were
    # ready then. (With a state condition here the planner, told by stale statistics that few rows
    # were ready, scanned the ready rows' index for each head: 2.3 s for 400 heads beside 20,000.)
    "claimed AS ({sets} WHERE id = ANY(ARRAY(SELECT id FROM heads)) AND (SELECT plain FROM kinds) "
    "RETURNING id, queue, priority, deliveries, yields, max_deliveries, payload) "
    "SELECT k.busy, k.plain, c.* FROM kinds AS k LEFT JOIN claimed AS c ON TRUE"
)
CONNECT_TIMEOUT = 5  # seconds a cluster's connection attempt may take, unless the project says


class PostgresqlDialect(Dialect):
    vendor = "postgresql"
    name = "PostgreSQL"
    clock = POSTGRESQL
    row_locks = True
    greatest = "GREATEST"
    counters_in_claim = True
    claims_plain = True
    no_flush_from = f" FROM {NO_FLUSH}"
    key_free = KEY_FREE

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        # One array, not a placeholder a value: at a few hundred ids the server parses and plans
        # ``= ANY(%s)`` in a third of the time of the IN list (retention's batches).
        return f"{column} = ANY(%s)", [list(values)]

    def seconds_between(self, later: str, earlier: str) -> str:
        return f"EXTRACT(EPOCH FROM ({later} - {earlier}))"

    def connection_limit(self, connection: Any) -> tuple[int, str] | None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('max_connections')::int, "
                           "current_setting('superuser_reserved_connections')::int")
            limit, reserved = cursor.fetchone()
        return limit - reserved, f"max_connections {limit} - superuser_reserved_connections {reserved}"

    def where(self, settings_dict: dict[str, Any]) -> str:
        host = settings_dict.get("HOST") or "the local socket"
        return f"{super().where(settings_dict)} at {host}:{settings_dict.get('PORT') or 5432}"

    @contextlib.contextmanager
    def relaxed(self, connection: Any, state: dict[str, Any]) -> Iterator[None]:
        """Each transaction of the block runs with ``synchronous_commit`` off, set for that
        transaction only (so it holds behind a pooler in transaction mode, and a pooled server
        connection keeps nothing): folded into its first statement where that carries
        :data:`NO_FLUSH` (the ack), else said by a statement of its own before it. A statement that
        commits by itself carries it (``no_flush_from``) or flushes as usual."""
        said: list[Any] = [None]  # the outermost atomic block of the last transaction told so

        def say_no_flush(execute, sql, params, many, context):
            if connection.in_atomic_block and connection.atomic_blocks[0] is not said[0]:
                said[0] = connection.atomic_blocks[0]
                if NO_FLUSH not in sql:
                    with connection.wrap_database_errors:
                        context["cursor"].cursor.execute(SAY_NO_FLUSH)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(say_no_flush):
            yield

    def lock_flow(self, cursor: Any, names: Sequence[str]) -> None:
        if names:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(k)) FROM unnest(%s::text[]) AS k ORDER BY k",
                           [list(names)])

    def released(self, broker: Any, cursor: Any) -> None:
        # The insert trigger's notification, sent at commit (the trigger fires on inserts only).
        cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])

    def waker(self, broker: Any, burst: bool = False) -> Waker:
        alias = broker.settings.listen_database
        listener = connections[alias] if alias is not None and alias != broker.alias else None
        # A burst naps 50 ms at most, and only while its last tasks run: it polls, rather than
        # spend up to PROBE_WAIT checking that LISTEN works.
        return ListenWaker(broker.connection, listener, broker.alias, listen=not burst)

    def heads(self, cursor: Any, queues: Sequence[str], serve: Sequence[str], limit: int, clock: Clock,
              columns: str, floor: str, floor_params: list) -> tuple[dict[str, list[Head]], dict[str, int], float | None]:
        # One round trip for every queue's heads and counter: a LATERAL subquery per queue, each
        # locking its rows with SKIP LOCKED so concurrent clusters claim disjoint sets. It also
        # says that the claim's commit need not wait for the flush (see write_transaction).
        now_sql, now_args = clock.at()
        heads: dict[str, list[Head]] = {queue: [] for queue in serve}
        cursor.execute(
            f"SELECT q.name, s.served, {now_sql}, j.* FROM {NO_FLUSH}, unnest(%s::text[]) AS q(name) "
            f"LEFT JOIN {QSTATE} AS s ON s.queue = q.name LEFT JOIN LATERAL ("
            f"SELECT {columns} FROM {JOB} AS c WHERE c.state IN {READY_SQL} AND c.queue = q.name "
            f"AND q.name = ANY(%s::text[]) {floor}"
            f"AND c.visible_at <= {now_sql} ORDER BY c.priority DESC, c.id LIMIT %s FOR UPDATE OF c SKIP LOCKED) "
            f"AS j ON TRUE",
            [*now_args, list(queues), list(serve), *floor_params, *now_args, limit],
        )
        served: dict[str, int] = {}
        now = None
        for name, count, now, *row in cursor.fetchall():
            if count is not None:
                served[name] = count
            if row[0] is not None:
                heads[name].append(Head(*row))
        for items in heads.values():
            items.sort(key=lambda h: (-h.priority, h.id))
        return heads, served, now

    def claim_plain(self, cursor: Any, queues: Sequence[str], weights: Mapping[str, int], limit: int,
                    clock: Clock, sets: str, values: list) -> list[tuple] | None:
        # The claim of an idle cluster's job in one round trip instead of four (BEGIN, heads,
        # claim, COMMIT): the heads of every queue are locked as in heads(); when they all belong
        # to one queue, with nothing for flow control, expiry or the poison guard to decide, they
        # are its pick order already (pick.plan's one-queue case), so the statement claims them and
        # moves the counters as _counters() would: the busy queue counts them, an idle queue
        # behind the virtual time is lifted to ceil(after * weight / busy weight). Otherwise it
        # claims nothing and says so (the heads' locks end with the statement).
        now, now_args = clock.at()
        cursor.execute(PLAIN_CLAIM_SQL.format(now=now, sets=sets),
                       [list(queues), [weights.get(q, 1) for q in queues], *now_args, limit, *now_args, *values])
        rows = cursor.fetchall()
        busy, plain = rows[0][:2]
        if not plain:
            return [] if busy == 0 else None
        return [row[2:] for row in rows if row[2] is not None]

    def claim(self, cursor: Any, sets: str, values: list, ids: Sequence[str], prefix: str = "",
              prefix_params: Sequence[Any] = ()) -> dict[str, tuple]:
        if not ids:
            return {}
        # One array: one statement text, prepared once (see OrmBroker.hot_cursor).
        cursor.execute(f"{prefix}{sets} WHERE id = ANY(%s::text[]) RETURNING id, deliveries, yields, payload",
                       [*prefix_params, *values, list(ids)])
        return {r[0]: r for r in cursor.fetchall()}

    def served_update(self, queues: Sequence[str], taken: dict[str, int],
                      lifted: dict[str, int]) -> tuple[str, str, list]:
        # The rows are locked in one global order (by queue name) first: concurrent claims that
        # lock the same rows in different orders deadlock. Arrays, not one placeholder per queue:
        # the statement's text stays the same whatever the queues, so it is prepared once.
        return (f"locked AS MATERIALIZED (SELECT queue FROM {QSTATE} WHERE queue = ANY(%s::text[]) "
                f"ORDER BY queue FOR UPDATE)",
                f"UPDATE {QSTATE} AS s SET served = CASE WHEN v.lift THEN GREATEST(s.served, v.n) "
                f"ELSE s.served + v.n END FROM unnest(%s::text[], %s::bigint[], %s::boolean[]) AS v(queue, n, lift) "
                f"WHERE s.queue = v.queue AND s.queue IN (SELECT queue FROM locked)",
                [list(queues), list(queues), [taken.get(q, lifted.get(q)) for q in queues],
                 [q not in taken for q in queues]])

    def insert_many(self, cursor: Any, table: str, columns: str, width: int, rows: list[list]) -> None:
        # COPY fires the INSERT trigger too, so idle clusters are notified as for an INSERT.
        with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for values in rows:
                copy.write_row(values)

    def ack_all(self, broker: Any, rows: list[tuple]) -> int | None:
        # One statement over arrays, whatever the batch: one text to prepare, and the server
        # updates the rows as one set (an executemany runs the UPDATE once per row).
        with broker.hot_cursor() as cursor:
            cursor.execute(ACK_ARRAYS_NO_FLUSH_SQL if broker.relaxed else ACK_ARRAYS_SQL,
                           [*(list(column) for column in zip(*rows)), ACK_STATES])
            return cursor.rowcount

    def analyze(self, connection: Any) -> None:
        """A grown table without statistics can make the claim scan the whole table instead of the
        partial index of ready rows: a tenfold slowdown measured on this kind of machine; and the
        claims' generic plans, made once per connection, follow the table only when it is analysed
        again (an ANALYZE invalidates them). Stale means never analyzed, or more rows changed since
        than autovacuum's own threshold (50 + 10 %): an ANALYZE of a large table with fresh
        statistics costs the cluster a tenth of a second of database time for nothing. One cluster
        at a time: another that looks meanwhile skips (the lock is taken without waiting) rather
        than wait for this ANALYZE's table lock and analyse the table again.

        Where the server's autovacuum is off (or off for the table), the table is also vacuumed
        past autovacuum's own threshold of dead rows (50 + 20 %): each claimed job leaves a dead
        entry in the index of ready rows, which every claim then steps over, so unvacuumed the
        claim grows slower with every job run (docs/decisions.rst). ``SKIP_LOCKED``: a cluster
        whose VACUUM would wait for another's skips it."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT s.n_dead_tup > %s + %s * s.n_live_tup AND (current_setting('autovacuum') = 'off' "
                "OR 'autovacuum_enabled=false' = ANY(COALESCE(c.reloptions, '{}'))) "
                "FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid WHERE s.relid = %s::regclass",
                [VACUUM_BASE, VACUUM_SHARE, JOB])
            row = cursor.fetchone()
            if row is not None and row[0] and not connection.in_atomic_block:
                cursor.execute(f"VACUUM (SKIP_LOCKED) {JOB}")
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext('django_taskmq'), hashtext('analyze'))")
            if not cursor.fetchone()[0]:
                return
            cursor.execute(
                "SELECT n_mod_since_analyze, n_live_tup, COALESCE(last_analyze, last_autoanalyze) IS NOT NULL "
                "FROM pg_stat_user_tables WHERE relid = %s::regclass", [JOB])
            row = cursor.fetchone()
            if row is not None and row[2] and row[0] <= ANALYZE_BASE + ANALYZE_SHARE * row[1]:
                return
            cursor.execute(f"ANALYZE {JOB}")

    def prepared_cursor_class(self) -> type | None:
        return _prepared_cursor_class()

    def prepare(self, options: dict[str, Any], dead_connection_timeout: float | None = None) -> None:
        options.setdefault("connect_timeout", CONNECT_TIMEOUT)
        keepalives = keepalive_options(dead_connection_timeout)
        if _libpq_version() < 120000:  # tcp_user_timeout is libpq 12's: an older one refuses to connect
            keepalives.pop("tcp_user_timeout", None)
        for key, value in keepalives.items():
            options.setdefault(key, value)


register(PostgresqlDialect())


class ListenWaker(Waker):
    """Wakes on a ``NOTIFY`` from the job table's insert trigger, once a probe found that they arrive."""

    def __init__(self, connection, listener=None, broker_alias: str | None = None, listen: bool = True) -> None:
        super().__init__(connection)
        # The connection that LISTENs (the broker's unless TASKMQ['listen_database']), and the
        # alias the probe's NOTIFY goes through (the broker's).
        self.listener = connection if listener is None else listener
        self.broker_alias = broker_alias or connection.alias
        # What the probe found (None: not run yet); False without it when ``listen`` is.
        self.listens: bool | None = None if listen else False
        self._announced = False
        self._listening = False
        self._notified = False

    def _broken(self) -> None:
        self._listening = False
        if self.listener is not self.connection:  # nobody else would notice it broke
            try:
                self.listener.close()
            except Exception:
                pass

    def _wait(self, timeout: float, pipe: Connection | None) -> None:
        if self.listens is None:
            # The probe may block for PROBE_WAIT; it gives way when the sentinel speaks (a stop),
            # and runs again at a later wait.
            found = self._probe(pipe)
            if found is None:
                sleep(timeout, pipe)
                return
            self.listens = found
        if not self.listens:
            sleep(timeout, pipe)
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

    def hears_every_insert(self) -> bool:
        # Once LISTEN is in force, the insert trigger's NOTIFY reaches this connection at every
        # commit, and a notification that arrives while the pusher runs queries is kept (_notified).
        return self.listens is True and self._listening

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


@functools.cache
def _prepared_cursor_class() -> type | None:
    """psycopg 3's server-binding cursor, whose ``execute`` prepares every statement it runs
    (``executemany`` does already); None with psycopg2."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return None
    import psycopg

    class PreparedCursor(psycopg.Cursor):
        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True, binary=binary)

    return PreparedCursor


def _libpq_version() -> int:
    """The version of the libpq the PostgreSQL driver uses (120000 for 12.0); 0 when unknown."""
    try:
        import psycopg

        return psycopg.pq.version()
    except ImportError:
        pass
    try:
        import psycopg2.extensions

        return psycopg2.extensions.libpq_version()
    except ImportError:
        return 0
