"""Latency of a few jobs enqueued together on an idle cluster: the path through the monitor.

    .venv/bin/python benchmarks/small_batches.py [--jobs 3] [--samples 40] [--runs 2] [--ref COMMIT]

The harness's latency workload enqueues one job at a time into an idle cluster, whose worker then
records the success itself (the ``ALONE`` path). Jobs that arrive together go through the sentinel
and the monitor instead. Per sample: ``enqueue_many`` of ``--jobs`` no-op jobs on an idle
``qcluster`` (the benchmark project, 2 workers, SQLite), then the time until all of them are
visible as succeeded (polled every 0.5 ms), 0.1 s apart. With ``--ref`` each run also measures that
commit's ``django_taskmq`` (as ``cpu_by_process.py`` does), interleaved. Raw samples:
``benchmarks/results/small-batches-<label>.json``. A development tool: RESULTS.md comes from
``run.py``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cpu_by_process import PREPARE, PROJECT, interleaved, write_results  # noqa: E402

ENQUEUE = """
import sys, time, sqlite3
import django
django.setup()
from django_taskmq.api import enqueue_many
jobs, samples, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
db = sqlite3.connect(path, timeout=20)
query = "SELECT count(*) FROM django_taskmq_job WHERE state = 'SUCCEEDED' AND id IN (%s)" % ",".join("?" * jobs)
for _ in range(samples):
    started = time.perf_counter()
    ids = enqueue_many("benchtasks.noop", [() for _ in range(jobs)])
    while db.execute(query, ids).fetchone()[0] < jobs:
        time.sleep(0.0005)
    print((time.perf_counter() - started) * 1000, flush=True)
    time.sleep(0.1)
"""


def run_once(tree: Path | None, jobs: int, samples: int) -> list[float]:
    with tempfile.TemporaryDirectory() as work:
        Path(work, "batch_settings.py").write_text(
            "from taskmq_project.settings import *  # noqa: F401,F403\nTASKMQ = dict(TASKMQ, save_limit=0)\n")
        path = os.path.join(work, "db.sqlite3")
        env = dict(os.environ, BENCH_ENGINE="sqlite", BENCH_SQLITE_PATH=path, DJANGO_SETTINGS_MODULE="batch_settings")
        env["PYTHONPATH"] = os.pathsep.join(([str(tree)] if tree else []) + [str(PROJECT), str(HERE), work])
        subprocess.run([sys.executable, "-c", PREPARE, "0"], env=env, check=True)
        cluster = subprocess.Popen([sys.executable, str(PROJECT / "manage.py"), "qcluster"], env=env,
                                   stderr=subprocess.DEVNULL)
        try:
            _wait_ready(path)
            out = subprocess.run([sys.executable, "-c", ENQUEUE, str(jobs), str(samples), path], env=env,
                                 check=True, capture_output=True, text=True).stdout
        finally:
            cluster.terminate()
            cluster.wait(timeout=30)
    return [float(line) for line in out.split()]


def _wait_ready(path: str) -> None:
    """Until the cluster's heartbeat is in the database (then one second more, for it to go idle)."""
    db = sqlite3.connect(path, timeout=20)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if db.execute("SELECT count(*) FROM django_taskmq_cluster").fetchone()[0]:
                time.sleep(1)
                return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the cluster published no heartbeat in 30 s")


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    return (f"p50 {statistics.median(ordered):.2f} ms, p90 {ordered[int(len(ordered) * 0.9)]:.2f} ms "
            f"({len(ordered)} samples)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--ref")
    parser.add_argument("--label", default="latest")
    args = parser.parse_args()
    rows = []
    for round_, code, tree in interleaved(args.ref, args.runs):
        samples = run_once(tree, args.jobs, args.samples)
        rows.append({"code": code, "round": round_, "jobs": args.jobs, "visible_ms": samples})
        print(f"round {round_} {code}: {summary(samples)}", flush=True)
    for code in dict.fromkeys(r["code"] for r in rows):
        print(f"{code}, all runs: {summary([s for r in rows if r['code'] == code for s in r['visible_ms']])}")
    print(f"raw samples: {write_results(f'small-batches-{args.label}', rows)}")


if __name__ == "__main__":
    main()
