#!/usr/bin/env python3
"""Claims on a big table, and retention deleting it: the claim's latency on an empty job table,
with N old finished rows, and with N old finished rows while a cluster's retention deletes them;
and how fast retention deletes.

    .venv/bin/python benchmarks/retention_claims.py --engine postgresql --finished 10000000 --runs 3
    .venv/bin/python benchmarks/retention_claims.py --engine sqlite --finished 1000000 --runs 3

Its own database (SQLite ``benchmarks/.work/retention.sqlite3``, PostgreSQL ``bench_retention``).
A claim is one ``Broker.reserve`` of one job (timed) followed by its ack (not timed), repeated
``--claims`` times over a ready set of that many jobs. The finished rows are successes that finished
60 days ago (retention 30 days deletes them all). The deleting cluster is a real ``qcluster`` serving
only a queue with no work, so its monitor does nothing but hold the pruning chore and delete (0.1 s
of deleting a second, in transactions of 500); the rate is the chore's count of deleted rows over the
measuring time. Raw latencies and rates go to ``benchmarks/results/retention-claims-<engine>.json``.
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


def setup(engine: str) -> dict[str, str]:
    env = {"TASKMQ_OVERRIDES": json.dumps(OVERRIDES), "PYTHONPATH": str(ROOT)}
    if engine == "postgresql":
        for sql in ("DROP DATABASE IF EXISTS bench_retention", "CREATE DATABASE bench_retention"):
            subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True)
        env.update(DJANGO_SETTINGS_MODULE="tests.settings_postgresql", TASKMQ_DB_NAME="bench_retention")
    else:
        WORK.mkdir(exist_ok=True)
        path = WORK / "retention.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        env.update(DJANGO_SETTINGS_MODULE="tests.settings_sqlite", TASKMQ_DB_NAME=str(path))
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return {**os.environ, **env}


def fill(count: int) -> None:
    from django.db import connection

    columns = ("id, func, task_name, payload, queue, priority, state, attempt, deliveries, yields, max_deliveries, "
               "visible_at, enqueued_at, started_at, finished_at, error, traceback")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            at = "now() - interval '60 days' + make_interval(secs => i * 0.001)"
            cursor.execute(f"INSERT INTO django_taskmq_job ({columns}) SELECT lpad(to_hex(i), 14, '0') || "
                           f"'0000000000', 'tests.tasks.noop', 'tests.tasks.noop', 'x', 'default', 0, 'SUCCEEDED', "
                           f"1, 1, 0, 5, 0, {at}, {at}, {at}, '', '' FROM generate_series(1, {count}) AS i")
            cursor.execute("VACUUM ANALYZE django_taskmq_job")
        else:
            at = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-60 days', printf('+%f seconds', i * 0.001))"
            cursor.execute(f"INSERT INTO django_taskmq_job ({columns}) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL "
                           f"SELECT i + 1 FROM s WHERE i < {count}) SELECT printf('%014x0000000000', i), "
                           f"'tests.tasks.noop', 'tests.tasks.noop', 'x', 'default', 0, 'SUCCEEDED', 1, 1, 0, 5, 0, "
                           f"{at}, {at}, {at}, '', '' FROM s")
            cursor.execute("ANALYZE")


def claims(count: int) -> list[float]:
    """Enqueue ``count`` ready jobs; claim and ack them one at a time; return each claim's ms."""
    from django_taskmq import enqueue_many
    from django_taskmq.brokers import get_broker

    broker = get_broker()
    enqueue_many("tests.tasks.noop", [()] * count)
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        (reservation,) = broker.reserve(["default"], 1, 60, "bench:host:1:claims")
        timings.append((time.perf_counter() - started) * 1000)
        broker.ack(reservation)
    return timings


def deleted() -> int:
    from django_taskmq.models import Chore

    row = Chore.objects.filter(name="prune").first()
    return row.deleted if row else 0


def summary(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    return {"p50": round(statistics.median(ordered), 3), "p99": round(ordered[int(len(ordered) * 0.99) - 1], 3),
            "max": round(ordered[-1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = setup(args.engine)
    from django.db import connection

    raw: dict[str, list] = {"empty": [], "finished": [], "deleting": [], "delete_rate": []}
    for _ in range(args.runs):
        raw["empty"].append(claims(args.claims))
    fill(args.finished)
    connection.close()
    for _ in range(args.runs):
        raw["finished"].append(claims(args.claims))
    qc = subprocess.Popen([sys.executable, "manage.py", "qcluster", "-Q", "idle", "-w", "1"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while deleted() == 0:
            time.sleep(0.2)
        for _ in range(args.runs):
            before, started = deleted(), time.monotonic()
            raw["deleting"].append(claims(args.claims))
            raw["delete_rate"].append((deleted() - before) / (time.monotonic() - started))
    finally:
        os.killpg(qc.pid, signal.SIGTERM)
        qc.wait(timeout=60)
    result = {
        "engine": args.engine, "finished_rows": args.finished, "claims_per_run": args.claims, "runs": args.runs,
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "summary": {
            **{name: {key: [summary(t)[key] for t in raw[name]] for key in ("p50", "p99", "max")}
               for name in ("empty", "finished", "deleting")},
            "delete_rows_per_second": [round(r) for r in raw["delete_rate"]],
        },
        "raw_ms": {name: [[round(x, 3) for x in t] for t in raw[name]] for name in ("empty", "finished", "deleting")},
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"retention-claims-{args.engine}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(f"raw results: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
