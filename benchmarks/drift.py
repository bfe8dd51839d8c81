"""Claim latency as a job table fills (issue 50): does the enqueue -> start time drift?

A cluster that keeps its connections (``qcluster -w 2``) on a fresh database, ``save_limit`` 0 (every
finished row stays), and a producer that enqueues ``tests.tasks.noop`` one call at a time at
``--rate`` jobs/s for ``--seconds``. Each job's start (its ``started_at``, the database's time on the
same host) minus the moment its enqueue call began: p50 and p95 of the jobs sent in the first and
the last ``--window`` seconds, and their ratio. On PostgreSQL the run is made with the server's
autovacuum off and on (``ALTER SYSTEM SET autovacuum`` and ``pg_reload_conf()``, put back with
``ALTER SYSTEM RESET`` right after each run: this machine's server runs with it off), and after each
run the job table's statistics (``pg_stat_user_tables``: rows, changes since the last ANALYZE, who
analysed it last) are recorded. ``--ref COMMIT`` also runs that commit's ``django_taskmq``
(exported with ``git archive``, first on the path), interleaved with the working tree.

    .venv/bin/python benchmarks/drift.py [--engines postgresql] [--runs 1] [--ref main]
    .venv/bin/python benchmarks/drift.py --quick              # 50 s per run, 15 s windows
    .venv/bin/python benchmarks/drift.py --report benchmarks/results/drift-postgresql.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from cluster import Cluster  # noqa: E402
from cpu_by_process import export  # noqa: E402
from hostload import LoadMeter  # noqa: E402

DB_NAME = "bench_drift"

# The producer: paced single enqueues, then (the cluster still running) every job's start.
PRODUCER = """
import django, json, sys, time
django.setup()
from django_taskmq import async_task
from django_taskmq.models import Job
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
sent = {}
t0 = time.time()
n = 0
while time.time() - t0 < seconds:  # paced; a producer the machine slows sends fewer, never later
    due = t0 + n / rate
    delay = due - time.time()
    if delay > 0:
        time.sleep(delay)
    began = time.time()
    sent[async_task("tests.tasks.noop")] = began
    n += 1
deadline = time.time() + 120
while Job.objects.filter(pk__in=list(sent)[-50:], started_at__isnull=True).exists() and time.time() < deadline:
    time.sleep(0.2)
starts = dict(Job.objects.filter(pk__in=list(sent)).values_list("id", "started_at"))
rows = [[round(began - t0, 4), round((starts[i].timestamp() - began) * 1000, 3) if starts.get(i) else None]
        for i, began in sent.items()]
print(json.dumps({"jobs": rows, "sent_per_s": round(n / seconds, 1)}))
"""

STATS_SQL = ("SELECT n_live_tup, n_dead_tup, n_mod_since_analyze, last_analyze IS NOT NULL, "
             "last_autoanalyze IS NOT NULL, analyze_count, autoanalyze_count, autovacuum_count "
             "FROM pg_stat_user_tables WHERE relname = 'django_taskmq_job'")


def pg(dbname: str = "postgres"):
    import psycopg

    return psycopg.connect(host=os.environ.get("PGHOST", "127.0.0.1"), port=os.environ.get("PGPORT", "5432"),
                           user=os.environ.get("PGUSER", "postgres"), dbname=dbname, autocommit=True)


def environment(engine: str, tree: Path | None, db: str) -> dict[str, str]:
    return dict(os.environ, DJANGO_SETTINGS_MODULE=f"tests.settings_{engine}", TASKMQ_DB_NAME=db,
                PYTHONPATH=os.pathsep.join(([str(tree)] if tree else []) + [str(ROOT)]))


def template(engine: str, work: Path) -> str:
    """Migrate a template database once per engine; return its name (SQLite: its path)."""
    if engine == "postgresql":
        with pg() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME}_template WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DB_NAME}_template")
        name = f"{DB_NAME}_template"
    elif engine == "sqlite":
        name = str(work / "template.sqlite3")
    else:
        return DB_NAME  # MariaDB has no template: migrated for each run (fresh_database)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=environment(engine, None, name))
    return name


def fresh_database(engine: str, source: str, work: Path) -> str:
    if engine == "postgresql":
        with pg() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DB_NAME} TEMPLATE {source}")
        return DB_NAME
    if engine == "sqlite":
        target = work / "drift.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        shutil.copy(source, target)
        return str(target)
    import MySQLdb

    conn = MySQLdb.connect(host="127.0.0.1", user="root", passwd="", autocommit=True)
    try:
        conn.cursor().execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
        conn.cursor().execute(f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4")
    finally:
        conn.close()
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=environment(engine, None, DB_NAME))
    return DB_NAME


def set_autovacuum(on: bool | None) -> None:
    """``True``/``False``: the server's autovacuum for the run; ``None``: back to its configuration."""
    with pg() as conn:
        if on is None:
            conn.execute("ALTER SYSTEM RESET autovacuum")
        else:
            conn.execute(f"ALTER SYSTEM SET autovacuum = {'on' if on else 'off'}")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)


def table_stats() -> dict:
    with pg(DB_NAME) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(STATS_SQL).fetchone()
    keys = ("live", "dead", "mod_since_analyze", "analyzed", "autoanalyzed", "analyze_count",
            "autoanalyze_count", "autovacuum_count")
    return dict(zip(keys, row)) if row else {}


