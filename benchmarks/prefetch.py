"""Prefetch on the hot path, and behind a long task: ``qcluster --burst -w 2`` with
``TASKMQ['prefetch']`` 0 against the default 4, interleaved, on a fresh database per run.

* ``noop``: N no-op jobs drained (the measurement of ``benchmarks/threads.py``: wall time from exec
  to exit, CPU of the whole cluster, peak memory): what holding tasks in the workers saves.
* ``long``: one task of ``--long-seconds`` (3 s) queued first, then ``--short-n`` (300) tasks of 5 ms.
  With 2 workers one runs the long task and the other the short ones. A short task prefetched by
  the worker of the long one would wait for it (Celery's known price of prefetch); the sentinel takes
  such tasks back for an idle worker. Per run: when the last short task ended (seconds after the
  first start) and how many short tasks started after the long one ended (0: none waited for it).

Round two's file (``results/prefetch.json``, prefetch 0 against 16, noop only) is rendered as it was;
this round's goes to ``results/prefetch-long.json``.

    .venv/bin/python benchmarks/prefetch.py [--runs 3] [--engines sqlite,postgresql] [-n 5000]
    .venv/bin/python benchmarks/prefetch.py --report benchmarks/results/prefetch-long.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flow import database, saved_rows, script_arguments  # noqa: E402
from hostload import LoadMeter  # noqa: E402
from threads import PY, ROOT, cell, run_once  # noqa: E402

PREFETCH = (0, 4)
OUT = ROOT / "benchmarks" / "results" / "prefetch-long.json"

ENQUEUE_LONG = """
import django, sys
django.setup()
from django_taskmq import async_task, enqueue_many
long_seconds, short_n = float(sys.argv[1]), int(sys.argv[2])
print(async_task("tests.cluster.tasks_cluster.slow", "long", long_seconds))
enqueue_many("tests.cluster.tasks_cluster.slow", [(f"s{i}", 0.005) for i in range(short_n)])
"""

MEASURE_LONG = """
import django, json, sys
django.setup()
from django_taskmq.models import Job
long_id = sys.argv[1]
rows = list(Job.objects.values_list("id", "state", "deliveries", "started_at", "finished_at"))
long = next(r for r in rows if r[0] == long_id)
short = [r for r in rows if r[0] != long_id]
first = min(r[3] for r in rows).timestamp()
print(json.dumps({"states": sorted({r[1] for r in rows}), "deliveries": sorted({r[2] for r in rows}), "n": len(rows),
                  "last_short_end_s": max(r[4] for r in short).timestamp() - first,
                  "long_end_s": long[4].timestamp() - first,
                  "short_after_long": sum(1 for r in short if r[3] >= long[4])}))
"""


def run_long(engine: str, prefetch: int, long_seconds: float, short_n: int) -> dict:
    """One burst drain of a long task followed by ``short_n`` short ones."""
    extra, drop = database(engine)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TASKMQ_OVERRIDES=json.dumps({"prefetch": prefetch}), **extra)
    env.pop("TASKMQ_RUN_LOG", None)
    try:
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        long_id = subprocess.run([PY, "-c", ENQUEUE_LONG, str(long_seconds), str(short_n)], cwd=ROOT, env=env,
                                 check=True, capture_output=True, text=True).stdout.split()[-1]
        subprocess.run([PY, "manage.py", "qcluster", "--burst", "-w", "2"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        got = json.loads(subprocess.run([PY, "-c", MEASURE_LONG, long_id], cwd=ROOT, env=env, check=True,
                                        capture_output=True, text=True).stdout)
    finally:
        drop()
    assert got["states"] == ["SUCCEEDED"] and got["deliveries"] == [1] and got["n"] == short_n + 1, got
    return {"engine": engine, "workload": "long", "prefetch": prefetch, "short_n": short_n,
            "long_seconds": long_seconds, "last_short_end_s": round(got["last_short_end_s"], 3),
            "long_end_s": round(got["long_end_s"], 3), "short_after_long": got["short_after_long"]}


def report(rows: list[dict]) -> None:
    """Print the markdown tables of ARCHIVE.md from raw rows: median (min-max) per cell."""
    noop = [r for r in rows if r.get("workload", "noop") == "noop"]
    print("| engine | prefetch | drain incl. start-up (jobs/s) | steady (jobs/s) | cluster CPU s / 1000 jobs |\n"
          "|---|---|---|---|---|")
    for engine in sorted({r["engine"] for r in noop}, reverse=True):
        for prefetch in sorted({r["prefetch"] for r in noop}):
            where = dict(engine=engine, prefetch=prefetch)
            print(f"| {engine} | {prefetch} | {cell(noop, 'jobs_per_s', **where)} | "
                  f"{cell(noop, 'steady_jobs_per_s', **where)} | {cell(noop, 'cpu_s_per_1000', **where)} |")
    long = [r for r in rows if r.get("workload") == "long"]
    if not long:
        return
    print(f"\nBehind a long task: one task of {long[0]['long_seconds']:g} s queued first, then {long[0]['short_n']} "
          "tasks of 5 ms; 2 workers. Seconds from the first start.\n\n"
          "| engine | prefetch | last short task ended (s) | long task ended (s) | "
          "short tasks started after the long one ended |\n|---|---|---|---|---|")
    for engine in sorted({r["engine"] for r in long}, reverse=True):
        for prefetch in sorted({r["prefetch"] for r in long}):
            where = dict(engine=engine, prefetch=prefetch)
            print(f"| {engine} | {prefetch} | {cell(long, 'last_short_end_s', **where)} | "
                  f"{cell(long, 'long_end_s', **where)} | {cell(long, 'short_after_long', **where)} |")
    loads = [r["foreign_cores"] for r in rows if r.get("foreign_cores") is not None]
    if loads:
        print(f"\nForeign load during the runs: {min(loads):g}-{max(loads):g} cores of {os.cpu_count()} "
              f"(median {sorted(loads)[len(loads) // 2]:g}).")


def main() -> None:
    parser = script_arguments(n=5000)
    parser.add_argument("--long-seconds", type=float, default=3.0)
    parser.add_argument("--short-n", type=int, default=300)
    args = parser.parse_args()
    if args.report:
        report(saved_rows(args.report))
        return
    rows = []
    for _ in range(args.runs):
        for engine in args.engines.split(","):
            for prefetch in PREFETCH:
                for workload in ("noop", "long"):
                    with LoadMeter() as meter:
                        if workload == "noop":
                            row = {**run_once(engine, "noop", 1, args.n, {"prefetch": prefetch}),
                                   "prefetch": prefetch, "workload": "noop"}
                        else:
                            row = run_long(engine, prefetch, args.long_seconds, args.short_n)
                    rows.append({**row, "foreign_cores": meter.result["foreign_cores"]})
                    print(json.dumps(rows[-1]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    OUT.write_text(json.dumps(
        {"machine": os.uname().nodename, "cpus": os.cpu_count(), "runs": args.runs, "commit": commit,
         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1))
    report(rows)


if __name__ == "__main__":
    main()
