"""Threads per worker (issue 14): I/O-bound tasks, the no-op drain, and the cluster's memory, with
``qcluster --burst -w 2 --threads 1`` against ``--threads 16`` (same run, interleaved).

* ``sleep``: N tasks that each ``time.sleep(0.1)`` (``tests.cluster.tasks_cluster.slow``), the
  stand-in for a call to a mail server or an HTTP API;
* ``noop``: N no-op tasks (``tests.tasks.noop``): what threads cost on the hot path.

Per run: wall time of ``qcluster --burst`` from exec to exit (start-up included), jobs/s, the CPU
seconds of the whole cluster (every process, from ``RUSAGE_CHILDREN``), and the peak RSS and PSS of
the cluster's process tree (sampled every 50 ms from /proc). Uses the repository's ``.venv`` and the
test settings on a fresh database per run. Raw results: ``benchmarks/results/threads.json``.

    .venv/bin/python benchmarks/threads.py [--runs 3] [--engines sqlite,postgresql]
    .venv/bin/python benchmarks/threads.py --report benchmarks/results/threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flow import MEASURE, ROOT, database  # noqa: E402  (the same fresh databases and measurement)

PY = sys.executable

ENQUEUE = """
import django, sys
django.setup()
from django_taskmq import enqueue_many
n, workload = int(sys.argv[1]), sys.argv[2]
if workload == "sleep":
    enqueue_many("tests.cluster.tasks_cluster.slow", [(f"s{i}", 0.1) for i in range(n)])
else:
    enqueue_many("tests.tasks.noop", [(i,) for i in range(n)])
"""

SIZES = {"sleep": 1000, "noop": 2000}
THREADS = (1, 16)


def tree(root: int) -> list[int]:
    """``root`` and its live descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def memory(pids: list[int]) -> tuple[int, int]:
    """Summed (RSS, PSS) in KiB of ``pids`` (smaps_rollup)."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    return rss, pss


def run_once(engine: str, workload: str, threads: int, n: int) -> dict:
    extra, drop = database(engine)
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    env.pop("TASKMQ_OVERRIDES", None)
    env.pop("TASKMQ_RUN_LOG", None)
    peak = [0, 0]
    try:
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([PY, "-c", ENQUEUE, str(n), workload], cwd=ROOT, env=env, check=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        proc = subprocess.Popen([PY, "manage.py", "qcluster", "--burst", "-w", "2", "--threads", str(threads)],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                rss, pss = memory(tree(proc.pid))
                peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

        sampler = threading.Thread(target=sample)
        sampler.start()
        code = proc.wait()
        wall = time.time() - started
        done.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert code == 0, f"qcluster --burst exited {code}"
        got = json.loads(subprocess.run([PY, "-c", MEASURE], cwd=ROOT, env=env, check=True, capture_output=True,
                                        text=True).stdout)
    finally:
        drop()
    assert got["states"] == ["SUCCEEDED"] and got["deliveries"] == [1] and got["n"] == n, got
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    span = got["last_end"] - got["first_start"]
    return {"engine": engine, "workload": workload, "threads": threads, "n": n, "wall_s": round(wall, 3),
            "jobs_per_s": round(n / wall, 1), "steady_jobs_per_s": round(n / span, 1) if span else None,
            "cpu_s": round(cpu, 3), "cpu_s_per_1000": round(cpu * 1000 / n, 3),
            "peak_rss_mib": round(peak[0] / 1024, 1), "peak_pss_mib": round(peak[1] / 1024, 1)}


def cell(rows: list[dict], field: str, **where) -> str:
    values = [r[field] for r in rows if all(r[k] == v for k, v in where.items()) and r[field] is not None]
    if not values:
        return "n/a"
    return f"{statistics.median(values):g} ({min(values):g}-{max(values):g})"


def report(rows: list[dict]) -> None:
    """Print the markdown tables of RESULTS.md from raw rows: median (min-max) per cell."""
    engines = sorted({r["engine"] for r in rows}, reverse=True)
    print("| engine | workload | threads | drain incl. start-up (jobs/s) | steady (jobs/s) | "
          "cluster CPU s / 1000 jobs | peak RSS (MiB) | peak PSS (MiB) |\n|---|---|---|---|---|---|---|---|")
    for engine in engines:
        for workload in SIZES:
            for threads in THREADS:
                where = dict(engine=engine, workload=workload, threads=threads)
                n = next((r["n"] for r in rows if all(r[k] == v for k, v in where.items())), "-")
                print(f"| {engine} | {workload} x {n} | {threads} | {cell(rows, 'jobs_per_s', **where)} | "
                      f"{cell(rows, 'steady_jobs_per_s', **where)} | {cell(rows, 'cpu_s_per_1000', **where)} | "
                      f"{cell(rows, 'peak_rss_mib', **where)} | {cell(rows, 'peak_pss_mib', **where)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--quick", action="store_true", help="a tenth of the jobs, one run, results not saved")
    parser.add_argument("--report", metavar="FILE", help="print the tables of saved raw results, run nothing")
    args = parser.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text())["rows"])
        return
    rows = []
    for _ in range(1 if args.quick else args.runs):
        for engine in args.engines.split(","):
            for workload, n in SIZES.items():
                for threads in THREADS:
                    rows.append(run_once(engine, workload, threads, n // 10 if args.quick else n))
                    print(json.dumps(rows[-1]), flush=True)
    if not args.quick:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        out = ROOT / "benchmarks" / "results" / "threads.json"
        out.write_text(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(), "runs": args.runs,
                                   "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   "rows": rows}, indent=1))
    report(rows)


if __name__ == "__main__":
    main()
