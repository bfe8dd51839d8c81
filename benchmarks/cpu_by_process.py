"""CPU per job of each cluster process: where a drain's CPU goes, and what a change saved there.

    .venv/bin/python benchmarks/cpu_by_process.py [-n 20000] [--runs 3] [--engine sqlite]
    .venv/bin/python benchmarks/cpu_by_process.py --ref 3a68e1e --label before-after   # interleaved A/B
    .venv/bin/python benchmarks/cpu_by_process.py --arg-bytes 10000                     # jobs with a 10 kB argument
    .venv/bin/python benchmarks/cpu_by_process.py --report benchmarks/results/cpu-by-process-<label>.json

Per run: N no-op jobs queued with ``enqueue_many`` in the benchmark project
(``projects/taskmq_project``, its settings but ``save_limit`` 0 and, unless ``--recycle``, no worker
recycling, so that every worker lives the whole run and its CPU is all seen),
then ``manage.py qcluster --burst`` from exec to exit. The whole cluster's CPU is exact (the
``RUSAGE_CHILDREN`` of qcluster, whose sentinel waits for every child); the split by process is
read from ``/proc/<pid>/stat`` every 10 ms, children named by their order of birth (the sentinel
forks the monitor, the pusher, then the workers; the sentinel's figure holds the start-up of
Python and Django, which its children inherit), so a process's last 10 ms may be missed
("unseen" is the difference). With ``--ref COMMIT`` each round also runs that commit's
``django_taskmq`` (exported with ``git archive`` to ``.work/tree-<sha>/``, first on ``PYTHONPATH``),
interleaved with the working tree. Raw rows: ``benchmarks/results/cpu-by-process-<label>.json``.
A development tool, like ``trace.py``: the harness (``run.py``) makes the figures of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECT = HERE / "projects" / "taskmq_project"
TICK = os.sysconf("SC_CLK_TCK")
ROLES = ("monitor", "pusher")  # the sentinel's first children, in order; then the workers

SETTINGS = """
from taskmq_project.settings import *  # noqa: F401,F403
TASKMQ = dict(TASKMQ, save_limit=0{recycle})
"""

PREPARE = """
import sys
import django
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
if connection.vendor == "sqlite":
    connection.cursor().execute("PRAGMA journal_mode=WAL")
else:
    from django_taskmq.models import Job
    Job.objects.all().delete()
from django_taskmq.api import enqueue_many
size = int(sys.argv[2]) if len(sys.argv) > 2 else 0  # an argument of that many bytes (noop ignores it)
enqueue_many("benchtasks.noop", [{"kwargs": {"tag": "x" * size}} if size else () for _ in range(int(sys.argv[1]))])
"""


def export(ref: str) -> Path:
    """The tree of commit ``ref`` in ``.work/tree-<sha>/`` (made once)."""
    sha = subprocess.run(["git", "rev-parse", "--short=12", ref], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    target = HERE / ".work" / f"tree-{sha}"
    if not (target / "django_taskmq").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha, "django_taskmq"], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(target / "django_taskmq")], check=True)
    return target


def interleaved(ref: str | None, runs: int) -> Iterator[tuple[int, str, Path | None]]:
    """(round, code, tree to put first on PYTHONPATH) of every run: the working tree (tree None)
    and, with ``ref``, that commit's exported tree, the first of the two alternating by round."""
    codes: list[tuple[str, Path | None]] = [("worktree", None)]
    if ref:
        codes.append((ref, export(ref)))
    for round_ in range(1, runs + 1):
        for code, tree in (codes if round_ % 2 else codes[::-1]):
            yield round_, code, tree


