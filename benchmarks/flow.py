"""Flow control on the hot path: drain throughput with no keys, a key per job, and 1000 jobs over
10 keys (same run, interleaved); and rate-limit accuracy at 10/s and 100/s.

Uses the repository's ``.venv`` and the test settings (``tests.settings_sqlite`` /
``tests.settings_postgresql``) on a fresh database per measurement; ``qcluster --burst -w 2`` runs
the jobs (``tests.tasks.noop``). Raw results: ``benchmarks/results/flow.json``.

    .venv/bin/python benchmarks/flow.py [--runs 3] [--engines sqlite,postgresql] [-n 2000]
    python3 benchmarks/flow.py --report benchmarks/results/flow.json   # the tables of saved results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

ENQUEUE = """
import django, json, sys
django.setup()
from django_taskmq import enqueue_many
n, variant, rate = int(sys.argv[1]), sys.argv[2], sys.argv[3]
options = {}
if variant == "key per job":
    options["concurrency_key"] = lambda i: f"job-{i}"
elif variant == "10 keys":
    options["concurrency_key"] = lambda i: f"key-{i % 10}"
    options["concurrency_limit"] = 1
if rate != "-":
    options["rate_limit"] = rate
enqueue_many("tests.tasks.noop", [(i,) for i in range(n)], **options)
"""

MEASURE = """
import django, json
django.setup()
from django_taskmq.models import Job
rows = list(Job.objects.values_list("state", "started_at", "finished_at", "deliveries"))
starts = sorted(r[1].timestamp() for r in rows if r[1])
ends = sorted(r[2].timestamp() for r in rows if r[2])
print(json.dumps({"states": sorted({r[0] for r in rows}), "deliveries": sorted({r[3] for r in rows}),
                  "first_start": starts[0], "last_start": starts[-1], "last_end": ends[-1], "n": len(rows)}))
"""


def database(engine: str) -> tuple[dict, callable]:
    if engine == "sqlite":
        path = tempfile.mktemp(suffix=".sqlite3")
        return ({"DJANGO_SETTINGS_MODULE": "tests.settings_sqlite", "TASKMQ_DB_NAME": path},
                lambda: [os.unlink(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p)])
    import psycopg

    name = f"bench_flow_{os.getpid()}"
    conninfo = dict(host=os.environ.get("PGHOST", "127.0.0.1"), port=os.environ.get("PGPORT", "5432"),
                    user=os.environ.get("PGUSER", "postgres"), dbname="postgres", autocommit=True)
    with psycopg.connect(**conninfo) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")

    def drop():
        with psycopg.connect(**conninfo) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return {"DJANGO_SETTINGS_MODULE": "tests.settings_postgresql", "TASKMQ_DB_NAME": name}, drop


def run_once(engine: str, variant: str, n: int, rate: str = "-") -> dict:
    extra, drop = database(engine)
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    env.pop("TASKMQ_OVERRIDES", None)
    try:
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([PY, "-c", ENQUEUE, str(n), variant, rate], cwd=ROOT, env=env, check=True)
        started = time.time()
        subprocess.run([PY, "manage.py", "qcluster", "--burst", "-w", "2"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.time() - started
        got = json.loads(subprocess.run([PY, "-c", MEASURE], cwd=ROOT, env=env, check=True, capture_output=True,
                                        text=True).stdout)
    finally:
        drop()
    assert got["states"] == ["SUCCEEDED"] and got["deliveries"] == [1] and got["n"] == n, got
    span = got["last_end"] - got["first_start"]
    row = {"engine": engine, "variant": variant, "n": n, "rate": rate, "wall_s": round(wall, 3),
           "jobs_per_s": round(n / wall, 1), "steady_jobs_per_s": round(n / span, 1) if span else None}
    if rate != "-":
        row["measured_rate"] = round((n - 1) / (got["last_start"] - got["first_start"]), 2)
    return row


def summary(rows: list[dict], engine: str, variant: str, field: str, rate: str = "-") -> str:
    values = [r[field] for r in rows if r["engine"] == engine and r["variant"] == variant and r["rate"] == rate]
    return f"{statistics.median(values):g} ({min(values):g}-{max(values):g})"


VARIANTS = ["no keys", "key per job", "10 keys"]


def script_arguments(n: int | None = None) -> argparse.ArgumentParser:
    """The options these benchmark scripts share (flow, threads, prefetch): --runs, --engines,
    --report FILE and, when the script takes one, -n."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql")
    if n is not None:
        parser.add_argument("-n", type=int, default=n)
    parser.add_argument("--report", metavar="FILE", help="print the tables of saved raw results, run nothing")
    return parser


def saved_rows(path: str) -> list[dict]:
    """The raw result rows a script saved to ``path`` (what --report renders)."""
    return json.loads(Path(path).read_text())["rows"]


def main() -> None:
    args = script_arguments(n=2000).parse_args()
    if args.report:
        rows = saved_rows(args.report)
        report(rows, sorted({r["engine"] for r in rows}, reverse=True))
        return
    engines = args.engines.split(",")
    rows = []
    for run in range(args.runs):
        for engine in engines:
            for variant in VARIANTS:
                n = 1000 if variant == "10 keys" else args.n
                rows.append(run_once(engine, variant, n))
                print(json.dumps(rows[-1]), flush=True)
            for rate, n in (("10/s", 40), ("100/s", 300)):
                rows.append(run_once(engine, "no keys", n, rate))
                print(json.dumps(rows[-1]), flush=True)
    out = ROOT / "benchmarks" / "results" / "flow.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(), "runs": args.runs,
                               "rows": rows}, indent=1))
    report(rows, engines)


def report(rows: list[dict], engines: list[str]) -> None:
    """Print the markdown tables of ARCHIVE.md from raw rows."""
    print("\n| engine | jobs | drain incl. start-up (jobs/s) | steady (jobs/s) |\n|---|---|---|---|")
    for engine in engines:
        for variant in VARIANTS:
            print(f"| {engine} | {variant} | {summary(rows, engine, variant, 'jobs_per_s')} | "
                  f"{summary(rows, engine, variant, 'steady_jobs_per_s')} |")
    print("\n| engine | limit | measured start rate (/s) |\n|---|---|---|")
    for engine in engines:
        for rate in ("10/s", "100/s"):
            print(f"| {engine} | {rate} | {summary(rows, engine, 'no keys', 'measured_rate', rate)} |")


if __name__ == "__main__":
    main()
