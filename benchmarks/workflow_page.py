#!/usr/bin/env python3
"""Time the admin's workflow pages on big workflows.

    .venv/bin/python benchmarks/workflow_page.py --engine sqlite      [--steps 10000] [--runs 7]
    .venv/bin/python benchmarks/workflow_page.py --engine postgresql  [--steps 10000] [--runs 7]

Uses its own database (SQLite ``/tmp/taskmq-workflow-bench.sqlite3``, PostgreSQL
``taskmq_workflow_bench``), emptied of workflows and jobs at each start, and enqueues through
``django_taskmq.Workflow``: a fan of ``--steps`` steps (one root, ``--steps`` leaves, one merge
waiting for all of them), a chain of ``--steps`` steps, and 50 workflows of 200 steps for the list.
Prints the median and the slowest of ``--runs`` renderings of each page for a superuser, with its
number of queries and its size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQLITE_PATH = "/tmp/taskmq-workflow-bench.sqlite3"
PG_NAME = "taskmq_workflow_bench"
T = "tests.tasks.noop"


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


def fill(steps: int) -> dict[str, str]:
    """Enqueue the workflows; return the pages to time by name."""
    from django_taskmq import Workflow
    from django_taskmq.models import Job
    from django_taskmq.models import Workflow as WorkflowRecord

    WorkflowRecord.objects.all().delete()  # its steps and edges with it
    Job.objects.all().delete()
    started = time.time()
    fan = Workflow(name="fan")
    root = fan.add(T, name="root")
    fan.add(T, name="merge", after=[fan.add(T, name=f"leaf-{i}", after=[root]) for i in range(steps)])
    fan_id = fan.enqueue()
    chain = Workflow(name="chain")
    previous = None
    for i in range(steps):
        previous = chain.add(T, name=f"s-{i}", after=[previous] if previous else None)
    chain_id = chain.enqueue()
    for n in range(50):
        small = Workflow(name=f"small-{n}")
        first = small.add(T, name="first")
        for i in range(199):
            small.add(T, name=f"s-{i}", after=[first])
        small.enqueue()
    print(f"enqueued {2 * steps + 2 + 50 * 200} steps in {time.time() - started:.0f} s", flush=True)
    pages = "/admin/django_taskmq/workflow/"
    return {
        f"workflow page, fan of {steps}": f"{pages}{fan_id}/change/",
        f"workflow page, chain of {steps}": f"{pages}{chain_id}/change/",
        "workflow list (52 workflows, 50 a page)": pages,
        "workflow list, state RUNNING": f"{pages}?state__exact=RUNNING",
        "job list, one workflow's steps": f"/admin/django_taskmq/job/?workflow={fan_id}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    options = parser.parse_args()
    setup(options.engine)
    pages = fill(options.steps)

    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    print(f"engine {connection.vendor}, {options.runs} runs each: median / slowest, queries, bytes")
    for name, url in pages.items():
        timings = []
        for _ in range(options.runs):
            with CaptureQueriesContext(connection) as queries:
                start = time.perf_counter()
                response = client.get(url)
                timings.append(time.perf_counter() - start)
            assert response.status_code == 200, (url, response.status_code)
        print(f"  {name:<42} {statistics.median(timings) * 1000:7.0f} ms / {max(timings) * 1000:5.0f} ms"
              f"  {len(queries):3d} queries  {len(response.content):8,d} bytes")


if __name__ == "__main__":
    main()
