"""Prefetch on the hot path: drain N no-op jobs with ``qcluster --burst -w 2`` and
``TASKMQ['prefetch']`` 0 (the default) against 16, interleaved, on a fresh database per run
(the measurement of ``benchmarks/threads.py``: wall time from exec to exit, CPU of the whole
cluster, peak memory). Raw results: ``benchmarks/results/prefetch.json``.

    .venv/bin/python benchmarks/prefetch.py [--runs 3] [--engines sqlite,postgresql] [-n 5000]
    .venv/bin/python benchmarks/prefetch.py --report benchmarks/results/prefetch.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flow import saved_rows, script_arguments  # noqa: E402
from threads import ROOT, cell, run_once  # noqa: E402

PREFETCH = (0, 16)


def report(rows: list[dict]) -> None:
    """Print the markdown table of RESULTS.md from raw rows: median (min-max) per cell."""
    print("| engine | prefetch | drain incl. start-up (jobs/s) | steady (jobs/s) | cluster CPU s / 1000 jobs |\n"
          "|---|---|---|---|---|")
    for engine in sorted({r["engine"] for r in rows}, reverse=True):
        for prefetch in PREFETCH:
            where = dict(engine=engine, prefetch=prefetch)
            print(f"| {engine} | {prefetch} | {cell(rows, 'jobs_per_s', **where)} | "
                  f"{cell(rows, 'steady_jobs_per_s', **where)} | {cell(rows, 'cpu_s_per_1000', **where)} |")


def main() -> None:
    args = script_arguments(n=5000).parse_args()
    if args.report:
        report(saved_rows(args.report))
        return
    rows = []
    for _ in range(args.runs):
        for engine in args.engines.split(","):
            for prefetch in PREFETCH:
                row = run_once(engine, "noop", 1, args.n, {"prefetch": prefetch})
                rows.append({**row, "prefetch": prefetch})
                print(json.dumps(rows[-1]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    (ROOT / "benchmarks" / "results" / "prefetch.json").write_text(json.dumps(
        {"machine": os.uname().nodename, "cpus": os.cpu_count(), "runs": args.runs, "commit": commit,
         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1))
    report(rows)


if __name__ == "__main__":
    main()