def measure(engine: str, autovacuum: bool | None, tree: Path | None, source: str, work: Path,
            args: argparse.Namespace) -> dict:
    db = fresh_database(engine, source, work)
    env = environment(engine, tree, db)
    log = work / f"{engine}-{time.time_ns()}.cluster.log"
    if autovacuum is not None:
        set_autovacuum(autovacuum)
    try:
        # Not manage.py in the repository's root: its directory would come first on the path.
        cluster = Cluster(sys.executable, Path(tempfile.gettempdir()), env, log,
                          argv=[sys.executable, "-m", "django", "qcluster", "-w", "2"])
        with LoadMeter() as meter:
            cluster.start()
            try:
                time.sleep(2.0)  # started and idle
                done = subprocess.run([sys.executable, "-c", PRODUCER, str(args.rate), str(args.seconds)],
                                      env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True,
                                      timeout=args.seconds + 600)
                after = table_stats() if engine == "postgresql" else {}
            finally:
                cluster.stop(grace=60)
    finally:
        if autovacuum is not None:
            set_autovacuum(None)
    if done.returncode:
        raise SystemExit(f"{engine}: producer failed:\n{done.stderr[-3000:]}\ncluster log: {log}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    first, last = windows(result["jobs"], args.seconds, args.window)
    return {"engine": engine, "autovacuum": {None: "server", True: "on", False: "off"}[autovacuum],
            "first": summary(first), "last": summary(last), "never_started": sum(1 for _, v in result["jobs"] if v is None),
            "jobs": len(result["jobs"]), "sent_per_s": result["sent_per_s"], "table": after, "foreign_cores": meter.result["foreign_cores"],
            "load": meter.result, "samples": result["jobs"]}


def windows(jobs: list, seconds: float, window: float) -> tuple[list[float], list[float]]:
    first = [v for t, v in jobs if v is not None and t < window]
    last = [v for t, v in jobs if v is not None and t >= seconds - window]
    return first, last


def summary(values: list[float]) -> dict:
    values = sorted(values)
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(statistics.median(values), 2),
            "p95": round(values[min(len(values) - 1, int(0.95 * len(values)))], 2)}


def report(rows: list[dict]) -> None:
    """Print the table of a results file's rows (markdown)."""
    print(f"{rows[0]['rate']:g} jobs/s for {rows[0]['seconds']:g} s into a cluster of 2 workers; the jobs sent in "
          f"the first and the last {rows[0]['window']:g} s, enqueue call -> task start, ms.\n")
    print("| engine | code | autovacuum | first p50 / p95 | last p50 / p95 | last / first p50 | "
          "jobs sent (per s) | foreign load, cores |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        f, l = r["first"], r["last"]
        ratio = l["p50"] / f["p50"] if f.get("p50") and l.get("p50") else float("nan")
        print(f"| {r['engine']} | {r['code']} | {r['autovacuum']} | {f.get('p50')} / {f.get('p95')} | "
              f"{l.get('p50')} / {l.get('p95')} | {ratio:.2f} | {r['jobs']:,} ({r['sent_per_s']:g}) | {r['foreign_cores']} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="postgresql")
    parser.add_argument("--autovacuum", default="off,on", help="PostgreSQL: off, on and/or server")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--ref", default="", help="also run this commit's django_taskmq, interleaved")
    parser.add_argument("--quick", action="store_true", help="50 s runs, 15 s windows, one round")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="print the table of a saved results file and exit")
    args = parser.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text())["rows"])
        return 0
    if args.quick:
        args.seconds, args.window, args.runs = 50.0, 15.0, 1
    work = Path(tempfile.mkdtemp(prefix="taskmq-bench-drift-"))
    codes: list[tuple[str, Path | None]] = [("worktree", None)] + ([(args.ref, export(args.ref))] if args.ref else [])
    cells = []
    for engine in args.engines.split(","):
        settings = [{"off": False, "on": True, "server": None}[a] for a in args.autovacuum.split(",")] \
            if engine == "postgresql" else [None]
        cells += [(engine, a, code, tree) for a in settings for code, tree in codes]
    # SIGTERM ends the run through the finally blocks (the server's autovacuum is put back).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    seed = int(time.time())
    shuffle = random.Random(seed)
    sources = {engine: template(engine, work) for engine in args.engines.split(",")}
    rows = []
    for round_ in range(1, args.runs + 1):
        order = list(cells)
        shuffle.shuffle(order)
        for engine, autovacuum, code, tree in order:
            row = {"round": round_, "code": code, "rate": args.rate, "seconds": args.seconds, "window": args.window,
                   **measure(engine, autovacuum, tree, sources[engine], work, args)}
            rows.append(row)
            print(f"round {round_} {engine} {code} autovacuum {row['autovacuum']}: first p50 {row['first'].get('p50')} "
                  f"ms, last p50 {row['last'].get('p50')} ms, table {row['table']} "
                  f"(foreign load {row['foreign_cores']} cores)", file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "django_taskmq"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip())
    raw = {"commit": commit + (" (with uncommitted edits)" if dirty else ""), "ref": args.ref,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join(["benchmarks/drift.py", *argv]), "seed": seed, "runs": args.runs, "rate": args.rate,
           "seconds": args.seconds, "window": args.window, "rows": rows}
    out = args.out or (work / "drift.json" if args.quick else HERE / "results" / "drift.json")
    out.write_text(json.dumps(raw, separators=(",", ":")) + "\n")  # compact: a sample per job
    report(rows)
    print(f"raw: {out}; cluster logs: {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
