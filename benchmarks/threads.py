"""Threads per worker (issue 14): I/O-bound tasks, the no-op drain, and the cluster's memory, with
``qcluster --burst -w 2 --threads 1`` against ``--threads 16`` (same run, interleaved).

* ``sleep``: N tasks that each ``time.sleep(0.1)`` (``tests.cluster.tasks_cluster.slow``), the
  stand-in for a call to a mail server or an HTTP API;
* ``noop``: N no-op tasks (``tests.tasks.noop``): what threads cost on the hot path.

Per run: wall time of ``qcluster --burst`` from exec to exit (start-up included), jobs/s, the CPU
seconds of the whole cluster (every process, from ``RUSAGE_CHILDREN``), and the peak RSS and PSS of
the cluster's process tree (sampled every 50 ms from /proc). Uses the repository's ``.venv`` and the
test settings on a fresh database per run. Raw results: ``benchmarks/results/threads.json``.

In the same run, interleaved, the peers with threads in their worker processes, on the Redis at
127.0.0.1:6379 (databases 12 and 13, flushed per run), each with 2 worker processes of 1 and 16
threads: Celery's ``threads`` pool (two ``celery worker --pool threads -c T``) and Dramatiq
(``dramatiq --processes 2 --threads T``), installed in ``benchmarks/.work/venv-io-peers`` (made on
first use). Their jobs/s is measured from the workers' exec to the last task's end (each task
appends its finish time to a Redis list), so it includes their start-up as ours does; what follows
the last task (their shutdown, our burst's stop procedure) is in ours only.

    .venv/bin/python benchmarks/threads.py [--runs 3] [--engines sqlite,postgresql] [--no-peers]
    .venv/bin/python benchmarks/threads.py --report benchmarks/results/threads.json
"""

from __future__ import annotations

import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flow import MEASURE, ROOT, database, saved_rows, script_arguments  # noqa: E402  (the same fresh databases and measurement)

PY = sys.executable

ENQUEUE = """
import django, sys
django.setup()
from django_taskmq import enqueue_many
n, workload = int(sys.argv[1]), sys.argv[2]
if workload == "sleep":
    enqueue_many("tests.cluster.tasks_cluster.slow", [(f"s{i}", 0.1) for i in range(n)])
else:
    enqueue_many("tests.tasks.noop", [(i,) for i in range(n)])
"""

SIZES = {"sleep": 1000, "noop": 2000}
THREADS = (1, 16)
PEERS_DIR = ROOT / "benchmarks" / "io_peers"
PEERS_VENV = ROOT / "benchmarks" / ".work" / "venv-io-peers"
PEERS = ("celery-threads", "dramatiq")

PEER_ENQUEUE = """
import sys
import redis
n, seconds, peer = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
redis.Redis(db=12).flushdb()
redis.Redis(db=13).flushdb()
if peer == "dramatiq":
    from dramatiq_io import work
    for _ in range(n):
        work.send(seconds)
else:
    from celery_io import work
    for _ in range(n):
        work.delay(seconds)
"""


def tree(root: int) -> list[int]:
    """``root`` and its live descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def memory(pids: list[int]) -> tuple[int, int]:
    """Summed (RSS, PSS) in KiB of ``pids`` (smaps_rollup)."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    return rss, pss


class Sampler:
    """Peak summed RSS and PSS of the process trees of ``roots``, every 50 ms, until stopped."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.peak = [0, 0]
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.05):
            rss, pss = memory([pid for root in self.roots for pid in tree(root)])
            self.peak = [max(self.peak[0], rss), max(self.peak[1], pss)]

    def stop(self) -> tuple[float, float]:
        """Stop sampling; return the peaks (RSS, PSS) in MiB."""
        self.done.set()
        self.thread.join()
        return round(self.peak[0] / 1024, 1), round(self.peak[1] / 1024, 1)


PEER_WAIT = """
import json, sys, time
import redis
n, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
done = redis.Redis(db=13)
while done.llen("io-done") < n and time.monotonic() < deadline:
    time.sleep(0.02)
