#!/usr/bin/env python3
"""Time the operator's read queries (dashboard, qmonitor, metrics) on a large job table.

    .venv/bin/python benchmarks/dashboard.py --engine sqlite      [--rows 1000000] [--runs 7]
    .venv/bin/python benchmarks/dashboard.py --engine postgresql  [--rows 1000000] [--runs 7]

Fills its own database (SQLite ``/tmp/taskmq-dashboard-bench.sqlite3``, PostgreSQL
``taskmq_dashboard_bench``; kept between runs and refilled when its row count differs) with
``--rows`` finished jobs spread over the last 24 hours (97 % succeeded, 2 % failed, 1 % dead, each
dead job with a dead letter, 100 of them pending), plus 1,000 ready, 200 delayed, 50 retrying and
20 running jobs and 3 cluster heartbeats, then refreshes the planner's statistics and prints the
median and the slowest of ``--runs`` timings of each query set, and the dashboard page rendered
through the admin.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQLITE_PATH = "/tmp/taskmq-dashboard-bench.sqlite3"
PG_NAME = "taskmq_dashboard_bench"
QUEUES = ("default", "emails", "reports", "a", "b")


def setup(engine: str) -> None:
    sys.path.insert(0, str(ROOT))
    if engine == "postgresql":
        import psycopg

        with psycopg.connect(host=os.environ.get("PGHOST", "127.0.0.1"), user=os.environ.get("PGUSER", "postgres"),
                             dbname="postgres", autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PG_NAME]).fetchone():
                conn.execute(f"CREATE DATABASE {PG_NAME}")
        os.environ["TASKMQ_DB_NAME"] = PG_NAME
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings_postgresql"
    else:
        os.environ["TASKMQ_DB_NAME"] = SQLITE_PATH
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings_sqlite"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def fill(rows: int) -> None:
    from django.db import connection

    from django_taskmq.models import Cluster, DeadLetter, Job

    finished = Job.objects.filter(state__in=["SUCCEEDED", "FAILED", "DEAD"]).count()
    if finished == rows:
        print(f"table already holds {rows} finished jobs")
        return
    print(f"filling {rows} finished jobs ...", flush=True)
    started = time.time()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DeadLetter._meta.db_table}")
        cursor.execute(f"DELETE FROM {Job._meta.db_table}")
        cursor.execute(f"DELETE FROM {Cluster._meta.db_table}")
        columns = ("id, func, task_name, payload, queue, priority, state, attempt, deliveries, yields, max_deliveries, "
                   "visible_at, enqueued_at, started_at, finished_at, error, traceback")
        if connection.vendor == "postgresql":
            queue = "(ARRAY['default','emails','reports','a','b'])[1 + i % 5]"
            at = f"now() - make_interval(secs => i * 86400.0 / {rows})"
            cursor.execute(
                f"INSERT INTO {Job._meta.db_table} ({columns}) "
                f"SELECT lpad(to_hex(i), 14, '0') || '0000000000', 'tests.tasks.noop', 'tests.tasks.noop', 'x', "
                f"{queue}, (i % 3) * 4 - 4, "
                f"CASE WHEN i % 100 = 0 THEN 'DEAD' WHEN i % 50 = 1 THEN 'FAILED' ELSE 'SUCCEEDED' END, "
                f"1, 1, 0, 5, extract(epoch from {at}), {at}, {at}, {at}, "
                f"CASE WHEN i % 50 IN (0, 1) THEN 'TaskFailed: boom' ELSE '' END, '' "
                f"FROM generate_series(1, {rows}) AS i")
        else:
            queue = "CASE i % 5 " + " ".join(f"WHEN {n} THEN '{q}'" for n, q in enumerate(QUEUES)) + " END"
            at = f"strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%f seconds', i * 86400.0 / {rows}))"
            cursor.execute(
                f"INSERT INTO {Job._meta.db_table} ({columns}) "
                f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {rows}) "
                f"SELECT printf('%014x0000000000', i), 'tests.tasks.noop', 'tests.tasks.noop', 'x', {queue}, "
                f"(i % 3) * 4 - 4, "
                f"CASE WHEN i % 100 = 0 THEN 'DEAD' WHEN i % 50 = 1 THEN 'FAILED' ELSE 'SUCCEEDED' END, "
                f"1, 1, 0, 5, unixepoch('now') - i * 86400.0 / {rows}, {at}, {at}, {at}, "
                f"CASE WHEN i % 50 IN (0, 1) THEN 'TaskFailed: boom' ELSE '' END, '' FROM s")
        cursor.execute(
            f"INSERT INTO {DeadLetter._meta.db_table} (job_id, queue, task_name, reason, error, deliveries, failed_at, "
            f"replayed_at, replay_count) SELECT id, queue, task_name, 'max deliveries exceeded: failed 5 times', "
            f"error, 5, finished_at, finished_at, 1 FROM {Job._meta.db_table} WHERE state = 'DEAD'")
        cursor.execute(
            f"UPDATE {DeadLetter._meta.db_table} SET replayed_at = NULL, replay_count = 0 "
            f"WHERE id IN (SELECT id FROM {DeadLetter._meta.db_table} ORDER BY id LIMIT 100)")
    now = time.time()
    live = []
    for i in range(1270):
        state, visible = "QUEUED", now - 5 - i % 300
        if 1000 <= i < 1200:
            visible = now + 3600
        elif 1200 <= i < 1250:
            state, visible = "RETRYING", now + 30
        elif i >= 1250:
            state = "RUNNING"
        live.append(Job(id=f"f{i:013x}0000000000", func="tests.tasks.noop", task_name="tests.tasks.noop",
                        payload="x", queue=QUEUES[i % 5], priority=(i % 3) * 4 - 4, state=state, visible_at=visible,
                        lease_owner="bench:host:1:x" if state == "RUNNING" else None,
                        lease_until=now + 60 if state == "RUNNING" else None))
    Job.objects.bulk_create(live, batch_size=500)
    from django.utils import timezone

    for n in range(3):
        Cluster.objects.create(
            id=f"bench:host{n}:{100 + n}:abcd", name="bench", host=f"host{n}", pid=100 + n, state="running",
            workers=4, queues=list(QUEUES), beat_at=timezone.now() + __import__("datetime").timedelta(days=1),
            counts={"succeeded": 1000, "failed": 10, "running": 4, "waiting": 0,
                    "queues": {q: {"succeeded": 200, "failed": 2, "timeouts": 0, "crashes": 0} for q in QUEUES},
                    "tasks": [[w, f"f{1250 + w:013x}0000000000", "default", 1.5] for w in range(4)]})
    print(f"filled in {time.time() - started:.0f} s", flush=True)


def analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE django_taskmq_job")
            cursor.execute("VACUUM ANALYZE django_taskmq_deadletter")
        else:
            cursor.execute("ANALYZE")


def dashboard_page():
    """Render the admin dashboard for a superuser; return a callable that renders it once."""
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)

    def render() -> None:
        response = client.get("/admin/django_taskmq/dashboard/")
        assert response.status_code == 200, response.status_code

    return render


def admin_pages() -> dict:
    """The admin's list pages, each default filter and search, and a job page, for a superuser:
    ``{name: callable rendering it once}``."""
    from django.contrib.auth.models import User
    from django.test import Client

    from django_taskmq.models import DeadLetter, Job

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    failed = Job.objects.filter(state="FAILED").order_by("-id").values_list("id", flat=True).first()
    letter = DeadLetter.objects.order_by("-id").values_list("id", flat=True).first()
    jobs, letters = "/admin/django_taskmq/job/", "/admin/django_taskmq/deadletter/"
    pages = {
        "job list": jobs,
        "job list, state FAILED": jobs + "?state__exact=FAILED",
        "job list, state QUEUED": jobs + "?state__exact=QUEUED",
        "job list, queue emails": jobs + "?queue=emails",
        "job list, priority 4": jobs + "?priority=4",
        "job list, cluster bench": jobs + "?cluster=bench",
        "job list, group g1": jobs + "?group=g1",
        "job list, search an id": jobs + f"?q={failed}",
        "job list, search a task name": jobs + "?q=tasks.noop",
        "job list, search a task name not there": jobs + "?q=nothing.like.this",
        "job page (a failed job)": f"{jobs}{failed}/change/",
        "dead-letter list": letters,
        "dead-letter list, queue emails": letters + "?queue=emails",
        "dead-letter list, waiting": letters + "?replayed=no",
        "dead-letter list, reason failed": letters + "?reason=failed",
        "dead-letter list, search an error": letters + "?q=boom",
        "dead-letter page": f"{letters}{letter}/change/",
    }

    def page(url: str):
        def render() -> None:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return render

    return {f"admin: {name}": page(url) for name, url in pages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-page", action="store_true", help="time the queries only, not the admin page")
    parser.add_argument("--only", help="time only the cases whose name contains this text")
    args = parser.parse_args()
    setup(args.engine)
    fill(args.rows)
    analyze()
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    from django_taskmq.observability import metrics, statistics

    cases = {
        "queue_stats (ready by priority, delayed, retrying, running, dead letters, oldest age)": statistics.queue_stats,
        "clusters_alive (heartbeats, task names)": statistics.clusters_alive,
        "throughput (last minute, hour, per-minute chart)": statistics.throughput,
        "snapshot (all three: the dashboard's and qmonitor's reads)": statistics.snapshot,
        "finished_counters (metrics counters from heartbeats)": statistics.finished_counters,
        "jobs_by_queue_and_state (every state: the whole index)": statistics.jobs_by_queue_and_state,
        "metrics exposition (every metric; jobs of every state but succeeded)": metrics.exposition,
    }
    if not args.no_page:
        cases["dashboard page (admin, rendered)"] = dashboard_page()
        cases.update(admin_pages())
    if args.only:
        cases = {name: case for name, case in cases.items() if args.only in name}
    print(f"\n{connection.vendor}, {args.rows} finished jobs, median and slowest of {args.runs} runs")
    for name, case in cases.items():
        case()  # warm up
        timings = []
        with CaptureQueriesContext(connection) as queries:
            for _ in range(args.runs):
                started = time.perf_counter()
                case()
                timings.append((time.perf_counter() - started) * 1000)
        per_run = len(queries) // args.runs
        reset_queries()
        print(f"  {statistics.median(timings):8.1f} ms  (max {max(timings):7.1f})  {per_run:2d} queries  {name}")


if __name__ == "__main__":
    main()
