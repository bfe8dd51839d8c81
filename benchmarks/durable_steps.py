"""The cost of a durable step: a task of N steps against a plain task, through the cluster's own
reserve, execute and record functions in one process (no cluster, so only the database's work).

    .venv/bin/python benchmarks/durable_steps.py [--engine sqlite|postgresql|mysql] [--jobs 300] [--steps 0,1,5]

On a fresh database ``bench_durable_steps`` of the test settings (``tests.settings_<engine>``):
``--jobs`` jobs of ``tests.tasks.noop`` (the baseline), then of a durable task with each number of
``--steps`` (``tests.cluster.tasks_durable.many_steps``: each step returns a small number), are queued,
then each job is reserved, executed and recorded one after another, as a worker and the monitor do
it, and timed. A second run of every durable job (its steps read back, none run) is timed too: the
cost of a resume. Prints milliseconds per job (median of per-job times) and per step.
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
    parser.add_argument("--engine", default="sqlite", choices=["sqlite", "postgresql", "mysql"])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--steps", default="0,1,5")
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = f"tests.settings_{args.engine}"
    os.environ.setdefault("TASKMQ_DB_NAME", "/tmp/bench_durable_steps.sqlite3" if args.engine == "sqlite"
                          else "bench_durable_steps")
    import django
    from django.test.utils import setup_databases, teardown_databases

    django.setup()
    from django_taskmq import async_task
    from django_taskmq.runtime import execution, recorder
    from django_taskmq.brokers import get_broker
    from django_taskmq.conf import get_settings
    from django_taskmq.models import Job

    state = setup_databases(verbosity=0, interactive=False)
    broker, settings = get_broker(), get_settings()

    def run(job_id: str) -> float:
        began = time.perf_counter()
        reservation = broker.reserve_job(job_id, 60, owner="bench")
        outcome = execution.seal(execution.execute(execution.unpack(reservation, settings.name)), settings)
        recorder.record([outcome], broker, settings, outside_transaction=True, bookkeeping=True)
        return time.perf_counter() - began

    try:
        plain = [run(async_task("tests.tasks.noop")) for _ in range(args.jobs)]
        base = statistics.median(plain) * 1000
        print(f"{args.engine}: plain task {base:.3f} ms a job ({args.jobs} jobs)")
        for steps in (int(s) for s in args.steps.split(",")):
            ids = [async_task("tests.cluster.tasks_durable.many_steps", steps) for _ in range(args.jobs)]
            first = statistics.median(run(j) for j in ids) * 1000
            # A resume: the same jobs again from QUEUED, their steps stored (read back, none run).
            Job.objects.filter(pk__in=ids).update(state="QUEUED", visible_at=0)
            again = statistics.median(run(j) for j in ids) * 1000
            ended = set(Job.objects.filter(pk__in=ids).values_list("state", "deliveries").distinct())
            assert ended == {("SUCCEEDED", 2)}, ended  # both runs of every job were recorded
            per = f", {(first - base) / steps:.3f} ms a step stored, {(again - base) / steps:.3f} ms a step read back" \
                if steps else ""
            print(f"{args.engine}: durable, {steps} step(s): {first:.3f} ms a job, {again:.3f} ms resumed{per}")
    finally:
        teardown_databases(state, verbosity=0)


if __name__ == "__main__":
    main()
