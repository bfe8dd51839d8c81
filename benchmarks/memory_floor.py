"""The memory a single Django process costs before it runs any task: the floor under any Django queue.

Issue 30 asks for a cluster's PSS within 1.5x of the lowest peer's; the lowest is oban-py, one
Python process with no Django. This measures, each in a fresh process and on each engine, what
one process holds at each step of becoming a Django program that has spoken to its database:

* ``python``: the interpreter alone (``site`` imported);
* ``driver, one query``: the engine's driver (``sqlite3``, psycopg 3, mysqlclient), one connection
  and one ``SELECT 1``, no Django;
* ``django.setup(), no apps, one query``: Django configured with only ``DATABASES``, one
  ``SELECT 1`` through ``django.db.connection``;
* ``the benchmark project, one query``: ``django.setup()`` of ``projects/taskmq_project``
  (``INSTALLED_APPS = ["django_taskmq"]``), one query;
* ``and what qcluster imports before forking``: that, with the cluster's modules
  (``cluster.sentinel``, ``api``, ``recorder``, ``scheduler``) and its broker built, as the
  sentinel holds them at its fork;
* ``and one forked child that looked for work``: the two processes' PSS together after that
  process forked (``gc.freeze()`` first, as the sentinel does) a child that connected afresh and
  asked the broker whether work is ready: what one more process of a cluster costs at the least.

PSS, RSS and their anonymous and file parts come from ``/proc/self/smaps_rollup``. Each run
measures every step once per engine in a shuffled order (seeded, recorded), with the foreign CPU
load recorded. Raw results: ``results/memory-floor.json``, rendered into ARCHIVE.md by
``report.py``.

    .venv/bin/python benchmarks/memory_floor.py [--runs 3]
    python3 benchmarks/memory_floor.py --report benchmarks/results/memory-floor.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "projects" / "taskmq_project"
OUT = HERE / "results" / "memory-floor.json"
ENGINES = ("sqlite", "postgresql", "mysql")
STEPS = ("python", "driver, one query", "django.setup(), no apps, one query", "the benchmark project, one query",
         "and what qcluster imports before forking", "and one forked child that looked for work")
FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_File")
DB_NAME = "bench_memory_floor"  # a bench_ database: hostload.py counts its server process as the run's

# Run in a fresh interpreter: build up to the step named by argv[1], print the smaps_rollup fields.
PROGRAM = r"""
import json, os, sys
step, engine = sys.argv[1], os.environ["BENCH_ENGINE"]

def driver_query():
    from benchdb import mysql_params, pg_params
    if engine == "sqlite":
        import sqlite3
        sqlite3.connect(os.environ["BENCH_SQLITE_PATH"]).execute("SELECT 1").fetchone()
    elif engine == "postgresql":
        import psycopg
        psycopg.connect(dbname=os.environ["BENCH_PG_NAME"], **pg_params()).execute("SELECT 1").fetchone()
    else:
        import MySQLdb
        p = mysql_params()
        c = MySQLdb.connect(host=p["host"], port=int(p["port"]), user=p["user"], passwd=p["password"]).cursor()
        c.execute("SELECT 1")
        c.fetchall()

def django_query():
    from django.db import connection
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchall()

if step == "driver, one query":
    driver_query()
elif step == "django.setup(), no apps, one query":
    from django.conf import settings
    from benchdb import databases
    settings.configure(DATABASES=databases("memory_floor", os.environ["BENCH_PG_NAME"]), USE_TZ=True)
    import django
    django.setup()
    django_query()
elif step != "python":
    os.environ["DJANGO_SETTINGS_MODULE"] = "taskmq_project.settings"
    import django
    django.setup()
    django_query()
    if step != "the benchmark project, one query":
        from django_taskmq import api, scheduler
        from django_taskmq.runtime import recorder  # noqa: F401
        from django_taskmq.brokers import get_broker
        from django_taskmq.cluster import sentinel  # noqa: F401
        get_broker().has_ready(["default"])

def rollup():
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f.readlines()[1:]:
            key, _, rest = line.partition(":")
            fields[key] = int(rest.split()[0])
    return fields

if step == "and one forked child that looked for work":
    import gc
    from django.db import connections
    connections.close_all()  # the child connects afresh, as the cluster's children do
    gc.freeze()
    mine, theirs = os.pipe()
    done_r, done_w = os.pipe()
    if os.fork() == 0:
        get_broker().has_ready(["default"])
        os.write(theirs, json.dumps(rollup()).encode())
        os.read(done_r, 1)  # alive until the parent has read its own
        os._exit(0)
    child = json.loads(os.read(mine, 65536))
    parent = rollup()
    os.write(done_w, b"x")
    os.wait()
    print(json.dumps({key: parent[key] + child[key] for key in parent}))
