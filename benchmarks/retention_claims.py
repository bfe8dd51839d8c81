#!/usr/bin/env python3
"""Claims on a big table, and retention deleting it: the claim's latency on an empty job table
against a table of N old finished rows (interleaved runs), and on that table while a cluster's
retention deletes it; and how fast retention deletes.

    .venv/bin/python benchmarks/retention_claims.py --engine postgresql --finished 10000000 --runs 5
    .venv/bin/python benchmarks/retention_claims.py --engine sqlite --finished 1000000 --runs 5

The fill needs no quiet machine, the timed runs do: ``--fill-only`` first, then ``--reuse-fill``
(and ``--label`` to keep the results of another run beside these).

Two databases of its own (SQLite ``benchmarks/.work/retention-{empty,full}.sqlite3``, PostgreSQL
``bench_retention_empty`` and ``bench_retention_full``), so that the runs on each alternate and
meet the same machine. The full one gets ``--finished`` successes that finished 60 days ago, then
its statistics and a checkpoint (the fill's writes are flushed before anything is timed). A run is
a fresh process that enqueues ``--claims`` ready jobs and then claims them one at a time: one
``Broker.reserve`` of one job (timed), then its ack (not timed). The deleting cluster is a real
``qcluster`` on the full database serving only a queue with no work, so its monitor does nothing but
hold the pruning chore and delete (retention 30 days: all of the fill; as the commit measured
deletes: before 84951c1, 0.1 s of deleting a second in transactions of 500; from it on, paced
batches taking a tenth of its time); the rate is the chore's count of deleted rows over each run.
Raw latencies and rates go to ``benchmarks/results/retention-claims-<engine>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(__file__).resolve().parent / ".work"
RESULTS = Path(__file__).resolve().parent / "results"
QUEUES = {"default": {"weight": 1}, "idle": {"weight": 1}}
OVERRIDES = {"queues": QUEUES, "save_limit": 0, "workers": 1,
             "retention": {"succeeded": 30 * 86400, "failed": None, "dead": None, "expired": None, "cancelled": None}}


def env_for(engine: str, which: str) -> dict[str, str]:
    env = {**os.environ, "TASKMQ_OVERRIDES": json.dumps(OVERRIDES), "PYTHONPATH": str(ROOT)}
    if engine == "postgresql":
        env.update(DJANGO_SETTINGS_MODULE="tests.settings_postgresql", TASKMQ_DB_NAME=f"bench_retention_{which}")
    else:
        env.update(DJANGO_SETTINGS_MODULE="tests.settings_sqlite", TASKMQ_DB_NAME=str(WORK / f"retention-{which}.sqlite3"))
    return env


def django_here(env: dict[str, str]) -> None:
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def create(engine: str, which: str) -> None:
    env = env_for(engine, which)
    if engine == "postgresql":
        name = env["TASKMQ_DB_NAME"]
        for sql in (f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"):
            subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True)
    else:
        WORK.mkdir(exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(env["TASKMQ_DB_NAME"] + suffix).unlink(missing_ok=True)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)


FILL = {
    "postgresql": ("INSERT INTO django_taskmq_job ({columns}) SELECT lpad(to_hex(i), 14, '0') || '0000000000', "
                   "'tests.tasks.noop', 'tests.tasks.noop', 'x', 'default', 0, 'SUCCEEDED', 1, 1, 0, 5, 0, {at}, {at}, "
                   "{at}, '', '' FROM generate_series(1, {count}) AS i",
                   "now() - interval '60 days' + make_interval(secs => i * 0.001)",
                   ["VACUUM ANALYZE django_taskmq_job", "CHECKPOINT"]),
    "sqlite": ("INSERT INTO django_taskmq_job ({columns}) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
               "FROM s WHERE i < {count}) SELECT printf('%014x0000000000', i), 'tests.tasks.noop', 'tests.tasks.noop', "
               "'x', 'default', 0, 'SUCCEEDED', 1, 1, 0, 5, 0, {at}, {at}, {at}, '', '' FROM s",
               "strftime('%Y-%m-%d %H:%M:%f', 'now', '-60 days', printf('+%f seconds', i * 0.001))",
               ["ANALYZE", "PRAGMA wal_checkpoint(TRUNCATE)"]),
}


def fill(engine: str, count: int) -> None:
    django_here(env_for(engine, "full"))
    from django.db import connection

    columns = ("id, func, task_name, payload, queue, priority, state, attempt, deliveries, yields, max_deliveries, "
               "visible_at, enqueued_at, started_at, finished_at, error, traceback")
    insert, at, after = FILL[engine]
    with connection.cursor() as cursor:
        cursor.execute(insert.format(columns=columns, at=at, count=count))
        for sql in after:
            cursor.execute(sql)
    connection.close()


def claims_run(count: int) -> None:
    """In a fresh process (``--claims-run``): enqueue, claim one at a time, print the timings (ms)."""
    django_here({})
    from django_taskmq import enqueue_many
    from django_taskmq.brokers import Ack, get_broker

    broker = get_broker()
    enqueue_many("tests.tasks.noop", [()] * count)
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        (reservation,) = broker.reserve(["default"], 1, 60, "bench:host:1:claims")
        timings.append((time.perf_counter() - started) * 1000)
        broker.ack_many([Ack(reservation)])
    print(json.dumps([round(t, 3) for t in timings]))


def run_claims(engine: str, which: str, count: int) -> list[float]:
    out = subprocess.run([sys.executable, __file__, "--claims-run", "--claims", str(count)], cwd=ROOT,
                         env=env_for(engine, which), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def deleted(engine: str) -> int:
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()\nfrom django_taskmq.models import Chore\n"
                          "r = Chore.objects.filter(name='prune').first(); print(r.deleted if r else 0)"],
                         cwd=ROOT, env=env_for(engine, "full"), check=True, capture_output=True, text=True).stdout
    return int(out.strip())


def summary(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    return {"p50": round(statistics.median(ordered), 3), "p99": round(ordered[int(len(ordered) * 0.99) - 1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fill-only", action="store_true",
                        help="create and fill the databases, measure nothing (the fill needs no quiet machine)")
    parser.add_argument("--reuse-fill", action="store_true",
                        help="keep the full database an earlier --fill-only (same --finished) made")
    parser.add_argument("--label", default="", help="results go to retention-claims-<engine>-<label>.json")
    parser.add_argument("--claims-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.claims_run:
        return claims_run(args.claims)
    for which in ("empty",) if args.reuse_fill else ("empty", "full"):
        create(args.engine, which)
    if not args.reuse_fill:
        started = time.monotonic()
        fill(args.engine, args.finished)
        print(f"filled {args.finished} rows in {time.monotonic() - started:.0f} s", flush=True)
    if args.fill_only:
        return None
    raw: dict[str, list] = {"empty": [], "finished": [], "deleting": [], "empty_beside_deleting": [], "delete_rate": []}
    for i in range(args.runs):  # interleaved, the first of each pair alternating
        for which in (("empty", "full") if i % 2 == 0 else ("full", "empty")):
            raw["empty" if which == "empty" else "finished"].append(run_claims(args.engine, which, args.claims))
    qc = subprocess.Popen([sys.executable, "manage.py", "qcluster", "-Q", "idle", "-w", "1"], cwd=ROOT,
                          env=env_for(args.engine, "full"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    try:
        while deleted(args.engine) == 0:
            time.sleep(0.5)
        for i in range(args.runs):
            before, begun = deleted(args.engine), time.monotonic()
            raw["deleting"].append(run_claims(args.engine, "full", args.claims))
            raw["delete_rate"].append((deleted(args.engine) - before) / (time.monotonic() - begun))
            raw["empty_beside_deleting"].append(run_claims(args.engine, "empty", args.claims))
    finally:
        os.killpg(qc.pid, signal.SIGTERM)
        qc.wait(timeout=60)
    scenarios = ("empty", "finished", "deleting", "empty_beside_deleting")
    per_run = {name: [summary(t) for t in raw[name]] for name in scenarios}
    result = {
        "engine": args.engine, "label": args.label, "finished_rows": args.finished, "claims_per_run": args.claims, "runs": args.runs,
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "per_run": per_run,
        "median_of_runs": {name: {k: statistics.median(r[k] for r in per_run[name]) for k in ("p50", "p99")}
                           for name in scenarios},
        "delete_rows_per_second": [round(r) for r in raw["delete_rate"]],
        "raw_ms": {name: raw[name] for name in scenarios},
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"retention-claims-{args.engine}{'-' + args.label if args.label else ''}.json"
    out.write_text(json.dumps(result, indent=None) + "\n")
    print(json.dumps({k: result[k] for k in ("median_of_runs", "delete_rows_per_second")}, indent=1))
    print(f"raw results: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
