"""Flow control inside the ORM broker's claim: concurrency keys, queue caps, rate limits.

The decisions are :func:`policy.flow.admit`'s; this module reads what it needs in the claim's
transaction and writes back what changed. Counts come from the job table itself (a job holds its
key while it is RUNNING), so a crashed cluster's keys free when its leases are reclaimed and no
count can leak. Rate-limit state is one row per limit (``FlowBucket``).

Concurrent claims serialise per key, per capped queue and per rate limit through the engine's
dialect: on PostgreSQL a transaction-scoped advisory lock per key and queue (taken in one sorted
order, :meth:`.Dialect.lock_flow`), ``FOR UPDATE`` on the rate rows. SQLite runs the whole claim
under its write lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ...conf import Settings
from ...models import Job
from ...policy import flow, pick
from ...signals import job_held
from ..clock import Clock
from .dialect import Dialect
from .sql import BUCKET, READY_SQL, RUNNING, marks

logger = logging.getLogger("django_taskmq.flow")

JOB = Job._meta.db_table
HELD_LOG_EVERY = 10.0  # seconds between two log lines for the same reason a job waits


class FlowGate:
    """The flow-control step of one ORM broker's claims."""

    def __init__(self, settings: Settings, dialect: Dialect) -> None:
        self.settings = settings
        self.dialect = dialect  # the engine's locks and INSERT-or-skip
        self.caps = settings.queue_caps()
        self.queue_rates = settings.queue_rates()
        self.seen = bool(self.caps or self.queue_rates)  # once a claim met a keyed or limited job
        # When a rate limit that held a job opens next, on this host's monotonic clock: the limits'
        # times are the queue clock's, which may differ from this host's wall clock.
        self.opens_at: float | None = None
        self._logged: dict[str, float] = {}

    def closed(self, cursor, queues: Sequence[str], clock: Clock) -> tuple[list[str], list[str]]:
        """Return (queues to serve, task paths whose rate limit is closed) before reading heads.

        A queue at its concurrency cap or with a closed rate limit is left out of the claim.
        """
        if not self.seen:
            return list(queues), []
        now, now_args = clock.at()
        key_column = cursor.db.ops.quote_name("key")  # a reserved word on MySQL
        cursor.execute(f"SELECT {key_column}, tat - {now} FROM {BUCKET} WHERE tat > {now}", [*now_args, *now_args])
        shut = {key: opens_in for key, opens_in in cursor.fetchall()}  # seconds until each opens
        funcs = [key[5:] for key in shut if key.startswith("task:")]
        full = {q for q, n in self._running_queues(cursor, queues).items() if n >= self.caps[q]}
        open_queues = [q for q in queues if f"queue:{q}" not in shut and q not in full]
        self.opens_at = time.monotonic() + min(shut.values()) if shut else None
        return open_queues, funcs

    def choose(self, cursor, candidates: dict[str, list], served: dict[str, int], limit: int,
               now: float) -> list | None:
        """Return the candidates to claim, in pick order, or None when no flow limit applies.

        ``now`` is the clock's time the candidates were read at (the rate limits' times are its). Takes the locks, counts what runs, asks :func:`policy.flow.admit`, writes the rate limits
        that moved and reports why jobs wait.
        """
        heads = [h for items in candidates.values() for h in items]
        keyed = any(h.key is not None or h.rate is not None for h in heads)
        capped = [q for q in candidates if q in self.caps or q in self.queue_rates]
        if not keyed and not capped:
            return None
        self.seen = True
        keys = sorted({h.key for h in heads if h.key is not None})
        self.dialect.lock_flow(cursor, sorted(keys + [f"queue:{q}" for q in capped if q in self.caps]))
        running_keys = self._running_keys(cursor, keys)
        running_queues = self._running_queues(cursor, capped)
        buckets = sorted({f"task:{h.func}" for h in heads if h.rate is not None}
                         | {f"queue:{q}" for q in capped if q in self.queue_rates})
        tats = self._lock_buckets(cursor, buckets)
        ordered, _ = pick.plan(candidates, served, self.settings.weights(), len(heads))
        verdict = flow.admit(
            ordered, limit, now,
            key_of=lambda h: (h.key, h.key_limit or 1) if h.key is not None else None,
            queue_of=lambda h: h.queue,
            buckets_of=self._buckets_of,
            running_keys=running_keys, queue_caps=self.caps, running_queues=running_queues, tats=tats,
        )
        if verdict.tats:
            cursor.executemany(f"UPDATE {BUCKET} SET tat = %s WHERE {cursor.db.ops.quote_name('key')} = %s",
                               [(tat, key) for key, tat in sorted(verdict.tats.items())])
        if verdict.opens_at is not None:
            opens_at = time.monotonic() + verdict.opens_at - now
            self.opens_at = opens_at if self.opens_at is None else min(self.opens_at, opens_at)
        self._report(verdict.held)
        return verdict.admitted

    def wait(self) -> float | None:
        """Seconds until a rate limit that held a job opens, or None."""
        if self.opens_at is None:
            return None
        return max(self.opens_at - time.monotonic(), 0.0)

    # -- reading the counts -----------------------------------------------------------------
    def _buckets_of(self, head: Any) -> Iterable[tuple[str, flow.Rate]]:
        if head.rate is not None:
            yield f"task:{head.func}", flow.parse_rate(head.rate)
        rate = self.queue_rates.get(head.queue)
        if rate is not None:
            yield f"queue:{head.queue}", rate

    def _running_keys(self, cursor, keys: Sequence[str]) -> dict[str, int]:
        return count_by(cursor, "concurrency_key", keys)

    def _running_queues(self, cursor, queues: Sequence[str]) -> dict[str, int]:
        return count_by(cursor, "queue", [q for q in queues if q in self.caps])

    def _lock_buckets(self, cursor, buckets: Sequence[str]) -> dict[str, float | None]:
        if not buckets:
            return {}
        key_column = cursor.db.ops.quote_name("key")
        self.dialect.insert_or_skip(cursor, BUCKET, [key_column, "tat"], [(b, 0) for b in buckets])
        lock = f" ORDER BY {key_column} FOR UPDATE" if self.dialect.row_locks else ""
        cursor.execute(f"SELECT {key_column}, tat FROM {BUCKET} WHERE {key_column} IN ({marks(len(buckets))}){lock}",
                       list(buckets))
        return {key: (tat or None) for key, tat in cursor.fetchall()}

    def _report(self, held: dict[str, list]) -> None:
        """Say why jobs wait: the ``job_held`` signal each time, a log line per reason now and then."""
        now = time.monotonic()
        for reason, jobs in held.items():
            if job_held.has_listeners():
                job_held.send_robust(sender=Job, job_ids=[j.id for j in jobs], reason=reason)
            if now - self._logged.get(reason, -HELD_LOG_EVERY) >= HELD_LOG_EVERY:
                self._logged[reason] = now
                logger.info("%d job(s) wait, not delivered: %s (e.g. job %s)", len(jobs), reason, jobs[0].id)


