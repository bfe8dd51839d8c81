"""What one round trip costs on this machine when the parties were idle, against back to back.

The latency workload sends each job 50 ms after the previous one finished, so every process on a
job's way (the caller, the database's server process, the pusher, the sentinel, a worker) has
slept before it is woken. This measures the bare steps such a path is made of, each timed
back to back ("busy") and each after a ``--gap-ms`` sleep of every party ("idle"), so that the
latency figures can be read as a count of steps:

* ``pipe``: one message to another Python process and its answer (``multiprocessing.Pipe``);
* ``redis PING``: one Redis round trip on a raw socket (what each step of Celery's way costs);
* ``postgresql SELECT 1``: one statement of psycopg 3 in autocommit;
* ``postgresql UPDATE, flushed`` / ``not flushed``: one committed update of one row, with
  ``synchronous_commit`` on (the caller's enqueue) and off (a relaxed outcome);
* ``sqlite UPDATE, flushed``: the same on an SQLite file in WAL mode, ``synchronous=FULL``
  (Python's sqlite3, as Django's backend);
* ``mariadb SELECT 1``: one statement of mysqlclient.

Each round runs every step in a shuffled order (seeded, recorded), ``--samples`` samples
each way; the foreign CPU load is recorded per round (``hostload.py``). Raw results:
``results/wakeups.json``, rendered into ARCHIVE.md by ``report.py``.

    .venv/bin/python benchmarks/wakeups.py [--runs 3] [--samples 100] [--gap-ms 50]
    python3 benchmarks/wakeups.py --report benchmarks/results/wakeups.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "wakeups.json"
DB_NAME = "bench_wakeups"  # a bench_ database: hostload.py counts its server process as the run's
STEPS = ("pipe", "redis PING", "postgresql SELECT 1", "postgresql UPDATE, flushed",
         "postgresql UPDATE, not flushed", "sqlite UPDATE, flushed", "mariadb SELECT 1")


def _echo(conn) -> None:
    while True:
        message = conn.recv_bytes()
        if not message:
            return
        conn.send_bytes(message)


class Steps:
    """Every step, ready to be timed: one callable each (set up once, closed by :meth:`close`)."""

    def __init__(self, folder: str) -> None:
        import MySQLdb
        import psycopg

        sys.path.insert(0, str(HERE))
        from benchdb import mysql_params, pg_params

        self.pipe, child = multiprocessing.Pipe()
        self.child = multiprocessing.Process(target=_echo, args=(child,), daemon=True)
        self.child.start()
        self.redis = socket.create_connection(("127.0.0.1", 6379))
        self.redis.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        params = pg_params()
        with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
            if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone():
                admin.execute(f'CREATE DATABASE "{DB_NAME}"')
        self.pg = {flush: psycopg.connect(dbname=DB_NAME, autocommit=True, **params) for flush in (True, False)}
        self.pg[True].execute("CREATE TABLE IF NOT EXISTS wakeups (id int PRIMARY KEY, n bigint)")
        self.pg[True].execute("INSERT INTO wakeups VALUES (1, 0), (2, 0) ON CONFLICT DO NOTHING")
        self.pg[False].execute("SET synchronous_commit = off")
        self.sqlite = sqlite3.connect(os.path.join(folder, "wakeups.sqlite3"), isolation_level=None)
        self.sqlite.execute("PRAGMA journal_mode=WAL")
        self.sqlite.execute("PRAGMA synchronous=FULL")
        self.sqlite.execute("CREATE TABLE wakeups (id INTEGER PRIMARY KEY, n INTEGER)")
        self.sqlite.execute("INSERT INTO wakeups VALUES (1, 0)")
        m = mysql_params()
        self.mariadb = MySQLdb.connect(host=m["host"], port=int(m["port"]), user=m["user"], passwd=m["password"],
                                       autocommit=True)
        self.steps = {
            "pipe": self._pipe,
            "redis PING": self._redis,
            "postgresql SELECT 1": lambda: self.pg[True].execute("SELECT 1").fetchone(),
            "postgresql UPDATE, flushed": lambda: self.pg[True].execute("UPDATE wakeups SET n = n + 1 WHERE id = 1"),
            "postgresql UPDATE, not flushed":
                lambda: self.pg[False].execute("UPDATE wakeups SET n = n + 1 WHERE id = 2"),
            "sqlite UPDATE, flushed": lambda: self.sqlite.execute("UPDATE wakeups SET n = n + 1 WHERE id = 1"),
            "mariadb SELECT 1": self._mariadb,
        }

    def _pipe(self) -> None:
        self.pipe.send_bytes(b"x")
        self.pipe.recv_bytes()

    def _redis(self) -> None:
        self.redis.sendall(b"PING\r\n")
        if self.redis.recv(64) != b"+PONG\r\n":
            raise RuntimeError("Redis did not answer PONG")

    def _mariadb(self) -> None:
        cursor = self.mariadb.cursor()
        cursor.execute("SELECT 1")
        cursor.fetchall()
        cursor.close()

    def close(self) -> None:
        self.pipe.send_bytes(b"")
        self.child.join(5)
        self.redis.close()
        for conn in self.pg.values():
            conn.close()
        self.sqlite.close()
        self.mariadb.close()


def sample(step, samples: int, gap: float) -> list[float]:
    """``samples`` timings (ms) of ``step``, each after ``gap`` s of sleep (0: back to back), after 10
    untimed ones."""
    timings = []
    for i in range(samples + 10):
        if gap:
            time.sleep(gap)
        started = time.perf_counter()
        step()
        if i >= 10:
            timings.append(round((time.perf_counter() - started) * 1000, 4))
    return timings


def measure(args: argparse.Namespace) -> dict:
    from hostload import LoadMeter

    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="taskmq-wakeups-") as folder:
        steps = Steps(folder)
        try:
            for run in range(1, args.runs + 1):
                order = list(STEPS)
                rng.shuffle(order)
                with LoadMeter() as meter:
                    timed = {name: {"busy_ms": sample(steps.steps[name], args.samples, 0),
                                    "idle_ms": sample(steps.steps[name], args.samples, args.gap_ms / 1000)}
                             for name in order}
                rows += [{"run": run, "step": name, "order": order.index(name), **timed[name],
                          "foreign_cores": meter.result["foreign_cores"]} for name in STEPS]
                print(f"run {run}: foreign load {meter.result['foreign_cores']} cores", flush=True)
        finally:
            steps.close()
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    return {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "runs": args.runs, "samples": args.samples, "gap_ms": args.gap_ms, "seed": args.seed, "rows": rows}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def report(rows: list[dict]) -> None:
    """Print the table of ``rows`` (markdown): per step, the median of each run's median, with the
    runs' range."""
    print("| step | back to back, ms | after an idle gap, ms | idle / busy |")
    print("|---|---|---|---|")
    for name in STEPS:
        mine = [r for r in rows if r["step"] == name]
        if not mine:
            continue
        busy = [statistics.median(r["busy_ms"]) for r in mine]
        idle = [statistics.median(r["idle_ms"]) for r in mine]
        print(f"| {name} | {_spread(busy)} | {_spread(idle)} | "
              f"{statistics.median(idle) / statistics.median(busy):.1f}× |")
    loads = sorted({r["foreign_cores"] for r in rows})
    print(f"\nForeign load per run: {', '.join(f'{v:g}' for v in loads)} cores.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--gap-ms", type=float, default=50.0, help="the latency workload's gap")
    parser.add_argument("--seed", type=int, default=30)
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
