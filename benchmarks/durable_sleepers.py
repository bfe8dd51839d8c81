"""Claim latency of ordinary work beside many sleeping durable jobs, on PostgreSQL.

    .venv/bin/python benchmarks/durable_sleepers.py [--sleeping 1000,10000,100000] [--claims 200] [--runs 3]
    .venv/bin/python benchmarks/durable_sleepers.py --report benchmarks/results/durable-sleepers.json

On a fresh database ``bench_durable_sleepers`` (``tests.settings_postgresql``), jobs ten hours in
the future are stored, first as many as the smallest of ``--sleeping``, then more up to each next
size. At each size, each run times ``--claims`` claims of one new job (``Broker.reserve`` of 1,
each after an enqueue of it) beside them in three shapes, interleaved:

* ``none``: the jobs parked in a side table (the job table as without them);
* ``suspended``: ``SUSPENDED``, as a durable sleep leaves them (outside the ready index);
* ``delayed``: ``QUEUED`` for ten hours (``delay=``), what a sleep looked like before it had a state
  of its own: the ready index holds them and each claim walks them.

Each shape is vacuumed and analysed before it is timed, as autovacuum (or, with it off, the
cluster's scheduler: ``broker.analyze``) would leave it, and the table's dead rows are recorded
(``pg_stat_user_tables.n_dead_tup``); the jobs the claims made are deleted between shapes. Each
claim is timed twice: by the client (``claim_ms``: the call, with the round trips and the waits
for a core), and by the server (``server_ms``: the sum of the durations the server logs for the
claim's statements, ``log_min_duration_statement`` 0 sent to this session as LOG messages; needs
a superuser). On a machine whose other work takes most of its cores the client's figure is mostly
waiting, and a shape's median can move by 2x between runs for no reason of its own: the server's
figure is what the sleepers cost. The machine's foreign load (``hostload.LoadMeter``) is recorded
per measurement. Raw results: ``benchmarks/results/durable-sleepers.json``; ``report.py`` renders
them in ARCHIVE.md. The issue's goal: ``suspended`` within 10 % of ``none``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]
OUT = ROOT / "benchmarks" / "results" / "durable-sleepers.json"
SHAPES = ("none", "suspended", "delayed")
AHEAD = 36000  # seconds: the sleepers wake in ten hours


def measure(args: argparse.Namespace) -> dict:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings_postgresql"
    os.environ.setdefault("TASKMQ_DB_NAME", "bench_durable_sleepers")
    import django
    from django.test.utils import setup_databases, teardown_databases

    django.setup()
    from django.db import connection

    from hostload import LoadMeter
    from django_taskmq import async_task, enqueue_many
    from django_taskmq.brokers import get_broker
    from django_taskmq.models import Job

    job = Job._meta.db_table
    state = setup_databases(verbosity=0, interactive=False)
    broker = get_broker()

    def sql(*statements: str) -> None:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    def shape(name: str) -> None:
        """Put the sleepers in shape ``name`` (from any other), then vacuum and analyse."""
        far = time.time() + AHEAD / 2
        sql(f"DELETE FROM {job} WHERE visible_at < {far}")  # the claims' jobs
        if name == "none":
            sql(f"INSERT INTO parked SELECT * FROM {job} WHERE visible_at >= {far}",
                f"DELETE FROM {job} WHERE visible_at >= {far}")
        else:
            sql(f"INSERT INTO {job} SELECT * FROM parked", "DELETE FROM parked",
                f"UPDATE {job} SET state = '{'SUSPENDED' if name == 'suspended' else 'QUEUED'}' "
                f"WHERE visible_at >= {far}")
        sql(f"VACUUM ANALYZE {job}")

    def dead_rows() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass", [job])
            return cursor.fetchone()[0]

    logged: list[str] = []
    connection.ensure_connection()
    connection.connection.add_notice_handler(lambda notice: logged.append(notice.message_primary or ""))

    def claims() -> tuple[list[float], list[float]]:
        """The client's and the server's milliseconds of each claim."""
        times, server = [], []
        sql("SET log_min_duration_statement = 0", "SET client_min_messages = log")
        for _ in range(args.claims):
            async_task("tests.tasks.noop")
            logged.clear()
            began = time.perf_counter()
            assert len(broker.reserve(["default"], 1, 60, "bench")) == 1
            times.append((time.perf_counter() - began) * 1000)
            server.append(sum(float(m.group(1)) for line in logged
                              if (m := re.match(r"duration: ([0-9.]+) ms", line))))
        sql("SET log_min_duration_statement = -1", "SET client_min_messages = notice")
        return times, server

    rows = []
    stored = 0
    try:
        sql(f"CREATE TABLE parked (LIKE {job} INCLUDING DEFAULTS)")
        for size in sorted(args.sleeping):
            for start in range(stored, size, 5000):
                enqueue_many("tests.tasks.noop", [()] * min(5000, size - start), delay=AHEAD)
            stored = size
            for run in range(1, args.runs + 1):
                order = SHAPES[run % 3:] + SHAPES[:run % 3]  # each shape first once in three runs
                for name in order:
                    shape(name)
                    dead = dead_rows()
                    with LoadMeter() as meter:
                        times, server = claims()
                    rows.append({"run": run, "shape": name, "sleeping": size, "claim_ms": times,
                                 "server_ms": server, "dead_rows": dead,
                                 "foreign_cores": meter.result["foreign_cores"]})
                    print(f"{size} run {run} {name}: {statistics.median(times):.3f} ms a claim, "
                          f"{statistics.median(server):.3f} ms in the server ({dead} dead rows; "
                          f"foreign load {meter.result['foreign_cores']} cores)", flush=True)
    finally:
        teardown_databases(state, verbosity=0)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    return {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "runs": args.runs, "sleeping": sorted(args.sleeping), "claims": args.claims, "rows": rows}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(rows: list[dict]) -> None:
    """Print the table of ``rows`` (markdown): per size and shape, the median of each run's median
    and p99 claim as the client timed it and its ratio to ``none``'s, the median of each run's
    median as the server timed it and of its ratio to the same run's ``none``, with the runs' range."""
    def per_run(size: int, shape: str, quantile: int, key: str = "claim_ms") -> list[float]:
        return [statistics.quantiles(r[key], n=100)[quantile - 1] if quantile != 50 else statistics.median(r[key])
                for r in rows if r["shape"] == shape and r["sleeping"] == size]

    labels = {"none": "none (parked in a side table)", "suspended": "`SUSPENDED` (a durable sleep)",
              "delayed": "`QUEUED` for later (`delay=`)"}
    timed = all("server_ms" in r for r in rows)
    if timed:
        print("| jobs ten hours ahead | shape | client p50, ms | client p99, ms | client p50 / none | "
              "server p50, ms | server p50 / none, per run | dead rows |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print("| jobs ten hours ahead | shape | claim p50, ms | claim p99, ms | p50 / none |")
        print("|---|---|---|---|---|")
    for size in sorted({r["sleeping"] for r in rows}):
        base = statistics.median(per_run(size, "none", 50))
        for shape in SHAPES:
            p50 = per_run(size, shape, 50)
            cells = [f"{size:,}", labels[shape], _spread(p50), _spread(per_run(size, shape, 99)),
                     f"{statistics.median(p50) / base:.2f}"]
            if timed:
                server = per_run(size, shape, 50, "server_ms")
                dead = [r["dead_rows"] for r in rows if r["shape"] == shape and r["sleeping"] == size]
                # Each run's ratio to that run's none: the shapes of a run met the same machine.
                ratios = [a / b for a, b in zip(server, per_run(size, "none", 50, "server_ms"))]
                cells += [_spread(server), _spread(ratios), f"{min(dead)}-{max(dead)}"]
            print("| " + " | ".join(cells) + " |")
    loads = sorted({r["foreign_cores"] for r in rows})
    print(f"\nForeign load per measurement: {min(loads):g} to {max(loads):g} cores "
          f"(median {statistics.median(loads):g}).")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleeping", type=lambda text: [int(size) for size in text.split(",")],
                        default=[1000, 10_000, 100_000], help="sizes, comma-separated")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report", type=Path, help="print the table of a saved results file and exit")
    args = parser.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text())["rows"])
        return 0
    raw = measure(args)
    args.out.write_text(json.dumps(raw, indent=1) + "\n")
    report(raw["rows"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