def count_by(cursor, column: str, values: Sequence[str], states: str = f"({RUNNING})") -> dict[str, int]:
    """Return how many jobs in ``states`` (running by default) each of ``values`` of ``column`` has."""
    if not values:
        return {}
    cursor.execute(
        f"SELECT {column}, COUNT(*) FROM {JOB} WHERE state IN {states} AND {column} IN ({marks(len(values))}) "
        f"GROUP BY {column}",
        list(values),
    )
    return dict(cursor.fetchall())


def status(cursor, settings: Settings, clock: Clock) -> dict[str, Any]:
    """Return what flow control holds now: keys, waiting jobs, queue caps and rate limits in use."""
    cursor.execute(
        f"SELECT concurrency_key, COUNT(*), MAX(concurrency_limit) FROM {JOB} WHERE state = {RUNNING} "
        f"AND concurrency_key IS NOT NULL GROUP BY concurrency_key ORDER BY concurrency_key"
    )
    keys = {key: {"running": n, "limit": limit or 1} for key, n, limit in cursor.fetchall()}
    for key, n in count_by(cursor, "concurrency_key", list(keys), states=READY_SQL).items():
        keys[key]["waiting"] = n
    caps = settings.queue_caps()
    running = count_by(cursor, "queue", list(caps))
    queues = {q: {"running": running.get(q, 0), "cap": cap} for q, cap in sorted(caps.items())}
    now, now_args = clock.at()
    key_column = cursor.db.ops.quote_name("key")
    cursor.execute(f"SELECT {key_column}, tat - {now} FROM {BUCKET} ORDER BY {key_column}", now_args)
    # (Rows named lock:... are MySQL's flow-control locks, not rate limits: see brokers/orm/mysql.py.)
    rates = {key: {"next_start_in": round(max(opens_in, 0.0), 3)} for key, opens_in in cursor.fetchall()
             if not key.startswith("lock:")}
    return {"keys": keys, "queues": queues, "rates": rates}
