#!/usr/bin/env python3
"""Scale with retention running (issue 30): drain and visible latency on PostgreSQL with
10,000,000 old finished jobs in the table that the cluster's own pruning is deleting, against the
same on an empty table, interleaved.

    .venv/bin/python benchmarks/scale_retention.py --fill-only --finished 10000000
    .venv/bin/python benchmarks/scale_retention.py --reuse-fill --finished 10000000 --rounds 3

Two databases of its own, ``bench_scale10m_empty`` and ``bench_scale10m_full`` (dropped with
``--drop``). The full one gets ``--finished`` SUCCEEDED rows: copies of one job enqueued through
the API and marked finished (every column of the current schema copied, as the harness's
``scale`` workload does), with ids older than any real job's and finish times spread evenly over
60 to 10 days before the fill, then ``VACUUM ANALYZE`` and a ``CHECKPOINT``: a table that grew over
time. The fill needs no quiet machine: ``--fill-only`` first, then ``--reuse-fill``.

Both databases run the project's default retention: ``save_limit`` 250 and ``retention`` as
documented (successes 7 days), so every filled row is eligible and the cluster's monitor deletes
old rows (a tenth of its time, as its code does) all through the measurement; the rows it deleted
in each run are read from the pruning chore's counter and recorded, which shows that it ran.

A round runs, on each database in turn (the first alternating between rounds): N jobs queued,
``manage.py qcluster`` (2 workers) exec'd, wall time until no job is pending (polled every 10 ms)
and the rate after the first job finished; then, in the same cluster, one idle second and
``--probe-jobs`` jobs sent one at a time, each 50 ms after the previous one became visible:
enqueue call -> the job's row SUCCEEDED (polled every 0.5 ms). Foreign CPU load around each run
(``hostload.LoadMeter``). Raw results go to ``benchmarks/results/scale-retention-postgresql.json``
(``-<label>`` with ``--label``), rewritten after every run; ``report.py`` renders them (goal: drain
and visible p99 within 10 % of the empty table). A run that fails (another program restarting the
shared server) is recorded and retried once.

``--pruning-off`` adds clusters of the working tree that delete nothing (``save_limit`` 0, every
state's ``retention`` None) on both tables, interleaved as a third code "off": the full table's
cost apart from the deleting's, and the deleting's as the difference.

``--vacuum`` runs ``VACUUM (ANALYZE)`` on the job table before every run (its time is recorded).
Autovacuum is off on this machine's shared server, so without it every run's table carries the dead
rows of all the runs before (the deleted jobs of earlier drains and the pruned rows), and its
statistics may date from the middle of a drain (a planner told that 20,000 jobs are queued scans
the whole table to find none); where autovacuum runs, as by default, it would have cleaned them.

``--ref COMMIT`` runs that commit's ``django_taskmq`` (exported with ``git archive`` under
``benchmarks/.work/``) in a cluster of its own beside every run of the working tree, interleaved:
before and after a change in the same session. Only the clusters run it; the driver (enqueues,
probes) runs the working tree.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
LOGS = Path(__file__).resolve().parent / ".work" / "scale-retention-logs"  # the clusters' output, last run each
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from hostload import LoadMeter  # noqa: E402

TASK = "tests.tasks.noop"
# The project's defaults for pruning (tests.settings_* keep every success: save_limit 0).
OVERRIDES = {"workers": 2, "save_limit": 250}
NAMES = {"empty": "bench_scale10m_empty", "full": "bench_scale10m_full"}


#: The code each cluster runs: "worktree" (the tree on disk), "off" (the same with pruning off, see
#: ``--pruning-off``), or "ref" (``--ref``'s django_taskmq, exported with ``git archive`` and put first
#: on the cluster's PYTHONPATH).
CODE = {"worktree": str(ROOT)}
#: ``--pruning-off``: nothing is deleted, whatever its age or number.
PRUNING_OFF = {"save_limit": 0, "retention": {state: None for state in
                                              ("succeeded", "failed", "dead", "expired", "cancelled")}}


def env_for(which: str, code: str = "worktree") -> dict[str, str]:
    path = CODE[code] if code in ("worktree", "off") else f"{CODE[code]}{os.pathsep}{ROOT}"
    overrides = {**OVERRIDES, **PRUNING_OFF} if code == "off" else OVERRIDES
    return {**os.environ, "TASKMQ_OVERRIDES": json.dumps(overrides), "PYTHONPATH": path,
            "DJANGO_SETTINGS_MODULE": "tests.settings_postgresql", "TASKMQ_DB_NAME": NAMES[which]}


def psql(sql: str) -> None:
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-c", sql], check=True)


def create(which: str) -> None:
    psql(f"DROP DATABASE IF EXISTS {NAMES[which]} WITH (FORCE)")
    psql(f"CREATE DATABASE {NAMES[which]}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env_for(which), check=True)


def setup_django(which: str) -> None:
    from django.conf import settings
    from django.db import connections

    os.environ.update(env_for(which))
    if not settings.configured:
        import django

        django.setup()
    else:  # the second database: same settings module, another name
        connections.close_all()
        settings.DATABASES["default"]["NAME"] = NAMES[which]
        connections["default"].settings_dict["NAME"] = NAMES[which]


def fill(count: int) -> None:
    """Add ``count`` old SUCCEEDED rows to the full database with one INSERT ... SELECT."""
    setup_django("full")
    from django.db import connection
    from django_taskmq import async_task
    from django_taskmq.models import Job

    template = async_task(TASK)
    table = Job._meta.db_table
    Job.objects.filter(pk=template).update(state="SUCCEEDED", attempt=1, deliveries=1)
    with connection.cursor() as cursor:
        columns = [c.name for c in connection.introspection.get_table_description(cursor, table)]
    # Ids of jobs made in 1970 (14 hex digits of microseconds, then 10 of randomness): older than any
    # real one. Finish times spread from 60 to 10 days before now, as in a table that grew over time
    # (all of it older than the 7 days successes are kept).
    at = f"now() - interval '60 days' + make_interval(secs => n.i * {50 * 86400 / count!r})"
    values = {"id": "lpad(to_hex(n.i), 14, '0') || '0000000000'", "enqueued_at": at, "visible_at": "j.visible_at",
              "started_at": at, "first_started_at": at, "finished_at": at}
    select = ", ".join(values.get(c, f'j."{c}"') for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({', '.join(chr(34) + c + chr(34) for c in columns)}) SELECT {select} "
                       f"FROM {table} AS j CROSS JOIN generate_series(1, {int(count)}) AS n(i) WHERE j.id = %s",
                       [template])
        cursor.execute(f"DELETE FROM {table} WHERE id = %s", [template])
        cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute("CHECKPOINT")
    connection.close()


def chore_deleted() -> int:
    from django_taskmq.models import Chore

    row = Chore.objects.filter(name="prune").first()
    return row.deleted if row else 0


def pending() -> int:
    """Jobs not finished (the state index: the old finished rows are not read)."""
    from django_taskmq.models import Job

    return Job.objects.filter(state__in=["WAITING", "QUEUED", "RUNNING", "RETRYING"]).count()


def export_ref(ref: str) -> str:
    """Export ``ref``'s django_taskmq under benchmarks/.work/; return the directory to put on PYTHONPATH."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    target = ROOT / "benchmarks" / ".work" / f"scale-ref-{sha}"
    if not (target / "django_taskmq").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha, "django_taskmq"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return str(target)


