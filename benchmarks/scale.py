"""Scale check: drain rate with a million finished jobs in the table against an empty table.

    .venv/bin/python benchmarks/scale.py --engine sqlite --finished 1000000 -n 5000 --runs 3

Runs in the repository's own virtual environment (``./scripts/test`` or ``./scripts/demo`` makes
it) against a scratch database: SQLite file under ``benchmarks/.work/`` or the PostgreSQL
database ``bench_scale``. Finished rows are written with one SQL statement (they only need to
exist: SUCCEEDED rows that the claim's partial index must skip); ``save_limit`` is 0 so nothing
prunes them while the drain runs. The drain is ``manage.py qcluster --burst`` with 2 workers;
the rate is jobs divided by the time from the first start to the last finish.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(__file__).resolve().parent / ".work"

FILL = {
    "sqlite": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %(count)s) "
        "INSERT INTO django_taskmq_job (id, func, task_name, payload, queue, priority, state, attempt, deliveries, "
        "yields, max_deliveries, visible_at, enqueued_at, started_at, finished_at, error, traceback) "
        "SELECT printf('0000%%020d', i), 'benchtasks.noop', 'benchtasks.noop', '', 'default', 0, 'SUCCEEDED', 1, 1, "
        "0, 5, 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00', '2026-01-01 00:00:01', '', '' FROM n"
    ),
    "postgresql": (
        "INSERT INTO django_taskmq_job (id, func, task_name, payload, queue, priority, state, attempt, deliveries, "
        "yields, max_deliveries, visible_at, enqueued_at, started_at, finished_at, error, traceback) "
        "SELECT lpad(i::text, 24, '0'), 'benchtasks.noop', 'benchtasks.noop', '', 'default', 0, 'SUCCEEDED', 1, 1, "
        "0, 5, 0, '2026-01-01', '2026-01-01', '2026-01-01', '', '' FROM generate_series(1, %(count)s) AS i"
    ),
}


def env_for(engine: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TASKMQ_OVERRIDES=json.dumps({"save_limit": 0, "workers": 2}))
    if engine == "sqlite":
        WORK.mkdir(exist_ok=True)
        env.update(DJANGO_SETTINGS_MODULE="tests.settings_sqlite", TASKMQ_DB_NAME=str(WORK / "scale.sqlite3"))
    else:
        env.update(DJANGO_SETTINGS_MODULE="tests.settings_postgresql", TASKMQ_DB_NAME="bench_scale")
    return env


def django(code: str, env: dict[str, str]) -> str:
    script = "import django; django.setup()\n" + code
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def reset(engine: str, env: dict[str, str]) -> None:
    if engine == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(env["TASKMQ_DB_NAME"] + suffix).unlink(missing_ok=True)
    else:
        for sql in ("DROP DATABASE IF EXISTS bench_scale", "CREATE DATABASE bench_scale"):
            subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], env=env, cwd=ROOT, check=True)


def fill(engine: str, env: dict[str, str], count: int) -> None:
    if count:
        django(f"from django.db import connection\n"
               f"connection.cursor().execute({FILL[engine]!r} % {{'count': {count}}})\n"
               f"connection.cursor().execute('ANALYZE django_taskmq_job')", env)


def drain(env: dict[str, str], n: int) -> float:
    django(f"from django_taskmq import enqueue_many\nenqueue_many('tests.tasks.noop', [()] * {n})", env)
    subprocess.run([sys.executable, "manage.py", "qcluster", "--burst"], env=env, cwd=ROOT, check=True,
                   capture_output=True)
    out = django("from django.db.models import Min, Max, Count\nfrom django_taskmq.models import Job\n"
                 "a = Job.objects.filter(func='tests.tasks.noop', state='SUCCEEDED').aggregate("
                 "Min('started_at'), Max('finished_at'), Count('id'))\n"
                 "print(a['id__count'], (a['finished_at__max'] - a['started_at__min']).total_seconds())", env)
    count, seconds = out.split()
    django("from django_taskmq.models import Job\nJob.objects.filter(func='tests.tasks.noop').delete()", env)
    return int(count) / float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    env = env_for(options.engine)
    results = {}
    for label, finished in (("empty table", 0), (f"{options.finished:,} finished rows", options.finished)):
        reset(options.engine, env)
        started = time.perf_counter()
        fill(options.engine, env, finished)
        rates = [drain(env, options.n) for _ in range(options.runs)]
        results[label] = rates
        print(f"{options.engine} {label}: fill {time.perf_counter() - started:.0f}s, drain jobs/s "
              f"min {min(rates):.0f} median {statistics.median(rates):.0f} max {max(rates):.0f}", flush=True)
    empty, full = (statistics.median(r) for r in results.values())
    print(f"{options.engine}: median with finished rows / empty = {full / empty:.2f}")


if __name__ == "__main__":
    main()
