"""A backlog held behind a concurrency key at its limit: what it costs each claim, per engine.

    .venv/bin/python benchmarks/held_keys.py [--runs 3] [--engines sqlite,postgresql,mysql] [--ref COMMIT]
    python3 benchmarks/held_keys.py --report benchmarks/results/held_keys.json

Per measurement, on a fresh database of the test settings (``tests.settings_<engine>``, database
``bench_held_keys``): ``--running`` jobs of ``--keys`` other keys and one job of key ``hot`` (limit 1)
are claimed (``RUNNING``), then ``--held`` jobs of ``hot`` and 20 free jobs are queued behind them,
and the broker's own ``analyze`` runs, as a cluster's upkeep would (PostgreSQL: ``ANALYZE`` of the
table, which has changed; SQLite and MariaDB: nothing, so SQLite's planner has no statistics).
Then ``--claims`` times each, through the broker's public calls: ``has_ready`` (the pusher's look
for work) and ``reserve`` of 8 (the first claims take the free jobs, the later ones find none;
every one walks past the held rows). A child process per measurement, with ``--ref``'s
``django_taskmq`` (exported with ``git archive``) first on its path for the other code,
interleaved with the working tree round by round. Raw results: ``results/held_keys.json``,
rendered into ARCHIVE.md by ``report.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "held_keys.json"
DB_NAME = "bench_held_keys"  # a bench_ database: hostload.py counts its server process as the run's
sys.path[:0] = [str(HERE)]

from cpu_by_process import interleaved  # noqa: E402
from hostload import LoadMeter  # noqa: E402

CHILD = r"""
import json, os, sys, time
import django
django.setup()
import django_taskmq
from django.core.management import call_command
from django_taskmq import enqueue_many
from django_taskmq.brokers import get_broker

tree = os.environ.get("HELD_TREE")
assert not tree or django_taskmq.__file__.startswith(tree), django_taskmq.__file__
call_command("migrate", verbosity=0)
running, held, claims, keys = (int(v) for v in sys.argv[1:5])
broker = get_broker()
for i in range(keys):
    enqueue_many("tests.tasks.noop", [()] * (running // keys), concurrency_key=f"k{i}", concurrency_limit=1000)
enqueue_many("tests.tasks.noop", [()], concurrency_key="hot", concurrency_limit=1)
taken = 0
while True:
    got = len(broker.reserve(["default"], 500, 3600, "bench-owner"))
    if not got:
        break
    taken += got
assert taken == running // keys * keys + 1, taken
enqueue_many("tests.tasks.noop", [()] * held, concurrency_key="hot", concurrency_limit=1)
enqueue_many("tests.tasks.noop", [()] * 20)
broker.analyze()  # the statistics as a cluster's upkeep leaves them (SQLite, MariaDB: none of its own)
times = {"has_ready_ms": [], "reserve_ms": []}
free = 0
for _ in range(claims):
    t = time.perf_counter()
    broker.has_ready(["default"])
    times["has_ready_ms"].append(round((time.perf_counter() - t) * 1000, 3))
for _ in range(claims):
    t = time.perf_counter()
    free += len(broker.reserve(["default"], 8, 3600, "bench-owner"))
    times["reserve_ms"].append(round((time.perf_counter() - t) * 1000, 3))
assert free == 20, free  # the held rows hid none of the free ones
print(json.dumps(times))
"""


def fresh_database(engine: str) -> str:
    """Create the engine's benchmark database afresh; return its NAME for the settings."""
    if engine == "sqlite":
        path = os.path.join(tempfile.gettempdir(), f"{DB_NAME}.sqlite3")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        return path
    if engine == "postgresql":
        import psycopg

        with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
            conn.execute(f"CREATE DATABASE {DB_NAME}")
        return DB_NAME
    import MySQLdb

    conn = MySQLdb.connect(host="127.0.0.1", user="root", passwd="", autocommit=True)
    try:
        cursor = conn.cursor()
        cursor.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
        cursor.execute(f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4")
    finally:
        conn.close()
    return DB_NAME


def measure_one(engine: str, tree: Path | None, args: argparse.Namespace) -> dict:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=f"tests.settings_{engine}", TASKMQ_DB_NAME=fresh_database(engine),
               PYTHONPATH=os.pathsep.join(([str(tree)] if tree else []) + [str(ROOT)]), HELD_TREE=str(tree or ""))
    numbers = [str(n) for n in (args.running, args.held, args.claims, args.keys)]
    done = subprocess.run([sys.executable, "-c", CHILD, *numbers],
                          # not the repository's root: "-c" puts the working directory first on the path
                          env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{engine} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> dict:
    rows = []
    engines = args.engines.split(",")
    for round_, code, tree in interleaved(args.ref or None, args.runs):
        for engine in engines:
            with LoadMeter() as meter:
                times = measure_one(engine, tree, args)
            rows.append({"run": round_, "code": code, "engine": engine, **times,
                         "foreign_cores": meter.result["foreign_cores"]})
            print(f"round {round_} {code} {engine}: has_ready {statistics.median(times['has_ready_ms']):.1f} ms, "
                  f"reserve {statistics.median(times['reserve_ms']):.1f} ms "
                  f"(foreign load {meter.result['foreign_cores']} cores)", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "django_taskmq"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip())
    return {"commit": commit + (" (with uncommitted edits)" if dirty else ""), "ref": args.ref,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "runs": args.runs, "running": args.running, "keys": args.keys, "held": args.held, "claims": args.claims,
            "rows": rows}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def report(rows: list[dict]) -> None:
    """Print the table of ``rows`` (markdown): per engine and code, the median of each run's
    median, with the runs' range."""
    print("| engine | code | `has_ready`, ms | `reserve` of 8, ms |")
    print("|---|---|---|---|")
    for engine in dict.fromkeys(r["engine"] for r in rows):
        for code in dict.fromkeys(r["code"] for r in rows):
            mine = [r for r in rows if r["engine"] == engine and r["code"] == code]
            if mine:
                looks = [statistics.median(r["has_ready_ms"]) for r in mine]
                claims = [statistics.median(r["reserve_ms"]) for r in mine]
                print(f"| {engine} | {code} | {_spread(looks)} | {_spread(claims)} |")
    loads = sorted({r["foreign_cores"] for r in rows})
    print(f"\nForeign load per run: {', '.join(f'{v:g}' for v in loads)} cores.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql,mysql")
    parser.add_argument("--running", type=int, default=300, help="jobs running on other keys")
    parser.add_argument("--keys", type=int, default=7, help="how many other keys the running jobs have")
    parser.add_argument("--held", type=int, default=20000, help="jobs held behind key 'hot' (limit 1)")
    parser.add_argument("--claims", type=int, default=10, help="looks and claims timed per measurement")
    parser.add_argument("--ref", default="", help="also measure this commit's django_taskmq, interleaved")
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