else:
    print(json.dumps(rollup()))
"""


def _prepare(engine: str, env: dict[str, str]) -> None:
    """The benchmark project's tables, so that its one query and the broker's look have a table."""
    if engine == "postgresql":
        from cpu_by_process import _create_pg_database

        _create_pg_database(DB_NAME)
    elif engine == "mysql":
        from benchdb import mysql_params

        import MySQLdb

        p = mysql_params()
        conn = MySQLdb.connect(host=p["host"], port=int(p["port"]), user=p["user"], passwd=p["password"])
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {DB_NAME}")
        conn.close()
    subprocess.run([sys.executable, str(PROJECT / "manage.py"), "migrate", "-v", "0"], env=env, check=True)


def one(step: str, env: dict[str, str]) -> dict[str, int]:
    """The smaps_rollup fields (KiB) of a fresh process that went as far as ``step``."""
    out = subprocess.run([sys.executable, "-c", PROGRAM, step], env=env, check=True, capture_output=True, text=True)
    fields = json.loads(out.stdout)
    return {key: fields[key] for key in FIELDS}


def measure(args: argparse.Namespace) -> dict:
    sys.path[:0] = [str(HERE)]
    from hostload import LoadMeter

    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="taskmq-memory-floor-") as folder:
        envs = {}
        for engine in args.engines:
            # Without DJANGO_SETTINGS_MODULE: the program sets it where a step wants the project.
            env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
            env.update(BENCH_ENGINE=engine, BENCH_PG_NAME=DB_NAME, BENCH_MYSQL_NAME=DB_NAME,
                       BENCH_SQLITE_PATH=os.path.join(folder, "db.sqlite3"),
                       PYTHONPATH=os.pathsep.join([str(PROJECT), str(HERE)]))
            _prepare(engine, {**env, "DJANGO_SETTINGS_MODULE": "taskmq_project.settings"})
            envs[engine] = env
        for run in range(1, args.runs + 1):
            order = [(engine, step) for engine in args.engines for step in STEPS]
            rng.shuffle(order)
            with LoadMeter() as meter:
                measured = {case: one(case[1], envs[case[0]]) for case in order}
            rows += [{"run": run, "engine": engine, "step": step, "order": order.index((engine, step)),
                      "kib": measured[(engine, step)], "foreign_cores": meter.result["foreign_cores"]}
                     for engine, step in order]
            print(f"run {run}: foreign load {meter.result['foreign_cores']} cores", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    versions = subprocess.run([sys.executable, "-c", "import django, platform; "
                               "print(platform.python_version(), django.get_version())"],
                              capture_output=True, text=True).stdout.split()
    return {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "runs": args.runs, "seed": args.seed, "python": versions[0], "django": versions[1], "rows": rows}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def report(rows: list[dict]) -> None:
    """Print the table of ``rows`` (markdown): per step, each engine's PSS in MiB, median (min-max)
    over the runs, and the median's anonymous part."""
    engines = [e for e in ENGINES if any(r["engine"] == e for r in rows)]
    print("One fresh process per cell; PSS in MiB, median (min–max) over the runs, then the median's "
          "anonymous (heap) part.\n")
    print("| step | " + " | ".join(engines) + " |")
    print("|---|" + "---|" * len(engines))
    for step in STEPS:
        cells = []
        for engine in engines:
            mine = [r["kib"] for r in rows if r["step"] == step and r["engine"] == engine]
            if not mine:
                cells.append("–")
                continue
            anon = statistics.median(k["Pss_Anon"] / 1024 for k in mine)
            cells.append(f"{_spread([k['Pss'] / 1024 for k in mine])}; anon {anon:.1f}")
        print(f"| {step} | " + " | ".join(cells) + " |")
    loads = sorted({r["foreign_cores"] for r in rows})
    print(f"\nForeign load per run: {', '.join(f'{v:g}' for v in loads)} cores.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", default=",".join(ENGINES), help="comma-separated: sqlite, postgresql, mysql")
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report", type=Path, help="print the table of a saved results file and exit")
    args = parser.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text())["rows"])
        return 0
    args.engines = args.engine.split(",")
    raw = measure(args)
    args.out.write_text(json.dumps(raw, indent=1) + "\n")
    report(raw["rows"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
