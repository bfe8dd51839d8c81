"""Where an idle job's latency goes: time each stage of its way through a real cluster.

    .venv/bin/python benchmarks/trace.py                     # SQLite, 40 jobs
    .venv/bin/python benchmarks/trace.py --engine postgresql -n 60 --sql
    .venv/bin/python benchmarks/trace.py --engine mysql -n 200 --sql     # MariaDB (database bench_trace)
    .venv/bin/python benchmarks/trace.py -n 60 --fill 1000000 --sql  # on a table of a million finished jobs

Starts ``qcluster`` of the benchmark project (``projects/taskmq_project``) on a fresh database,
with a few internal functions of django_taskmq wrapped to append a timestamp to a file of each
process; then enqueues jobs one at a time into the idle cluster (as the harness's latency
workload does), each waited for until its result is visible, and prints the median and the
largest time between consecutive stages. ``--sql`` also logs every statement, and ``--window K``
prints all events around the K-th job. A development tool: it patches internals by name, so it
breaks when they are renamed, and the wrappers add a few microseconds per stage. Timing goals
belong to ``run.py``; this tells where to look.

Needs a Python with django_taskmq and the engine's driver installed (the repository's ``.venv``).
"""

from __future__ import annotations

import argparse
import functools
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "projects" / "taskmq_project"

# (event, where it is taken), in the order a job meets them; "<" entry, ">" return.
STAGES = [
    ("wake>", "the pusher's wait returns"),
    ("reserve>", "the claim returns"),
    ("verify>", "the pusher verified and unpickled it"),
    ("from_pusher<", "the sentinel starts reading the batch"),
    ("dispatch>", "the sentinel sends the task to a worker"),
    ("exec<", "the worker starts it"),
    ("exec>", "it returns"),
    ("recorded>", "the worker recorded it itself"),
    ("outcome>", "the worker sends its outcome"),
    ("sentinel_got>", "the sentinel reads the outcome"),
    ("monitor_got>", "the monitor takes it from the result queue"),
    ("record<", "recording starts (worker or monitor)"),
    ("record>", "recording returns"),
]


def _setup(engine: str, trace_dir: str) -> None:
    sys.path[:0] = [str(PROJECT), str(HERE)]
    os.environ["DJANGO_SETTINGS_MODULE"] = "taskmq_project.settings"
    os.environ["BENCH_ENGINE"] = engine
    os.environ["TRACE_DIR"] = trace_dir
    import django

    django.setup()


def _log(event: str, detail: str = "") -> None:
    _log.files = getattr(_log, "files", {})
    pid = os.getpid()
    if pid not in _log.files:
        _log.files[pid] = open(os.path.join(os.environ["TRACE_DIR"], f"{pid}.txt"), "a", buffering=1)
    _log.files[pid].write(f"{time.time()!r}\t{pid}\t{event}\t{detail}\n")


def _wrap(owner, name: str, event: str, entry: bool = False) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if entry:
            _log(event + "<")
        result = original(*args, **kwargs)
        _log(event + ">")
        return result

    setattr(owner, name, wrapper)


def _install(sql: bool) -> None:
    """Wrap the functions on a job's way (by name: see the module docstring)."""
    from django_taskmq.runtime import execution, recorder
    from django_taskmq.brokers import orm
    from django_taskmq.brokers.orm import wakeup
    from django_taskmq.cluster import feeder, messages, monitor, sentinel, worker

    _wrap(wakeup.Waker, "wait", "wake")
    _wrap(orm.OrmBroker, "reserve", "reserve")
    _wrap(feeder, "tasks_frame", "dispatch")
    _wrap(sentinel.Sentinel, "_from_pusher", "from_pusher", entry=True)
    verified = messages.Ticket.verified.__func__

    def logged_verified(cls, *args, **kwargs):
        result = verified(cls, *args, **kwargs)
        _log("verify>")
        return result

    messages.Ticket.verified = classmethod(logged_verified)
    _wrap(execution, "execute", "exec", entry=True)
    _wrap(worker, "recorded_frame", "recorded")
    _wrap(worker, "outcome_frame", "outcome")
    _wrap(sentinel, "read_outcome_frame", "sentinel_got")
    _wrap(monitor, "load_outcomes", "monitor_got")
    _wrap(recorder, "record", "record", entry=True)
    if sql:
        from django.db.backends import utils

        for name in ("execute", "executemany"):
            original = getattr(utils.CursorWrapper, name)

            def logged(self, statement, *args, _original=original, **kwargs):
                _log("sql<", " ".join(statement.split())[:80])
                try:
                    return _original(self, statement, *args, **kwargs)
                finally:
                    _log("sql>")

            setattr(utils.CursorWrapper, name, logged)
        from django.db.backends.base.base import BaseDatabaseWrapper

        commit = BaseDatabaseWrapper._commit

        def logged_commit(self, _original=commit):
            _log("sql<", "COMMIT")
            try:
                return _original(self)
            finally:
                _log("sql>")

        BaseDatabaseWrapper._commit = logged_commit


