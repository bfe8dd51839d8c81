"""Claim latency of ordinary work beside many sleeping durable jobs, on PostgreSQL.

    .venv/bin/python benchmarks/durable_sleepers.py [--sleeping 100000] [--claims 200] [--runs 3]
    .venv/bin/python benchmarks/durable_sleepers.py --report benchmarks/results/durable-sleepers.json

On a fresh database ``bench_durable_sleepers`` (``tests.settings_postgresql``), ``--sleeping`` jobs
are stored once, ten hours in the future. Each run then times ``--claims`` claims of one new job
(``Broker.reserve`` of 1, each after an enqueue of it) beside them in three shapes, interleaved:

* ``none``: the jobs parked in a side table (the job table as without them);
* ``suspended``: ``SUSPENDED``, as a durable sleep leaves them (outside the ready index);
* ``delayed``: ``QUEUED`` for ten hours (``delay=``), what a sleep looked like before it had a state
  of its own: the ready index holds them and each claim walks them.

Each shape is vacuumed and analysed before it is timed, as autovacuum would leave it; the jobs the
claims made are deleted between shapes. The machine's foreign load (``hostload.LoadMeter``) is
recorded per measurement. Raw results: ``benchmarks/results/durable-sleepers.json``; ``report.py``
renders them in ARCHIVE.md. The issue's goal: ``suspended`` within 10 % of ``none``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
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

    def claims() -> list[float]:
        times = []
        for _ in range(args.claims):
            async_task("tests.tasks.noop")
            began = time.perf_counter()
            assert len(broker.reserve(["default"], 1, 60, "bench")) == 1
            times.append((time.perf_counter() - began) * 1000)
        return times

    rows = []
    try:
        for _ in range(0, args.sleeping, 5000):
            enqueue_many("tests.tasks.noop", [()] * min(5000, args.sleeping - _), delay=AHEAD)
        sql(f"CREATE TABLE parked (LIKE {job} INCLUDING DEFAULTS)")
        for run in range(1, args.runs + 1):
            order = SHAPES[run % 3:] + SHAPES[:run % 3]  # each shape first once in three runs
            for name in order:
                shape(name)
                with LoadMeter() as meter:
                    times = claims()
                rows.append({"run": run, "shape": name, "sleeping": args.sleeping, "claim_ms": times,
                             "foreign_cores": meter.result["foreign_cores"]})
                print(f"run {run} {name}: {statistics.median(times):.3f} ms a claim "
                      f"(foreign load {meter.result['foreign_cores']} cores)", flush=True)
    finally:
        teardown_databases(state, verbosity=0)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    return {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "runs": args.runs, "sleeping": args.sleeping, "claims": args.claims, "rows": rows}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(rows: list[dict]) -> None:
    """Print the table of ``rows`` (markdown): per shape, the median of each run's median and p99
    claim, with the runs' range, and the ratio of the medians to ``none``'s."""
    def per_run(shape: str, quantile: int) -> list[float]:
        return [statistics.quantiles(r["claim_ms"], n=100)[quantile - 1] if quantile != 50
                else statistics.median(r["claim_ms"]) for r in rows if r["shape"] == shape]

    sleeping = rows[0]["sleeping"]
    base = statistics.median(per_run("none", 50))
    print(f"| {sleeping:,} jobs ten hours ahead | claim p50, ms | claim p99, ms | p50 / none |")
    print("|---|---|---|---|")
    labels = {"none": "none (parked in a side table)", "suspended": "`SUSPENDED` (a durable sleep)",
              "delayed": "`QUEUED` for later (`delay=`)"}
    for shape in SHAPES:
        p50 = per_run(shape, 50)
        print(f"| {labels[shape]} | {_spread(p50)} | {_spread(per_run(shape, 99))} | "
              f"{statistics.median(p50) / base:.2f} |")
    loads = sorted({r["foreign_cores"] for r in rows})
    print(f"\nForeign load per measurement: {', '.join(f'{v:g}' for v in loads)} cores.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleeping", type=int, default=100_000)
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