print(json.dumps([float(t) for t in done.lrange("io-done", 0, -1)]))
"""


def peers_python() -> str:
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "celery[redis]", "dramatiq[redis]", "redis"],
                       check=True)
    return str(python)


def run_peer(peer: str, workload: str, threads: int, n: int) -> dict:
    """One run of a peer: enqueue ``n`` tasks on Redis, start 2 worker processes of ``threads``
    threads, wait for the last task to end, stop the workers."""
    python = peers_python()
    bin_dir = Path(python).parent
    env = dict(os.environ, PYTHONPATH=str(PEERS_DIR))
    seconds = 0.1 if workload == "sleep" else 0.0
    subprocess.run([python, "-c", PEER_ENQUEUE, str(n), str(seconds), peer], cwd=PEERS_DIR, env=env, check=True)
    if peer == "dramatiq":
        argvs = [[str(bin_dir / "dramatiq"), "dramatiq_io", "--processes", "2", "--threads", str(threads),
                  "--queues", "io"]]
    else:
        argvs = [[str(bin_dir / "celery"), "-A", "celery_io", "worker", "--pool", "threads", "-c", str(threads),
                  "-n", f"w{i}@%h", "--loglevel", "WARNING"] for i in range(2)]
    started = time.time()
    procs = [subprocess.Popen(argv, cwd=PEERS_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True) for argv in argvs]
    sampler = Sampler([p.pid for p in procs])
    # The waiter is reaped before the workers: its CPU is what RUSAGE_CHILDREN gains until then.
    times = json.loads(subprocess.run([python, "-c", PEER_WAIT, str(n), "600"], env=env, check=True,
                                      capture_output=True, text=True).stdout)
    waiter = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss, pss = sampler.stop()
    finished = len(times)
    last = max(times, default=started)
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert finished == n, f"{peer}: {finished} of {n} tasks finished"
    cpu = (after.ru_utime - waiter.ru_utime) + (after.ru_stime - waiter.ru_stime)
    return {"engine": "redis", "system": peer, "workload": workload, "threads": threads, "n": n,
            "wall_s": round(last - started, 3), "jobs_per_s": round(n / (last - started), 1),
            "steady_jobs_per_s": None, "cpu_s": round(cpu, 3), "cpu_s_per_1000": round(cpu * 1000 / n, 3),
            "peak_rss_mib": rss, "peak_pss_mib": pss}


def run_once(engine: str, workload: str, threads: int, n: int, overrides: dict | None = None) -> dict:
    """One ``qcluster --burst -w 2 --threads <threads>`` drain of ``n`` jobs; ``overrides``: TASKMQ keys."""
    extra, drop = database(engine)
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    env.pop("TASKMQ_OVERRIDES", None)
    if overrides:
        env["TASKMQ_OVERRIDES"] = json.dumps(overrides)
    env.pop("TASKMQ_RUN_LOG", None)
    try:
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([PY, "-c", ENQUEUE, str(n), workload], cwd=ROOT, env=env, check=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        proc = subprocess.Popen([PY, "manage.py", "qcluster", "--burst", "-w", "2", "--threads", str(threads)],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sampler = Sampler([proc.pid])
        code = proc.wait()
        wall = time.time() - started
        rss, pss = sampler.stop()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert code == 0, f"qcluster --burst exited {code}"
        got = json.loads(subprocess.run([PY, "-c", MEASURE], cwd=ROOT, env=env, check=True, capture_output=True,
                                        text=True).stdout)
    finally:
        drop()
    assert got["states"] == ["SUCCEEDED"] and got["deliveries"] == [1] and got["n"] == n, got
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    span = got["last_end"] - got["first_start"]
    return {"engine": engine, "system": "taskmq", "workload": workload, "threads": threads, "n": n,
            "wall_s": round(wall, 3),
            "jobs_per_s": round(n / wall, 1), "steady_jobs_per_s": round(n / span, 1) if span else None,
            "cpu_s": round(cpu, 3), "cpu_s_per_1000": round(cpu * 1000 / n, 3),
            "peak_rss_mib": rss, "peak_pss_mib": pss}


def cell(rows: list[dict], field: str, **where) -> str:
    values = [r[field] for r in rows if all(r.get(k) == v for k, v in where.items()) and r[field] is not None]
    if not values:
        return "n/a"
    return f"{statistics.median(values):g} ({min(values):g}-{max(values):g})"


def report(rows: list[dict]) -> None:
    """Print the markdown tables of ARCHIVE.md from raw rows: median (min-max) per cell."""
    print("| system | broker | workload | threads | drain incl. start-up (jobs/s) | steady (jobs/s) | "
          "cluster CPU s / 1000 jobs | peak RSS (MiB) | peak PSS (MiB) |\n|---|---|---|---|---|---|---|---|---|")
    pairs = sorted({(r.get("system", "taskmq"), r["engine"]) for r in rows}, key=lambda p: (p[0] != "taskmq", p))
    for workload in SIZES:
        for system, engine in pairs:
            for threads in THREADS:
                where = dict(system=system, engine=engine, workload=workload, threads=threads)
                n = next((r["n"] for r in rows if all(r.get(k) == v for k, v in where.items())), None)
                if n is None:
                    continue
                print(f"| {system} | {engine} | {workload} x {n} | {threads} | {cell(rows, 'jobs_per_s', **where)} | "
                      f"{cell(rows, 'steady_jobs_per_s', **where)} | {cell(rows, 'cpu_s_per_1000', **where)} | "
                      f"{cell(rows, 'peak_rss_mib', **where)} | {cell(rows, 'peak_pss_mib', **where)} |")


def main() -> None:
    parser = script_arguments()
    parser.add_argument("--no-peers", action="store_true", help="django_taskmq only")
    parser.add_argument("--quick", action="store_true", help="a tenth of the jobs, one run, results not saved")
    args = parser.parse_args()
    if args.report:
        report(saved_rows(args.report))
        return
    rows = []
    for _ in range(1 if args.quick else args.runs):
        for engine in args.engines.split(","):
            for workload, n in SIZES.items():
                for threads in THREADS:
                    rows.append(run_once(engine, workload, threads, n // 10 if args.quick else n))
                    print(json.dumps(rows[-1]), flush=True)
        for peer in () if args.no_peers else PEERS:
            for workload, n in SIZES.items():
                for threads in THREADS:
                    rows.append(run_peer(peer, workload, threads, n // 10 if args.quick else n))
                    print(json.dumps(rows[-1]), flush=True)
    if not args.quick:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        out = ROOT / "benchmarks" / "results" / "threads.json"
        out.write_text(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(), "runs": args.runs,
                                   "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   "rows": rows}, indent=1))
    report(rows)


if __name__ == "__main__":
    main()