def run_cluster(args: argparse.Namespace) -> None:
    _setup(args.engine, args.trace_dir)
    _install(args.sql)
    from django.core.management import call_command

    call_command("qcluster")


def _create_pg_database(name: str) -> None:
    import psycopg
    from benchdb import pg_params

    with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _create_mysql_database(name: str) -> None:
    import MySQLdb
    from benchdb import mysql_params

    params = mysql_params()
    conn = MySQLdb.connect(host=params["host"], port=int(params["port"]), user=params["user"],
                           passwd=params["password"], autocommit=True)
    try:
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()


def _fresh_database(engine: str, fill: int = 0) -> None:
    from django.core.management import call_command
    from django.db import connection

    if engine == "sqlite":
        for path in glob.glob(os.environ["BENCH_SQLITE_PATH"] + "*"):
            os.remove(path)
        call_command("migrate", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")  # as the harness's template database
    else:
        call_command("migrate", verbosity=0)
        from django_taskmq.models import Job

        Job.objects.all().delete()
    if fill:
        from adapters.taskmq import Adapter  # the scale workload's fill: finished rows, then ANALYZE

        Adapter().fill_finished(fill)
    connection.close()


def _events(trace_dir: str) -> list[tuple[float, str, str, str]]:
    events = []
    for path in glob.glob(os.path.join(trace_dir, "*.txt")):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 4:
                events.append((float(parts[0]), parts[1], parts[2], parts[3]))
    return sorted(events)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "mysql"], default="sqlite")
    parser.add_argument("-n", type=int, default=40, help="jobs to time (after 5 warm-up jobs)")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between a job's result and the next job")
    parser.add_argument("--sql", action="store_true", help="log every statement too")
    parser.add_argument("--poll", type=float, default=0.0005,
                        help="seconds between the client's looks for the result (the harness's: 0.0005)")
    parser.add_argument("--window", type=int, help="print every event around the K-th job")
    parser.add_argument("--fill", type=int, default=0,
                        help="first add that many finished jobs, as the scale workload does (keeps them: save_limit 0)")
    parser.add_argument("--cluster", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trace-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cluster:
        run_cluster(args)
        return 0

    with tempfile.TemporaryDirectory(prefix="taskmq-trace-") as trace_dir:
        os.environ.setdefault("BENCH_SQLITE_PATH", os.path.join(trace_dir, "trace.sqlite3"))
        os.environ.setdefault("BENCH_PG_NAME", "bench_trace")
        os.environ.setdefault("BENCH_MYSQL_NAME", "bench_trace")
        if args.engine == "mysql":  # before Django connects to it
            sys.path.insert(0, str(HERE))
            _create_mysql_database(os.environ["BENCH_MYSQL_NAME"])
        _setup(args.engine, trace_dir)
        if args.engine == "postgresql":
            _create_pg_database(os.environ["BENCH_PG_NAME"])
        if args.fill:
            os.environ["BENCH_TASKMQ_SAVE_LIMIT"] = "0"  # the cluster keeps the rows, as in the scale workload
        _fresh_database(args.engine, args.fill)
        from django_taskmq import async_task
        from django_taskmq.models import Job

        argv = [sys.executable, __file__, "--cluster", "--engine", args.engine, "--trace-dir", trace_dir]
        cluster = subprocess.Popen(argv + (["--sql"] if args.sql else []), start_new_session=True)
        jobs = []
        try:
            for count in range(5 + args.n):
                time.sleep(args.gap)
                called = time.time()
                job_id = async_task("benchtasks.noop")
                returned = time.time()
                deadline = returned + 60
                while not Job.objects.filter(pk=job_id, state="SUCCEEDED").exists():
                    if time.time() > deadline or cluster.poll() is not None:
                        raise SystemExit(f"job {job_id} not finished; is the cluster running?")
                    time.sleep(args.poll)
                if count >= 5:
                    jobs.append((called, returned, time.time()))
        finally:
            os.killpg(cluster.pid, 15)
            cluster.wait(30)
        events = _events(trace_dir)

    report(jobs, events)
    if args.sql:
        statements(jobs, events)
    slow = [i for i, (called, _, visible) in enumerate(jobs) if visible - called > 0.05]
    if slow:
        print(f"jobs visible more than 50 ms after their enqueue call: {slow} (see --window K)")
    if args.window is not None:
        called, _, visible = jobs[args.window]
        for at, pid, event, detail in events:
            if called - 0.002 <= at <= visible + 0.002:
                print(f"{(at - called) * 1000:8.3f} ms  {pid:>7}  {event:14} {detail}")
    return 0


def report(jobs: list[tuple[float, float, float]], events: list[tuple[float, str, str, str]]) -> None:
    """Print each stage a job met, in the order met: the time since the stage before it and since
    the enqueue call returned (medians; max), in ms."""
    described = dict(STAGES)
    gaps: dict[str, list[float]] = {name: [] for name in described}
    offsets: dict[str, list[float]] = {name: [] for name in described}
    calls, polls, totals = [], [], []
    for called, returned, visible in jobs:
        calls.append(returned - called)
        first: dict[str, float] = {}
        for at, _, event, _ in events:  # from the call on: the pusher may wake before it returns
            if called <= at <= visible and event in described and event not in first:
                first[event] = at
        previous = returned
        for event, at in sorted(first.items(), key=lambda item: item[1]):
            gaps[event].append(at - previous)
            offsets[event].append(at - returned)
            previous = max(previous, at)
        polls.append(visible - previous)
        totals.append(visible - called)

    def line(name: str, values: list[float], offset: list[float] | None = None, text: str = "") -> None:
        since = f"{statistics.median(offset) * 1000:8.3f}" if offset else " " * 8
        print(f"  {name:16} {statistics.median(values) * 1000:8.3f} {max(values) * 1000:8.3f} {since}"
              f"  {len(values):4}  {text}")

    print(f"{len(jobs)} idle jobs, ms: since the stage before (median, max), since the enqueue call returned "
          "(median), jobs that met the stage")
    line("enqueue call", calls, text="async_task() itself")
    for name in sorted((n for n in described if gaps[n]), key=lambda n: statistics.median(offsets[n])):
        line(name, gaps[name], offsets[name], described[name])
    line("visible", polls, text="the result seen by polling every 0.5 ms")
    line("total", totals, text="enqueue call to result seen")


def statements(jobs: list[tuple[float, float, float]], events: list[tuple[float, str, str, str]]) -> None:
    """Print each statement met on the jobs' way (enqueue call to result seen, the client's own
    excepted): its duration at the driver, median and max, in ms, and how often it ran per job."""
    durations: dict[str, list[float]] = {}
    for called, _, visible in jobs:
        opened: dict[str, tuple[float, str]] = {}
        for at, pid, event, detail in events:
            if not called <= at <= visible:
                continue
            if event == "sql<":
                opened[pid] = (at, detail)
            elif event == "sql>" and pid in opened:
                start, text = opened.pop(pid)
                durations.setdefault(text[:60], []).append(at - start)
    print(f"statements during the {len(jobs)} jobs (cluster processes), ms: median, max, runs per job")
    for text, values in sorted(durations.items(), key=lambda item: -sum(item[1])):
        print(f"  {statistics.median(values) * 1000:7.3f} {max(values) * 1000:8.3f} {len(values) / len(jobs):5.2f}  {text}")


if __name__ == "__main__":
    sys.exit(main())