def write_results(name: str, rows: list[dict]) -> Path:
    """Write ``rows`` to ``results/<name>.json`` with the command, the date and the working tree's
    commit (and whether ``django_taskmq/`` had uncommitted edits); return the path."""
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "django_taskmq"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip())
    out = HERE / "results" / f"{name}.json"
    out.write_text(json.dumps({"command": " ".join(sys.argv), "worktree_head": head, "worktree_dirty": dirty,
                               "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, indent=1) + "\n")
    return out


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _descendants(root: int) -> dict[int, float]:
    """CPU seconds of ``root``'s descendants alive now, by pid."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p))) is not None}
    tree, found = {root}, True
    while found:
        found = False
        for pid, (ppid, _) in stats.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                found = True
    return {pid: stats[pid][1] for pid in tree if pid in stats}


def run_once(tree: Path | None, n: int, engine: str, settings_dir: str, arg_bytes: int = 0) -> dict:
    env = dict(os.environ, BENCH_ENGINE=engine, DJANGO_SETTINGS_MODULE="cpu_settings")
    env["PYTHONPATH"] = os.pathsep.join(([str(tree)] if tree else []) + [str(PROJECT), str(HERE), settings_dir])
    with tempfile.TemporaryDirectory() as work:
        env["BENCH_SQLITE_PATH"] = os.path.join(work, "db.sqlite3")
        env.setdefault("BENCH_PG_NAME", "bench_cpu_by_process")
        if engine == "postgresql":
            _create_pg_database(env["BENCH_PG_NAME"])
        subprocess.run([sys.executable, "-c", PREPARE, str(n), str(arg_bytes)], env=env, check=True)
        before = _children_cpu()
        started = time.perf_counter()
        cluster = subprocess.Popen([sys.executable, str(PROJECT / "manage.py"), "qcluster", "--burst"], env=env,
                                   stderr=subprocess.DEVNULL)
        seen: dict[int, float] = {}
        while cluster.poll() is None:
            seen.update(_descendants(cluster.pid))
            time.sleep(0.01)
        wall = time.perf_counter() - started
    total = _children_cpu() - before  # qcluster was reaped by poll(): its tree's CPU is counted
    order = sorted(seen)
    names = {order[0]: "sentinel"} if order else {}
    for i, pid in enumerate(order[1:]):
        names[pid] = ROLES[i] if i < len(ROLES) else "worker"
    per_role: dict[str, float] = {}
    for pid, cpu in seen.items():
        per_role[names[pid]] = per_role.get(names[pid], 0.0) + cpu
    us = {role: 1e6 * cpu / n for role, cpu in per_role.items()}
    us["unseen"] = 1e6 * (total - sum(per_role.values())) / n
    return {"n": n, "engine": engine, "arg_bytes": arg_bytes, "wall_s": wall, "jobs_per_s": n / wall, "cpu_s": total,
            "cpu_us_per_job": 1e6 * total / n, "us_per_job_by_process": us, "processes": len(seen)}


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _create_pg_database(name: str) -> None:
    import psycopg
    from benchdb import pg_params

    with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def report(rows: list[dict]) -> None:
    """Median (min-max) per code and process, microseconds of CPU per job."""
    for code in dict.fromkeys(r["code"] for r in rows):
        mine = [r for r in rows if r["code"] == code]
        print(f"{code} ({len(mine)} runs, {mine[0]['engine']}, N={mine[0]['n']}, "
              f"argument {mine[0].get('arg_bytes', 0)} bytes):")

        def cell(values: list[float]) -> str:
            return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"

        print(f"  jobs/s incl. start-up {cell([r['jobs_per_s'] for r in mine])}; "
              f"cluster CPU us/job {cell([r['cpu_us_per_job'] for r in mine])}")
        roles = dict.fromkeys(k for r in mine for k in r["us_per_job_by_process"])
        for role in roles:
            print(f"  {role:9s} {cell([r['us_per_job_by_process'].get(role, 0.0) for r in mine])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", default="sqlite", choices=("sqlite", "postgresql"))
    parser.add_argument("--ref", help="also run this commit's django_taskmq, interleaved")
    parser.add_argument("--arg-bytes", type=int, default=0,
                        help="give each job an argument of this many bytes (the no-op task ignores it)")
    parser.add_argument("--recycle", action="store_true", help="keep TASKMQ['recycle'] (workers die every 500 jobs)")
    parser.add_argument("--label", default="latest")
    parser.add_argument("--report", help="print the table of a results file and exit")
    args = parser.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text())["rows"])
        return
    sys.path[:0] = [str(HERE)]
    settings_dir = tempfile.mkdtemp()
    Path(settings_dir, "cpu_settings.py").write_text(SETTINGS.format(recycle="" if args.recycle else ", recycle=10**9"))
    rows = []
    for round_, code, tree in interleaved(args.ref, args.runs):
        row = dict(run_once(tree, args.n, args.engine, settings_dir, args.arg_bytes), code=code, round=round_)
        rows.append(row)
        print(f"round {round_} {code}: {row['jobs_per_s']:.0f} jobs/s, {row['cpu_us_per_job']:.0f} us/job "
              + " ".join(f"{k}:{v:.0f}" for k, v in row["us_per_job_by_process"].items()), flush=True)
    print(f"raw rows: {write_results(f'cpu-by-process-{args.label}', rows)}")
    report(rows)


if __name__ == "__main__":
    main()
