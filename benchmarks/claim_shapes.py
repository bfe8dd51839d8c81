"""The claim's shapes, statement by statement: the current transaction against an optimistic
autocommit claim and a pipelined transaction (issue 30), on PostgreSQL, in one run, interleaved.

    .venv/bin/python benchmarks/claim_shapes.py --engine postgresql [--rounds 3] [-n 200] [--backlog 3000]
    .venv/bin/python benchmarks/claim_shapes.py --engine sqlite      # the current claim only
    .venv/bin/python benchmarks/claim_shapes.py --shapes current,full,eager --one-queue  # one statement or four

* ``current``: what ``OrmBroker.reserve`` does (``brokers/orm/postgresql.py``). While only one queue
  has work, one autocommit statement (``claim_plain``: heads locked, counters moved, rows claimed).
  Otherwise, in one transaction, the heads of every queue ``FOR UPDATE SKIP LOCKED`` (one
  statement, which also says ``synchronous_commit off``), the pick in Python, one ``UPDATE ...
  RETURNING`` carrying the served counters' update, ``COMMIT``: three round trips. (Raw files
  written before the one-statement claim existed, 2026-12-02 and earlier, have only the latter.)
* ``optimistic``: a prototype, here and not in the product: the same heads read in autocommit
  without locks, the same pick, then one autocommit ``UPDATE ... SET state = RUNNING ... FROM
  set_config('synchronous_commit', 'off', true) WHERE id = ANY(candidates) AND state IN (ready)
  AND visible_at <= now() RETURNING ...`` with the counters' update in its ``WITH``: two round
  trips. A candidate another claimer took in between fails the ``state`` condition and is not
  returned (a lost race: counted here); the counters count it all the same (the prototype's
  approximation).
* ``full``: the current claim's full transaction every time, never the one-statement claim that
  ``current`` makes when only one queue has work (PostgreSQL, ``claim_plain``).
* ``eager``: the one-statement claim tried at every claim, a backlog's included.
* ``pipelined``: another prototype: the current transaction, locks and all, in psycopg's pipeline
  mode, its ``COMMIT`` sent together with the ``UPDATE`` (``BEGIN`` already goes with the heads):
  two round trips, and the row locks keep concurrent claims disjoint.

Two measurements, each shape in turn (which goes first alternates):

* ``idle``: one job enqueued into an empty table, then one claim of room 2, ``-n`` times per shape;
  each statement timed at the driver (Django's cursor wrapper) and the commit; ms.
* ``shared``: ``--backlog`` jobs on three queues (weights default 1, a 3, b 1, as the benchmark
  project), claimed by 1, 2 and 4 processes at once, room 10 a claim, nothing acked (a claimed row
  leaves the ready set as a running one would) until nothing is left: jobs/s, lost races,
  duplicate claims (a job returned to two claims: must be 0) and the share of each queue in the
  first third of the claims (the weighted round robin: 0.6 of them from ``a``).

Prints a summary and writes ``results/claim-shapes-<engine>.json`` (the raw numbers; ``--out``);
``--report <file>`` prints a raw file's tables.
A development tool for a decision (docs/performance.rst, "The claim, statement by statement"):
the optimistic shape stays out of the product unless these numbers say it wins.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "projects" / "taskmq_project"
QUEUES = ["a", "b", "default"]
SHAPES = ("current", "full", "eager", "optimistic", "pipelined")


def _setup(engine: str) -> None:
    sys.path[:0] = [str(PROJECT), str(HERE)]
    os.environ["DJANGO_SETTINGS_MODULE"] = "taskmq_project.settings"
    os.environ["BENCH_ENGINE"] = engine
    import django

    django.setup()


# -- the statement timer ---------------------------------------------------------------------------

TIMES: list[tuple[str, float]] = []  # (statement label, seconds) of the claim being timed


def _label(sql: str) -> str:
    words = " ".join(sql.split())
    if words.startswith("WITH weighted"):
        return "one-statement claim"
    if words.startswith("SELECT q.name"):
        return "heads SELECT"
    if "UPDATE django_taskmq_job" in words:
        return "claim UPDATE (+ counters)"
    if words.startswith("SELECT 1 FROM"):
        return "has_ready SELECT"
    if words.startswith("SELECT c.id"):
        return "heads SELECT"  # SQLite: one per queue (summed per claim)
    if words.startswith("SELECT queue, served"):
        return "served counters SELECT"
    if words.startswith("UPDATE django_taskmq_queuestate"):
        return "served counters UPDATE"
    return words[:40]


def _install_timer() -> None:
    from django.db.backends import utils
    from django.db.backends.base.base import BaseDatabaseWrapper

    original = utils.CursorWrapper.execute

    def execute(self, sql, params=None):
        start = time.perf_counter()
        try:
            return original(self, sql, params)
        finally:
            TIMES.append((_label(sql), time.perf_counter() - start))

    utils.CursorWrapper.execute = execute
    commit = BaseDatabaseWrapper._commit

    def timed_commit(self):
        start = time.perf_counter()
        try:
            return commit(self)
        finally:
            TIMES.append(("COMMIT", time.perf_counter() - start))

    BaseDatabaseWrapper._commit = timed_commit


# -- the optimistic prototype ----------------------------------------------------------------------

def optimistic_broker():
    """An OrmBroker whose claim is the optimistic autocommit shape (PostgreSQL, no flow limits)."""
    from django_taskmq.brokers import get_broker
    from django_taskmq.brokers.orm.broker import OrmBroker
    from django_taskmq.brokers.orm.postgresql import NO_FLUSH
    from django_taskmq.brokers.orm.sql import JOB, READY_SQL, RESERVE
    from django_taskmq.brokers.base import Reservation
    from django_taskmq.policy import pick

    class Unlocked:
        """A cursor whose heads statement neither locks nor says no-flush (autocommit: useless)."""

        def __init__(self, cursor):
            self.cursor = cursor

        def execute(self, sql, params=None):
            sql = sql.replace(" FOR UPDATE OF c SKIP LOCKED", "").replace(f"FROM {NO_FLUSH}, ", "FROM ")
            return self.cursor.execute(sql, params)

        def __getattr__(self, name):
            return getattr(self.cursor, name)

    class Optimistic(OrmBroker):
        lost = 0  # candidates another claimer took between the read and the update

        def _reserve(self, queues, limit, lease, owner, above):
            assert above is None and not self.connection.in_atomic_block
            clock = self.clock
            token = uuid.uuid4().hex
            with self.hot_cursor() as hot:
                candidates, served, now = self._heads(Unlocked(hot), queues, queues, limit, clock)
                chosen, _ = pick.plan(candidates, served, self.settings.weights(), limit)
                if not chosen:
                    return []
                counters = self._counters(chosen, candidates, served)
                prefix, prefix_params = "", []
                if counters is not None:
                    prefix, prefix_params = f"WITH {counters[0]}, counted AS ({counters[1]}) ", counters[2]
                until, until_args = clock.at(lease)
                now_sql, now_args = clock.at()
                hot.execute(
                    f"{prefix}UPDATE {JOB} SET state = {RESERVE.to}, deliveries = deliveries + 1, "
                    f"lease_owner = %s, lease_token = %s, lease_until = {until}, cluster = %s FROM {NO_FLUSH} "
                    f"WHERE id = ANY(%s::text[]) AND state IN {READY_SQL} AND visible_at <= {now_sql} "
                    "RETURNING id, deliveries, yields, payload",
                    [*prefix_params, owner, token, *until_args, owner.split(":", 1)[0], [c.id for c in chosen],
                     *now_args])
                rows = {r[0]: r for r in hot.fetchall()}
            self.lost += len(chosen) - len(rows)
            return [Reservation(c.id, c.queue, c.priority, rows[c.id][1], rows[c.id][2], token, owner,
                                c.max_deliveries, rows[c.id][3]) for c in chosen if c.id in rows]

    plain = get_broker()
    return Optimistic(plain.settings, plain.alias)


def pipelined_broker():
    """An OrmBroker whose claim transaction runs in psycopg's pipeline mode, its COMMIT sent with the
    claim's UPDATE: BEGIN + heads in one round trip, UPDATE + COMMIT in the next."""
    import contextlib

    from django_taskmq.brokers import get_broker
    from django_taskmq.brokers.orm.broker import OrmBroker
    from django_taskmq.brokers.orm.sql import JOB, RESERVE
    from django_taskmq.brokers.base import Reservation

    class Pipelined(OrmBroker):
        @contextlib.contextmanager
        def write_transaction(self, durable=True):
            with super().write_transaction(durable) as cursor:
                with self.connection.connection.pipeline():
                    yield cursor
                    start = time.perf_counter()
                TIMES.append(("pipeline exit", time.perf_counter() - start))

        def _claim(self, cursor, chosen, token, owner, lease, counters=None):
            if not chosen:
                return []
            prefix, prefix_params = "", []
            if counters is not None:
                prefix, prefix_params = f"WITH {counters[0]}, counted AS ({counters[1]}) ", counters[2]
            until, until_args = self.clock.at(lease)
            cursor.execute(
                f"{prefix}UPDATE {JOB} SET state = {RESERVE.to}, deliveries = deliveries + 1, lease_owner = %s, "
                f"lease_token = %s, lease_until = {until}, cluster = %s WHERE id = ANY(%s::text[]) "
                "RETURNING id, deliveries, yields, payload",
                [*prefix_params, owner, token, *until_args, owner.split(":", 1)[0], [c.id for c in chosen]])
            start = time.perf_counter()
            cursor.cursor.connection.commit()  # sent with the UPDATE: one round trip for both
            TIMES.append(("COMMIT with the UPDATE (pipeline sync)", time.perf_counter() - start))
            rows = {r[0]: r for r in cursor.fetchall()}
            return [Reservation(c.id, c.queue, c.priority, rows[c.id][1], rows[c.id][2], token, owner,
                                c.max_deliveries, rows[c.id][3]) for c in chosen if c.id in rows]

    plain = get_broker()
    return Pipelined(plain.settings, plain.alias)