def one_run(which: str, n: int, probe_jobs: int, code: str = "worktree", vacuum: bool = False) -> dict:
    """Drain ``n`` queued jobs with a fresh cluster, then probe the visible latency in it; with
    ``vacuum``, ``VACUUM (ANALYZE)`` the job table first."""
    setup_django(which)
    from django.db import connection
    from django.utils import timezone
    from django_taskmq import async_task, enqueue_many
    from django_taskmq.models import Chore, Job

    # The previous run's jobs go (pruning would take them over minutes): every run starts alike.
    Job.objects.filter(func=TASK, enqueued_at__gte=timezone.now() - timezone.timedelta(days=1)).delete()
    # A stopped cluster keeps the pruning chore until its lease ends (30 s): the next run's cluster
    # would not prune before then. Expired here, so that every run's cluster prunes from its start.
    Chore.objects.filter(name="prune").update(until=0.0)
    vacuum_s = None
    if vacuum:
        started = time.monotonic()
        with connection.cursor() as cursor:  # Django's autocommit: VACUUM runs outside a transaction
            cursor.execute("VACUUM (ANALYZE) django_taskmq_job")
        vacuum_s = round(time.monotonic() - started, 2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_taskmq_job")
        rows_before = cursor.fetchone()[0]
    enqueue_many(TASK, [()] * n)
    deleted_before = chore_deleted()
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / f"{which}-{code}-{n}.log", "w") as log, LoadMeter() as meter:
        t0 = time.monotonic()
        # ``python -m django`` in the code's directory: its django_taskmq comes first on sys.path.
        cluster = subprocess.Popen([sys.executable, "-m", "django", "qcluster"], cwd=CODE[code], env=env_for(which, code),
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            first = None
            while True:
                left = pending()
                now = time.monotonic()
                if first is None and left < n:
                    first, first_left = now, left
                if left == 0:
                    break
                if cluster.poll() is not None:
                    raise RuntimeError(f"cluster exited, see {log.name}")
                if now - t0 > 600:
                    raise RuntimeError(f"not drained after 600 s ({left} left)")
                time.sleep(0.01)
            t_end = time.monotonic()
            time.sleep(1.0)  # settle: the cluster idle, the probe's jobs meet idle workers
            visible = []
            for _ in range(probe_jobs):
                sent = time.perf_counter()
                job = async_task(TASK)
                rows = Job.objects.filter(pk=job, state="SUCCEEDED")
                while not rows.exists():
                    if time.perf_counter() - sent > 30:
                        raise RuntimeError("a probe job was not visible after 30 s")
                    time.sleep(0.0005)
                visible.append((time.perf_counter() - sent) * 1000)
                time.sleep(0.05)
            deleted = chore_deleted() - deleted_before
        finally:
            os.killpg(cluster.pid, signal.SIGTERM)
            cluster.wait(timeout=60)
    ordered = sorted(visible)
    steady = (first_left / (t_end - first)) if first is not None and t_end > first else None
    return {"database": which, "code": code, "n": n, "rows_before": rows_before, "drain_s": round(t_end - t0, 4),
            "jobs_per_s": round(n / (t_end - t0), 2), "steady_jobs_per_s": round(steady, 2) if steady else None,
            "visible_p50_ms": round(statistics.median(ordered), 3),
            "visible_p99_ms": round(ordered[max(0, int(len(ordered) * 0.99) - 1)], 3),
            "visible_ms": [round(v, 3) for v in visible], "pruned_rows": deleted, "load": meter.result,
            "vacuum_s": vacuum_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("-n", default="2000,20000", help="drain sizes, comma-separated")
    parser.add_argument("--probe-jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill-only", action="store_true", help="create and fill the databases, measure nothing")
    parser.add_argument("--reuse-fill", action="store_true", help="keep the databases an earlier --fill-only made")
    parser.add_argument("--drop", action="store_true", help="drop both databases and exit")
    parser.add_argument("--ref", default="", help="also run this commit's django_taskmq in the clusters, "
                        "interleaved with the working tree (before/after a change)")
    parser.add_argument("--pruning-off", action="store_true",
                        help="also run the working tree with pruning off (save_limit 0, retention None), "
                        "interleaved: what the deleting costs, apart from the table's size")
    parser.add_argument("--vacuum", action="store_true",
                        help="VACUUM (ANALYZE) the job table before every run, as autovacuum would have by then "
                        "(it is off on this machine's shared server)")
    parser.add_argument("--label", default="", help="results go to scale-retention-postgresql-<label>.json")
    args = parser.parse_args()
    # Stopped with SIGTERM, the running cluster is stopped too (the finally clauses run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if args.drop:
        for name in NAMES.values():
            psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        return
    fill_seconds = None
    if not args.reuse_fill:
        for which in NAMES:
            create(which)
        started = time.monotonic()
        fill(args.finished)
        fill_seconds = round(time.monotonic() - started, 1)
        print(f"filled {args.finished:,} rows in {fill_seconds} s", flush=True)
    if args.fill_only:
        return
    sizes = [int(s) for s in args.n.split(",")]
    codes = ["worktree"]
    if args.ref:
        CODE["ref"] = export_ref(args.ref)
        codes.append("ref")
    if args.pruning_off:
        CODE["off"] = str(ROOT)
        codes.append("off")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"scale-retention-postgresql{'-' + args.label if args.label else ''}.json"
    result = {
        "engine": "postgresql", "label": args.label, "finished_rows": args.finished, "rounds": args.rounds,
        "sizes": sizes, "probe_jobs": args.probe_jobs, "settings": OVERRIDES, "fill_seconds": fill_seconds,
        "pruning_off": PRUNING_OFF if args.pruning_off else None, "vacuum": args.vacuum,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "dirty": [line for line in subprocess.run(["git", "status", "--porcelain", "django_taskmq"], cwd=ROOT,
                                                  capture_output=True, text=True).stdout.split("\n") if line],
        "ref": args.ref and subprocess.run(["git", "rev-parse", "--short", args.ref], cwd=ROOT,
                                           capture_output=True, text=True).stdout.strip(),
        "command": " ".join(sys.argv), "runs": [], "failed": [],
    }
    for r in range(args.rounds):
        order = [(n, which, code) for n in sizes for which in ("empty", "full") for code in codes]
        if r % 2:  # every other round backwards: what ran first in one round runs last in the next
            order.reverse()
        for n, which, code in order:
            for attempt in (1, 2):  # one retry: another program may restart the shared server
                try:
                    run = one_run(which, n, args.probe_jobs, code, args.vacuum)
                except Exception as exc:  # noqa: BLE001 (recorded, then retried once)
                    result["failed"].append({"round": r + 1, "database": which, "code": code, "n": n,
                                             "attempt": attempt, "error": repr(exc)[-500:]})
                    print(f"failed: {which} {code} {n}: {exc!r}"[:300], flush=True)
                    time.sleep(10)
                    continue
                run["round"] = r + 1
                result["runs"].append(run)
                print(json.dumps({k: v for k, v in run.items() if k != "visible_ms"}), flush=True)
                break
            out.write_text(json.dumps(result) + "\n")  # after every run: an interrupted session keeps its runs
    print(f"raw results: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
