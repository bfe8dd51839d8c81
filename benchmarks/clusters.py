"""Many clusters on one PostgreSQL (issue 50): does the drain's throughput rise with the clusters,
without a lock convoy and without a job claimed twice?

    .venv/bin/python benchmarks/clusters.py [--clusters 1,2,5,10] [--jobs 6000] [--runs 2]
    python3 benchmarks/clusters.py --report benchmarks/results/clusters-postgresql.json

Per measurement, on a fresh database ``bench_clusters`` (``tests.settings_postgresql``): K clusters
of ``qcluster -w 2`` are started and left until each has published its heartbeat and every one is
idle; then ``--jobs`` no-op jobs are queued in one ``enqueue_many`` and the time until none is
pending is the drain. Meanwhile ``pg_stat_activity`` is sampled every 20 ms: the backends on the
database and, of them, those waiting on a lock (``wait_event_type = 'Lock'``: a convoy on a row or a
table) or on a light-weight lock. After it: jobs delivered more than once (``deliveries > 1``, a
duplicate claim) and jobs not ``SUCCEEDED``, and the machine's and the database server's CPU
(``hostload``; the clusters are reaped after the drain is timed, so their CPU counts in its
"foreign" figure). The counts K are shuffled in each round. Each cluster holds ``workers × threads
+ 3`` connections (docs/databases.rst): K is bounded by the server's ``max_connections`` less what
other clients use.
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
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "clusters-postgresql.json"
DB_NAME = "bench_clusters"
sys.path[:0] = [str(HERE)]

from cluster import Cluster  # noqa: E402
from drift import pg  # noqa: E402
from hostload import LoadMeter  # noqa: E402

ENQUEUE = """
import django, sys
django.setup()
from django_taskmq import enqueue_many
enqueue_many("tests.tasks.noop", [()] * int(sys.argv[1]))
"""


def fresh_database(source: str) -> None:
    with pg() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME} TEMPLATE {source}")


def template(env: dict[str, str]) -> str:
    name = f"{DB_NAME}_template"
    with pg() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=dict(env, TASKMQ_DB_NAME=name))
    return name


class Sampler(threading.Thread):
    """``pg_stat_activity`` of the database every 20 ms until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.samples: list[dict] = []

    def run(self) -> None:
        with pg() as conn:
            while not self.stop.wait(0.02):
                rows = conn.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE datname = %s "
                    "AND pid <> pg_backend_pid()", [DB_NAME]).fetchall()
                self.samples.append({
                    "backends": len(rows), "active": sum(1 for r in rows if r[0] == "active"),
                    "lock": sum(1 for r in rows if r[1] == "Lock"),
                    "lwlock": sum(1 for r in rows if r[1] == "LWLock"),
                    "events": sorted({f"{r[1]}:{r[2]}" for r in rows if r[1] in ("Lock", "LWLock")})})


def counts() -> tuple[int, int, int, int]:
    with pg(DB_NAME) as conn:
        return conn.execute(
            "SELECT count(*) FILTER (WHERE state NOT IN ('SUCCEEDED')), count(*) FILTER (WHERE deliveries > 1), "
            "count(*), (SELECT count(*) FROM django_taskmq_cluster) FROM django_taskmq_job").fetchone()


