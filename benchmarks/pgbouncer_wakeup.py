"""Wake-up latency of an idle cluster: directly on PostgreSQL, and through PgBouncer in transaction
mode without and with ``TASKMQ['listen_database']`` (same run, interleaved, shuffled each round).

Uses the repository's ``.venv``, ``tests.settings_pgbouncer`` (connection "default" through PgBouncer
when ``TASKMQ_PGBOUNCER_PORT`` is set, "direct" on the server) and the PgBouncer of the tests
(``tests/pgbouncer.py``: Debian's, transaction mode, a free port). Per mode and round: a fresh
``qcluster -w 2`` on the database ``bench_pgbouncer_wakeup`` (recreated directly, migrated once),
one warm-up job, 3 s idle (past the pusher's probe, which waits 2 s where notifications are
dropped), then jobs (``tests.tasks.noop``) sent one at a time through the same
route as the cluster, each ``--gap-ms`` after the previous one became visible (so each meets an idle
cluster). Per job: the enqueue call -> the job's ``started_at`` (the task started) and -> its row
seen ``SUCCEEDED`` (polled every millisecond). The cluster's log says which way its pusher woke
(LISTEN, or polling after the probe's warning), recorded beside the figures.

    .venv/bin/python benchmarks/pgbouncer_wakeup.py [--runs 3] [--samples 40] [--gap-ms 50]
    python3 benchmarks/pgbouncer_wakeup.py --report benchmarks/results/pgbouncer_wakeup.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "bench_pgbouncer_wakeup"
MODES = ("direct", "pgbouncer, polling", "pgbouncer, listen_database")
OUT = ROOT / "benchmarks" / "results" / "pgbouncer_wakeup.json"

DRIVER = """
import django, json, sys, time
django.setup()
from django_taskmq import async_task
from django_taskmq.models import Job
samples, gap = int(sys.argv[1]), float(sys.argv[2]) / 1000

def run_one():
    sent = time.time()
    job_id = async_task("tests.tasks.noop")
    while True:
        row = Job.objects.filter(pk=job_id).values_list("state", "started_at").first()
        if row and row[0] == "SUCCEEDED":
            return (row[1].timestamp() - sent) * 1000, (time.time() - sent) * 1000
        time.sleep(0.001)

run_one()  # warm-up: the cluster is up
time.sleep(3.0)  # idle, and past the pusher's start-up probe (up to 2 s where notifications are dropped)
starts, visibles = [], []
for _ in range(samples):
    start, visible = run_one()
    starts.append(round(start, 3))
    visibles.append(round(visible, 3))
    time.sleep(gap)
print(json.dumps({"start_ms": starts, "visible_ms": visibles}))
"""


def environment(mode: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TASKMQ_PGBOUNCER_PORT", "TASKMQ_OVERRIDES")}
    env.update(DJANGO_SETTINGS_MODULE="tests.settings_pgbouncer", TASKMQ_DB_NAME=DB_NAME, PYTHONPATH=str(ROOT),
               TASKMQ_LOG="INFO")
    if mode != "direct":
        env["TASKMQ_PGBOUNCER_PORT"] = str(port)
    if mode.endswith("listen_database"):
        env["TASKMQ_OVERRIDES"] = json.dumps({"listen_database": "direct"})
    return env


def recreate_database() -> None:
    import psycopg

    host, port, user = (os.environ.get("PGHOST", "127.0.0.1"), os.environ.get("PGPORT", "5432"),
                        os.environ.get("PGUSER", "postgres"))
    with psycopg.connect(host=host, port=port, user=user, dbname="postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    env = environment("direct", 0)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)


def measure(mode: str, port: int, samples: int, gap_ms: float, log_dir: Path) -> dict:
    env = environment(mode, port)
    log = log_dir / f"{mode.replace(', ', '-')}-{time.time_ns()}.log"
    with open(log, "wb") as out:
        cluster = subprocess.Popen([sys.executable, "manage.py", "qcluster", "-w", "2"], cwd=ROOT, env=env,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            driver = subprocess.run([sys.executable, "-c", DRIVER, str(samples), str(gap_ms)], cwd=ROOT, env=env,
                                    capture_output=True, text=True, timeout=600)
        finally:
            cluster.send_signal(signal.SIGTERM)
            try:
                cluster.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(cluster.pid, signal.SIGKILL)
                cluster.wait()
    if driver.returncode != 0:
        raise RuntimeError(f"{mode}: driver failed:\n{driver.stderr[-3000:]}\ncluster log: {log}")
    text = log.read_text(errors="replace")
    woke = ("LISTEN" if "idle wake-ups by LISTEN" in text else
            "polling (probe warned)" if "received no notification" in text else "unknown")
    return {"mode": mode, "woke_by": woke, **json.loads(driver.stdout.strip().splitlines()[-1])}


def stats(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def report(rows: list[dict]) -> None:
    """Print the tables of ``rows`` (markdown)."""
    print("| mode | woke by | jobs (runs) | enqueue -> task start, ms: min / median / max | "
          "enqueue -> visible, ms: min / median / max | median start per run, ms |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        starts = [v for r in mine for v in r["start_ms"]]
        visibles = [v for r in mine for v in r["visible_ms"]]
        per_run = ", ".join(f"{statistics.median(r['start_ms']):.1f}" for r in mine)
        woke = ", ".join(sorted({r["woke_by"] for r in mine}))
        print(f"| {mode} | {woke} | {len(starts)} ({len(mine)}) | {' / '.join(f'{v:.1f}' for v in stats(starts))} | "
              f"{' / '.join(f'{v:.1f}' for v in stats(visibles))} | {per_run} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--gap-ms", type=float, default=50.0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report", type=Path, help="print the tables of a saved results file and exit")
    args = parser.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text())["rows"])
        return 0
    sys.path.insert(0, str(ROOT))
    from tests.pgbouncer import PgBouncer

    recreate_database()
    bouncer = PgBouncer(os.environ.get("PGHOST", "127.0.0.1"), int(os.environ.get("PGPORT", "5432")))
    log_dir = Path(tempfile.mkdtemp(prefix="taskmq-bench-pgbouncer-"))
    rows = []
    seed = int(time.time())
    shuffle = random.Random(seed)
    try:
        for round_ in range(1, args.runs + 1):
            order = list(MODES)
            shuffle.shuffle(order)
            for mode in order:
                row = measure(mode, bouncer.port, args.samples, args.gap_ms, log_dir)
                row["round"] = round_
                rows.append(row)
                print(f"round {round_} {mode}: median start {statistics.median(row['start_ms']):.1f} ms "
                      f"(woke by {row['woke_by']})", file=sys.stderr)
    finally:
        bouncer.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    args.out.write_text(json.dumps({
        "commit": commit, "date": datetime.date.today().isoformat(), "runs": args.runs, "samples": args.samples,
        "gap_ms": args.gap_ms, "seed": seed, "command": " ".join(["benchmarks/pgbouncer_wakeup.py", *argv]),
        "rows": rows}, indent=1) + "\n")
    report(rows)
    print(f"cluster logs: {log_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