def hinted_broker(plain_next: bool):
    """An OrmBroker whose every claim tries the one-statement claim (``eager``, what the broker did
    before it kept it for claims after one that took less than it asked for) or never does
    (``full``: the transaction every time)."""
    from django_taskmq.brokers import get_broker
    from django_taskmq.brokers.orm.broker import OrmBroker

    class Hinted(OrmBroker):
        def _reserve(self, *args, **kwargs):
            self._plain_next = plain_next
            return super()._reserve(*args, **kwargs)

    plain = get_broker()
    return Hinted(plain.settings, plain.alias)


def broker_for(shape: str):
    from django_taskmq.brokers import get_broker

    broker = {"optimistic": optimistic_broker, "pipelined": pipelined_broker,
              "full": lambda: hinted_broker(False), "eager": lambda: hinted_broker(True)}.get(shape, get_broker)()
    broker.reclaim_every = float("inf")  # as the pusher's: sweeps run beside the claims, not inside
    return broker


def _empty() -> None:
    from django.db import connection
    from django_taskmq.models import Job, QueueState

    Job.objects.all().delete()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Both tables: autovacuum may be off (it is on this project's machines), and every claim
            # updates the served counters.
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
            cursor.execute(f"VACUUM ANALYZE {QueueState._meta.db_table}")


# -- idle ------------------------------------------------------------------------------------------

def idle(shapes: list[str], n: int) -> dict:
    from django_taskmq import async_task

    brokers = {shape: broker_for(shape) for shape in shapes}
    got: dict[str, list] = {shape: [] for shape in shapes}
    for i in range(n + 5):
        order = shapes if i % 2 == 0 else shapes[::-1]
        for shape in order:
            async_task("benchtasks.noop")
            TIMES.clear()
            start = time.perf_counter()
            claimed = brokers[shape].reserve(QUEUES, 2, 30, "bench:host:1:x")
            total = time.perf_counter() - start
            assert len(claimed) == 1, claimed
            if i >= 5:
                got[shape].append({"total": total, "statements": list(TIMES)})
    summary = {}
    for shape, runs in got.items():
        labels: dict[str, list[float]] = {}
        for run in runs:
            seen: dict[str, float] = {}
            for label, seconds in run["statements"]:
                seen[label] = seen.get(label, 0.0) + seconds
            for label, seconds in seen.items():
                labels.setdefault(label, []).append(seconds)
        totals = [r["total"] for r in runs]
        summary[shape] = {"claims": len(runs), "total_ms": _ms(totals),
                          "statements_ms": {label: _ms(v) | {"claims": len(v)} for label, v in labels.items()}}
        summary[shape]["python_ms"] = _ms([r["total"] - sum(s for _, s in r["statements"]) for r in runs])
    return summary


def _ms(values: list[float]) -> dict:
    ms = sorted(v * 1000 for v in values)
    return {"p50": round(statistics.median(ms), 3), "min": round(ms[0], 3), "max": round(ms[-1], 3),
            "p90": round(ms[int(0.9 * (len(ms) - 1))], 3)}


# -- shared backlog --------------------------------------------------------------------------------

def _claimer(engine: str, shape: str, start_at: float, out) -> None:
    _setup(engine)
    broker = broker_for(shape)
    owner = f"bench:host:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    while time.time() < start_at:
        time.sleep(0.001)
    claims, empty = [], 0
    while empty < 3:
        got = broker.reserve(QUEUES, 10, 300, owner)
        if not got:
            empty += 1
            continue
        empty = 0
        claims.append((time.time(), [(r.job_id, r.queue) for r in got]))
    out.put({"claims": claims, "lost": getattr(broker, "lost", 0)})


def shared(engine: str, shape: str, processes: int, backlog: int, queues: list[str]) -> dict:
    from django.db import connection
    from django_taskmq.api import enqueue_many
    from django_taskmq.models import Job, QueueState

    _empty()
    QueueState.objects.all().update(served=0)
    for queue in queues:
        enqueue_many("benchtasks.noop", [()] * (backlog // len(queues)), queue=queue)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {Job._meta.db_table}")
    connection.close()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    start_at = time.time() + 2.0  # every process imported and connected first
    procs = [context.Process(target=_claimer, args=(engine, shape, start_at, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    claims = sorted(c for r in results for c in r["claims"])
    ids = [job for _, jobs in claims for job, _ in jobs]
    first_claim, last_claim = claims[0][0], claims[-1][0]
    third = [queue for _, jobs in claims for _, queue in jobs][: len(ids) // 3]
    return {"shape": shape, "processes": processes, "backlog": backlog, "backlog_queues": queues, "claimed": len(ids),
            "duplicates": len(ids) - len(set(ids)), "lost_races": sum(r["lost"] for r in results),
            "claims": len(claims), "seconds": round(last_claim - first_claim, 4),
            "jobs_per_s": round(len(ids) / max(last_claim - first_claim, 1e-9), 1),
            "first_third_shares": {q: round(third.count(q) / len(third), 3) for q in QUEUES}}


# -- main ------------------------------------------------------------------------------------------

def _fresh(engine: str) -> None:
    from django.core.management import call_command
    from django.db import connection

    if engine == "postgresql":
        import psycopg
        from benchdb import pg_params

        with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                [os.environ["BENCH_PG_NAME"]]).fetchone():
                conn.execute(f'CREATE DATABASE "{os.environ["BENCH_PG_NAME"]}"')
    call_command("migrate", verbosity=0)
    if engine == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
    _empty()


def _load() -> list[float]:
    return list(os.getloadavg())


def report(raw: dict) -> None:
    """Print the summary of a raw file: median (min–max) over the rounds of each round's figure."""

    def cell(values: list[float], digits: int = 3) -> str:
        return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"
                if values else "–")

    shapes = [s for s in SHAPES if any(s in r for r in raw["idle"])]
    loads = [r[key][0] for r in raw["idle"] + raw["shared"] for key in ("loadavg_before", "loadavg_after")]
    print(f"{raw['engine']}, commit {raw['commit']}{' + uncommitted edits' if raw.get('uncommitted') else ''}, "
          f"{raw['date']}, {len(raw['idle'])} rounds, {raw['cpus']} CPUs, load average (1 min) during the run "
          f"{cell(loads, 2)}.")
    print()
    print(f"Idle: one job, one claim of room 2, {raw['options']['n']} claims per shape and round; each round's "
          "p50, ms (a statement's time includes its round trip; on PostgreSQL psycopg sends BEGIN before the first one, within its time):")
    print()
    for r in raw["idle"]:  # files written before these statements had names of their own
        for s in shapes:
            r[s]["statements_ms"] = {_label(label): v for label, v in r[s]["statements_ms"].items()}
    labels = sorted({label for r in raw["idle"] for s in shapes for label in r[s]["statements_ms"]})
    print("| | " + " | ".join(shapes) + " |")
    print("|---" * (len(shapes) + 1) + "|")
    print("| whole claim | " + " | ".join(cell([r[s]["total_ms"]["p50"] for r in raw["idle"]]) for s in shapes) + " |")
    for label in labels:
        print(f"| {label} | " + " | ".join(cell([r[s]["statements_ms"][label]["p50"] for r in raw["idle"]
                                                 if label in r[s]["statements_ms"]]) for s in shapes) + " |")
    print("| Python (the rest) | " + " | ".join(cell([r[s]["python_ms"]["p50"] for r in raw["idle"]])
                                              for s in shapes) + " |")
    print()
    where = ("one queue" if raw["options"].get("one_queue") else
             "three queues (weights a 3, b 1, default 1)")
    print(f"Shared backlog: {raw['options']['backlog']} jobs on {where}, claimed "
          "10 at a time by 1, 2 and 4 processes until none is left; jobs/s, median (min–max) over the rounds; "
          "lost races and duplicate claims summed over the rounds; the share of queue a in the first third of "
          "the claims (its weight says 0.6 with three queues):")
    print()
    print("| processes | shape | jobs/s | lost races | duplicate claims | share of a |")
    print("|---|---|---|---|---|---|")
    for processes in sorted({r["processes"] for r in raw["shared"]}):
        for shape in shapes:
            rows = [r for r in raw["shared"] if r["processes"] == processes and r["shape"] == shape]
            print(f"| {processes} | {shape} | {cell([r['jobs_per_s'] for r in rows], 0)} | "
                  f"{sum(r['lost_races'] for r in rows)} | {sum(r['duplicates'] for r in rows)} | "
                  f"{cell([r['first_third_shares']['a'] for r in rows], 2)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", type=int, default=200, help="idle claims per shape and round")
    parser.add_argument("--backlog", type=int, default=3000)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="PostgreSQL: the shapes compared")
    parser.add_argument("--one-queue", action="store_true",
                        help="the shared backlog in one queue (the one-statement claim's case) instead of three")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="print the summary of a raw file")
    args = parser.parse_args()
    if args.report:
        report(json.loads(args.report.read_text()))
        return 0
    tmp = tempfile.mkdtemp(prefix="claim-shapes-")
    os.environ.setdefault("BENCH_SQLITE_PATH", os.path.join(tmp, "claims.sqlite3"))
    os.environ.setdefault("BENCH_PG_NAME", "bench_claim_shapes")
    os.environ["BENCH_TASKMQ_DURABLE_OUTCOMES"] = "0"
    _setup(args.engine)
    _fresh(args.engine)
    _install_timer()
    shapes = args.shapes.split(",") if args.engine == "postgresql" else ["current"]
    assert set(shapes) <= set(SHAPES), shapes
    backlog_queues = ["default"] if args.one_queue else QUEUES
    raw: dict = {"engine": args.engine, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                          text=True).stdout.strip(),
                 "uncommitted": subprocess.run(["git", "status", "--porcelain", "--", "django_taskmq", "benchmarks"],
                                               cwd=HERE, capture_output=True, text=True).stdout.splitlines(),
                 "machine": platform.node(), "cpus": os.cpu_count(), "options": vars(args) | {"out": None},
                 "idle": [], "shared": []}
    for round_ in range(1, args.rounds + 1):
        before = _load()
        _empty()
        result = idle(shapes[round_ % len(shapes):] + shapes[:round_ % len(shapes)], args.n)
        raw["idle"].append({"round": round_, "loadavg_before": before, "loadavg_after": _load(), **result})
        print(f"round {round_} idle: " + "; ".join(f"{s} {r['total_ms']['p50']} ms "
                                                   f"{ {k: v['p50'] for k, v in r['statements_ms'].items()} }"
                                                   for s, r in result.items()), flush=True)
        for processes in [int(p) for p in args.processes.split(",")]:
            for shape in shapes[round_ % len(shapes):] + shapes[:round_ % len(shapes)]:
                before = _load()
                row = shared(args.engine, shape, processes, args.backlog, backlog_queues)
                raw["shared"].append({"round": round_, "loadavg_before": before, "loadavg_after": _load(), **row})
                print(f"round {round_} shared {processes} x {shape}: {row['jobs_per_s']} jobs/s, "
                      f"duplicates {row['duplicates']}, lost {row['lost_races']}, shares {row['first_third_shares']}",
                      flush=True)
    out = args.out or HERE / "results" / f"claim-shapes-{args.engine}.json"
    out.write_text(json.dumps(raw, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
