"""Peak memory of a cluster that records one large result (``TASKMQ['max_result_size']``).

Starts ``manage.py qcluster -w 1`` on a fresh SQLite database (the test settings), runs one task
that returns ``--size`` bytes, and reads each cluster process's peak RSS (``VmHWM``) before
stopping it; the same with a no-op result as the baseline. Raw results go to
``benchmarks/results/result_memory.json``.

    .venv/bin/python benchmarks/result_memory.py [--size BYTES] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def run_once(size: int, limit: int) -> dict:
    db = tempfile.mktemp(suffix=".sqlite3")
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings_sqlite", TASKMQ_DB_NAME=db,
               PYTHONPATH=str(ROOT), TASKMQ_OVERRIDES=json.dumps({"max_result_size": limit, "workers": 1}))
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    enqueue = ("import django; django.setup(); from django_taskmq import async_task; "
               f"print(async_task('tests.tasks.blob', {size}) if {size} else async_task('tests.tasks.noop'))")
    job_id = subprocess.run([py, "-c", enqueue], cwd=ROOT, env=env, check=True, capture_output=True,
                            text=True).stdout.strip()
    qc = subprocess.Popen([py, "manage.py", "qcluster", "-w", "1"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    check = ("import django, sys; django.setup(); from django_taskmq.models import Job; "
             f"print(Job.objects.get(pk='{job_id}').state)")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = subprocess.run([py, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True).stdout.strip()
            if state in ("SUCCEEDED", "DEAD", "FAILED"):
                break
            time.sleep(0.2)
        procs = {"sentinel": qc.pid}
        for pid in children(qc.pid):  # monitor, pusher, worker: the order the sentinel forks them
            procs[f"child-{pid}"] = pid
        peaks = {name: peak_kib(pid) for name, pid in procs.items()}
    finally:
        qc.send_signal(signal.SIGTERM)
        qc.wait(timeout=60)
        os.unlink(db)
    return {"size": size, "state": state, "peaks_kib": peaks, "sum_mib": round(sum(peaks.values()) / 1024, 1),
            "max_mib": round(max(peaks.values()) / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=10 * MIB - 4096, help="result size in bytes")
    parser.add_argument("--limit", type=int, default=10 * MIB, help="TASKMQ['max_result_size']")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for _ in range(args.runs):
        for size in (0, args.size):  # interleaved: baseline, then the large result
            rows.append(run_once(size, args.limit))
            print(json.dumps(rows[-1]))
    out = ROOT / "benchmarks" / "results" / "result_memory.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(), "rows": rows}, indent=1))
    for size in (0, args.size):
        sums = [r["sum_mib"] for r in rows if r["size"] == size]
        maxes = [r["max_mib"] for r in rows if r["size"] == size]
        print(f"result {size} B: cluster peak RSS sum min/median/max {min(sums)}/{statistics.median(sums)}/{max(sums)} MiB; "
              f"largest process {min(maxes)}/{statistics.median(maxes)}/{max(maxes)} MiB")


if __name__ == "__main__":
    main()