def measure(k: int, source: str, env: dict[str, str], args: argparse.Namespace, work: Path) -> dict:
    fresh_database(source)
    clusters = [Cluster(sys.executable, Path(tempfile.gettempdir()), env, work / f"k{k}-{i}-{time.time_ns()}.log",
                        argv=[sys.executable, "-m", "django", "qcluster", "-w", "2"]) for i in range(k)]
    try:
        for c in clusters:
            c.start()
        deadline = time.time() + 120 + 10 * k
        while counts()[3] < k:  # every heartbeat published
            if time.time() > deadline or any(c.process.poll() is not None for c in clusters):
                raise SystemExit(f"{k} clusters did not all start; logs in {work}")
            time.sleep(0.5)
        time.sleep(3.0)  # past the start-up chores
        sampler = Sampler()
        with LoadMeter() as meter:
            sampler.start()
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", ENQUEUE, str(args.jobs)], env=env, cwd=tempfile.gettempdir(),
                           check=True)
            enqueued = time.perf_counter()
            while counts()[0]:
                time.sleep(0.02)
            drained = time.perf_counter()
            sampler.stop.set()
            sampler.join()
        pending, duplicates, total, _ = counts()
    finally:
        for c in clusters:
            c.stop(grace=60)
    busy = [s for s in sampler.samples if s["active"]]
    return {"clusters": k, "jobs": total, "not_succeeded": pending, "duplicates": duplicates,
            "enqueue_s": round(enqueued - started, 3), "drain_s": round(drained - started, 3),
            "jobs_per_s": round(args.jobs / (drained - started), 1),
            "samples": len(sampler.samples), "backends_max": max((s["backends"] for s in sampler.samples), default=0),
            "active_mean": round(statistics.mean(s["active"] for s in busy), 2) if busy else 0,
            "lock_waiting_mean": round(statistics.mean(s["lock"] for s in sampler.samples), 3) if sampler.samples else 0,
            "lock_waiting_max": max((s["lock"] for s in sampler.samples), default=0),
            "lwlock_waiting_mean": round(statistics.mean(s["lwlock"] for s in sampler.samples), 3)
            if sampler.samples else 0,
            "wait_events": sorted({e for s in sampler.samples for e in s["events"]}),
            "load": meter.result, "foreign_cores": meter.result["foreign_cores"]}


def report(rows: list[dict]) -> None:
    """Print the table of a results file's rows (markdown): per count of clusters, the median over
    the rounds (range)."""
    print("| clusters of 2 workers | drain, jobs/s | server CPU, cores | backends (max) | waiting on a lock, mean "
          "(max) | on an LWLock, mean | duplicate claims | not succeeded | wait events seen |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in sorted({r["clusters"] for r in rows}):
        mine = [r for r in rows if r["clusters"] == k]
        rate = [r["jobs_per_s"] for r in mine]
        server = [r["load"]["server_cores"] for r in mine]
        print(f"| {k} | {statistics.median(rate):.0f} ({min(rate):.0f}–{max(rate):.0f}) | "
              f"{statistics.median(server):.2f} | {max(r['backends_max'] for r in mine)} | "
              f"{statistics.median(r['lock_waiting_mean'] for r in mine):.2f} ({max(r['lock_waiting_max'] for r in mine)}) | "
              f"{statistics.median(r['lwlock_waiting_mean'] for r in mine):.2f} | "
              f"{sum(r['duplicates'] for r in mine)} | {sum(r['not_succeeded'] for r in mine)} | "
              f"{', '.join(sorted({e for r in mine for e in r['wait_events']})) or '—'} |")
    loads = sorted(r["foreign_cores"] for r in rows)
    print(f"\nForeign load per run: {loads[0]:g} to {loads[-1]:g} cores (of 2).")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", default="1,2,5,10")
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 and 3 clusters, 2,000 jobs, one round")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="print the table of a saved results file and exit")
    args = parser.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text())["rows"])
        return 0
    if args.quick:
        args.clusters, args.jobs, args.runs = "1,3", 2000, 1
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings_postgresql", TASKMQ_DB_NAME=DB_NAME,
               PYTHONPATH=str(ROOT))
    work = Path(tempfile.mkdtemp(prefix="taskmq-bench-clusters-"))
    source = template(env)
    with pg() as conn:
        limit = conn.execute("SELECT current_setting('max_connections')::int").fetchone()[0]
        used = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").fetchone()[0]
    seed = int(time.time())
    shuffle = random.Random(seed)
    rows = []
    for round_ in range(1, args.runs + 1):
        order = [int(k) for k in args.clusters.split(",")]
        shuffle.shuffle(order)
        for k in order:
            row = {"run": round_, **measure(k, source, env, args, work)}
            rows.append(row)
            print(f"round {round_} {k} clusters: {row['jobs_per_s']} jobs/s, lock waits {row['lock_waiting_mean']} "
                  f"(max {row['lock_waiting_max']}), duplicates {row['duplicates']}, server "
                  f"{row['load']['server_cores']} cores (foreign {row['foreign_cores']})", file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    raw = {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join(["benchmarks/clusters.py", *argv]), "seed": seed, "runs": args.runs, "jobs": args.jobs,
           "max_connections": limit, "client_backends_at_start": used, "rows": rows}
    out = args.out or (work / "clusters.json" if args.quick else OUT)
    out.write_text(json.dumps(raw, indent=1) + "\n")
    report(rows)
    print(f"raw: {out}; logs: {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
