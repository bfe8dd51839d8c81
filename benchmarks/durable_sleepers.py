"""Claim latency of ordinary work beside many sleeping durable jobs, on PostgreSQL.

    .venv/bin/python benchmarks/durable_sleepers.py [--sleeping 10000,100000] [--claims 200] [--delayed]

On a fresh database ``bench_durable_sleepers`` (``tests.settings_postgresql``): the median time of
``--claims`` claims of one new job (``Broker.reserve`` of 1, each after an enqueue), first on an
empty table, then beside each number of ``--sleeping`` jobs stored as a durable sleep leaves them
(``SUSPENDED``, waking in ten hours), vacuumed and analysed as autovacuum would leave them. With
``--delayed`` the jobs are ``QUEUED`` for ten hours instead (``delay=``), which is what a sleep
looked like before it had a state of its own: the ready index holds them, and each claim walks them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleeping", default="10000,100000")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--delayed", action="store_true")
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings_postgresql"
    os.environ.setdefault("TASKMQ_DB_NAME", "bench_durable_sleepers")
    import django
    from django.test.utils import setup_databases, teardown_databases

    django.setup()
    from django.db import connection

    from django_taskmq import async_task, enqueue_many
    from django_taskmq.brokers import get_broker
    from django_taskmq.models import Job

    state = setup_databases(verbosity=0, interactive=False)
    broker = get_broker()

    def claims() -> float:
        times = []
        for _ in range(args.claims):
            async_task("tests.tasks.noop")
            began = time.perf_counter()
            assert len(broker.reserve(["default"], 1, 60, "bench")) == 1
            times.append(time.perf_counter() - began)
        return statistics.median(times) * 1000

    try:
        print(f"empty table: {claims():.3f} ms a claim")
        stored = 0
        for total in (int(n) for n in args.sleeping.split(",")):
            while stored < total:
                ids = enqueue_many("tests.tasks.noop", [()] * min(5000, total - stored), delay=36000)
                if not args.delayed:
                    Job.objects.filter(pk__in=ids).update(state="SUSPENDED")
                stored += len(ids)
            with connection.cursor() as cursor:
                cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
            kind = "delayed (QUEUED)" if args.delayed else "sleeping (SUSPENDED)"
            print(f"{total} {kind}: {claims():.3f} ms a claim")
    finally:
        teardown_databases(state, verbosity=0)


if __name__ == "__main__":
    main()
