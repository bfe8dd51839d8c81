"""Which statements MariaDB is busy with while django_taskmq drains: a sampling profile of the server.

    benchmarks/.work/venv-taskmq/bin/python benchmarks/mysql_processlist.py -n 20000
    benchmarks/.work/venv-taskmq/bin/python benchmarks/mysql_processlist.py -n 2000 --runs 3
    benchmarks/.work/venv-taskmq/bin/python benchmarks/mysql_processlist.py -n 2000 --fill 1000000  # as scale

Queues ``-n`` no-op jobs (``enqueue_many``) in the database ``bench_trace`` (created if missing,
migrated, emptied), starts the benchmark project's ``qcluster`` on it and, until no job is pending,
from the first job done on reads ``information_schema.PROCESSLIST`` every ``--every`` seconds from a
connection of its own (the harness's pending count, every 20 ms, is among what it sees): each
statement of that database seen executing counts one sample (its text with the literals and the
``IN (...)`` lists folded, and MariaDB's state, e.g. "Sending data", "Updating", "Commit"). Prints
the drain's rate, the share of samples per statement, and how often no statement was running
(the server idle, waiting for the cluster). Performance Schema is off on this project's shared
server (turning it on needs a restart), hence sampling. A development tool, like ``trace.py``: it
tells where to look; the figures of RESULTS.md come from ``run.py``.

Needs a Python with django_taskmq and mysqlclient (the harness's ``venv-taskmq``).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "projects" / "taskmq_project"
DATABASE = "bench_trace"


def _connect(database: str | None = None):
    import MySQLdb
    from benchdb import mysql_params

    p = mysql_params()
    kwargs = {"host": p["host"], "port": int(p["port"]), "user": p["user"], "passwd": p["password"],
              "autocommit": True, "charset": "utf8mb4"}
    if database:
        kwargs["db"] = database
    return MySQLdb.connect(**kwargs)


def fold(statement: str) -> str:
    """The statement's shape: literals, numbers and IN lists replaced, whitespace squeezed."""
    text = " ".join(statement.split())
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "?", text)
    text = re.sub(r"\b\d+(\.\d+)?\b", "N", text)
    text = re.sub(r"IN \((\?|N)(, ?(\?|N))*\)", "IN (...)", text)
    text = re.sub(r"VALUES (\(.*?\))(, \(.*?\))+", r"VALUES \1, ...", text)
    return text[:150]


def sample(stop: threading.Event, counting: threading.Event, every: float, counts: collections.Counter,
           idle: list) -> None:
    conn = _connect()
    cursor = conn.cursor()
    counting.wait()
    while not stop.is_set():
        cursor.execute("SELECT STATE, INFO FROM information_schema.PROCESSLIST WHERE DB = %s "
                       "AND COMMAND = 'Query' AND ID <> CONNECTION_ID()", (DATABASE,))
        rows = cursor.fetchall()
        idle[0] += 1
        if not rows:
            idle[1] += 1
        for state, info in rows:
            counts[(fold(info or ""), state or "")] += 1
        time.sleep(every)
    conn.close()


FILLED: list = []  # with --fill: its size (the fill's rows are kept, as the scale workload keeps them)


def one_run(n: int, every: float) -> None:
    from django.db import connection
    from django_taskmq import enqueue_many
    from django_taskmq.models import Job

    # The fill's ids are those of jobs made in 1970 (adapters/taskmq.py): keep them, drop the rest.
    Job.objects.filter(id__gte="0001" if FILLED else "").delete()
    for start in range(0, n, 5000):
        enqueue_many("benchtasks.noop", [()] * min(5000, n - start))
    connection.close()
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / "mysql_processlist.cluster.log", "w")
    counts: collections.Counter = collections.Counter()
    idle = [0, 0]  # samples, samples with no statement running
    stop, counting = threading.Event(), threading.Event()  # counting: from the first job done on
    sampler = threading.Thread(target=sample, args=(stop, counting, every, counts, idle), daemon=True)
    t0 = time.time()
    cluster = subprocess.Popen([sys.executable, str(PROJECT / "manage.py"), "qcluster"], cwd=PROJECT, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    sampler.start()
    first = None
    try:
        while True:
            pending = Job.objects.filter(state__in=("QUEUED", "RUNNING", "RETRYING")).count()
            if first is None and pending < n:
                first = (time.time(), pending)
                counting.set()
            if pending == 0:
                break
            if cluster.poll() is not None or time.time() - t0 > 600:
                raise SystemExit("the cluster died or took too long; see the log")
            time.sleep(0.02)
        end = time.time()
    finally:
        stop.set()
        counting.set()
        sampler.join()
        os.killpg(cluster.pid, 15)
        cluster.wait(30)
    steady = first[1] / (end - first[0]) if first and end > first[0] else float("nan")
    print(f"\n{n} jobs: {n / (end - t0):.0f} jobs/s including start-up, {steady:.0f} after the first job; "
          f"{idle[0]} samples, {100 * idle[1] / max(idle[0], 1):.0f} % with no statement of {DATABASE} running")
    total = sum(counts.values()) or 1
    print(f"{'share':>6}  {'samples':>7}  state | statement")
    for (text, state), count in counts.most_common(15):
        print(f"{100 * count / total:5.1f}%  {count:7d}  {state} | {text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--every", type=float, default=0.002, help="seconds between two samples")
    parser.add_argument("--fill", type=int, default=0, help="first add that many finished jobs, as the scale "
                        "workload does (the cluster keeps every finished job then: save_limit 0)")
    args = parser.parse_args()
    sys.path[:0] = [str(PROJECT), str(HERE)]
    conn = _connect()
    conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}` CHARACTER SET utf8mb4")
    conn.close()
    os.environ.update(DJANGO_SETTINGS_MODULE="taskmq_project.settings", BENCH_ENGINE="mysql",
                      BENCH_MYSQL_NAME=DATABASE)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if args.fill:
        from django_taskmq.models import Job

        from adapters.taskmq import Adapter

        Job.objects.all().delete()
        Adapter().fill_finished(args.fill)
        os.environ["BENCH_TASKMQ_SAVE_LIMIT"] = "0"
        FILLED.append(args.fill)
    for _ in range(args.runs):
        one_run(args.n, args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
