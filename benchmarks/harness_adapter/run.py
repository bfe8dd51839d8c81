"""Run hardbyte/postgresql-job-queue-benchmarking natively, without Docker, beside its adapters.

Runs in a Python 3.12+ venv holding the harness's own dependencies (``psycopg[binary]``, pandas,
numpy, matplotlib, pydantic); see README.md beside this file for the set-up. The harness is
imported from ``--harness`` (a checkout, outside this repository) and driven through its own
``orchestrator.drive``; this file is the thin local shim:

* its PostgreSQL is the machine's (``BENCH_PG_HOST``/``PORT``/``USER``, default
  127.0.0.1:5432 postgres, trust), not a Compose container: ``start_postgres`` and
  ``stop_postgres`` only check that it answers, and the ``postgres-restart`` phase refuses to
  run (restarting a shared server is allowed only where nobody else uses it);
* every system gets a database of its own named ``harness_<system>`` (the harness's ``--fast``
  path drops and recreates it per run);
* the adapters run as native processes: ours (``main.py`` in the repository's ``.venv``) and
  the harness's Procrastinate adapter (its ``main.py`` in a venv with its pinned
  ``procrastinate``); the harness builds Docker images for them otherwise;
* the plots and HTML report are skipped (CPU on a shared machine); the raw samples are kept.

Each cell (a sweep point, a chaos or a pressure scenario) runs every system one after another
in a shuffled order, with ``uptime``'s load average recorded before and after each run; the
harness's ``summary.json``, ``manifest.json`` and ``raw.csv`` (gzipped) of every run are copied
to ``--out`` with ``harness_session.json`` (settings, order, loads, the harness's commit).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# Quick settings: the harness's scenarios (bench_harness/phases.py, scripts/run_full_sweep.sh)
# with shorter phases, and the pool-exhaustion holder scaled to a shared server with
# max_connections = 100 (the harness holds 300 on its own server of 400).
SWEEP_PHASES = ["warmup=warmup:10s", "clean=clean:30s"]
CHAOS = {
    "chaos_crash_recovery": ["warmup=warmup:10s", "baseline=clean:25s", "kill=kill-worker(instance=0):20s",
                             "restart=start-worker(instance=0):20s", "recovery=clean:40s"],
    "chaos_repeated_kills": ["warmup=warmup:10s", "baseline=clean:25s",
                             "repeated=repeated-kill(instance=0,period=15s):45s", "recovery=clean:40s"],
    "chaos_pg_backend_kill": ["warmup=warmup:10s", "baseline=clean:25s", "kills=pg-backend-kill(rate=2):30s",
                              "recovery=clean:40s"],
    "chaos_pool_exhaustion": ["warmup=warmup:10s", "baseline=clean:25s",
                              "exhaustion=pool-exhaustion(idle_conns=40):30s", "recovery=clean:40s"],
}
# chaos_crash_recovery and chaos_repeated_kills run 2 replicas (as the harness's sweep does).
CHAOS_REPLICAS = {"chaos_crash_recovery": 2, "chaos_repeated_kills": 2}
PRESSURE = {
    "idle_in_tx": ["warmup=warmup:10s", "clean_1=clean:20s", "idle_1=idle-in-tx:45s", "recovery_1=clean:40s"],
    "sustained_high_load": ["warmup=warmup:10s", "clean_1=clean:20s", "pressure_1=high-load:45s",
                            "recovery_1=clean:40s"],
    "active_readers": ["warmup=warmup:10s", "clean_1=clean:20s", "readers_1=active-readers:45s",
                       "recovery_1=clean:40s"],
    "event_burst": ["warmup=warmup:10s", "clean_1=clean:20s", "pressure_1=high-load:60s", "recovery_1=clean:50s"],
}


def load_average() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def patch_harness(harness: Path, taskmq_python: str, procrastinate_python: str) -> tuple:
    sys.path.insert(0, str(harness))
    import psycopg
    from bench_harness import adapters as A
    from bench_harness import orchestrator as O

    host = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
    port = os.environ.get("BENCH_PG_PORT", "5432")
    user = os.environ.get("BENCH_PG_USER", "postgres")
    password = os.environ.get("BENCH_PG_PASSWORD", "")

    def pg_url(dbname: str, host_: str = "") -> str:
        return f"postgres://{user}:{password}@{host}:{port}/{dbname}"

    A.pg_url = O.pg_url = pg_url

    def postgres_answers(_image: str = "") -> None:
        with psycopg.connect(pg_url("postgres"), autocommit=True) as conn:
            conn.execute("SELECT 1")

    def refuse_restart(_image: str = "") -> None:
        raise RuntimeError("postgres-restart is not run here: the server is shared (see README.md)")

    O.start_postgres = postgres_answers
    O.stop_postgres = lambda _image="": None
    O._compose_stop_postgres = O._compose_start_postgres = O._restart_postgres = refuse_restart
    O.render_all = lambda *a, **k: None
    O.write_interactive_report = lambda *a, **k: None

    original_load = A.AdapterManifest.load.__func__

    def load(cls, bench_dir: Path):
        manifest = original_load(cls, bench_dir)
        manifest.db_name = "harness_" + manifest.system.replace("-", "_").removeprefix("django_")
        manifest.shutdown_grace_s = max(manifest.shutdown_grace_s, 15.0)  # a loaded 2-core machine
        return manifest

    A.AdapterManifest.load = classmethod(load)

    def native(python: str, script: Path):
        def launch(manifest, overrides):
            return A.LaunchSpec(argv=[python, str(script)], env=A._base_env(manifest, overrides),
                                cwd=str(script.parent))
        return launch

    A.ADAPTERS["django_taskmq"] = A.AdapterEntry(bench_dir=HERE, builder=lambda skip: None,
                                                 launcher=native(taskmq_python, HERE / "main.py"))
    A.ADAPTERS["procrastinate"] = A.AdapterEntry(
        bench_dir=harness / "procrastinate-bench", builder=lambda skip: None,
        launcher=native(procrastinate_python, harness / "procrastinate-bench" / "main.py"))
    return A, O


# What each system's table holds after the run (its adapter stopped): jobs left queued or running,
# failed, dead-lettered. The harness's jobs_lost counts the jobs still in flight at the last sample.
STATE_QUERIES = {
    "django_taskmq": "SELECT state, count(*) FROM django_taskmq_job GROUP BY state",
    "procrastinate": "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status",
}


def db_states(O, system: str) -> dict | None:
    import psycopg

    name = "harness_" + system.replace("-", "_").removeprefix("django_")
    try:
        with psycopg.connect(O.pg_url(name), autocommit=True) as conn:
            return dict(conn.execute(STATE_QUERIES[system]).fetchall())
    except (psycopg.Error, KeyError):
        return None


def run_cell(O, out: Path, cell: str, system: str, phases: list[str], *, mode: str, rate: int, workers: int,
             replicas: int, depth: int, timeout_s: float) -> dict:
    from bench_harness.phases import resolve_scenario

    record = {"cell": cell, "system": system, "phases": phases, "producer_mode": mode, "producer_rate": rate,
              "worker_count": workers, "replicas": replicas, "target_depth": depth,
              "load_before": load_average(), "started_at": datetime.now(timezone.utc).isoformat()}
    t0 = time.monotonic()
    try:
        run_dir = O.drive(
            systems=[system], scenario=None, phases=resolve_scenario(None, phases), pg_image="native",
            fast=True, skip_build=True, sample_every_s=5, producer_rate=rate, producer_mode=mode,
            target_depth=depth, worker_count=workers, high_load_multiplier=1.5, awa_completion_batch_size=None,
            replicas=replicas, cli_args=["benchmarks/harness_adapter/run.py", cell, system])
        record["ok"] = True
    except BaseException as exc:  # the harness raises RuntimeError/SystemExit when a replica dies
        record["ok"] = False
        record["error"] = f"{exc.__class__.__name__}: {exc}"
        runs = sorted(O.RESULTS_ROOT.glob("custom-*"), key=lambda p: p.stat().st_mtime)
        run_dir = runs[-1] if runs else None
    record["wall_s"] = round(time.monotonic() - t0, 1)
    record["db_states_after"] = db_states(O, system)
    record["within_timeout"] = record["wall_s"] <= timeout_s
    record["load_after"] = load_average()
    dest = out / "runs" / f"{cell}-{system}"
    dest.mkdir(parents=True, exist_ok=True)
    if run_dir is not None:
        record["harness_run"] = run_dir.name
        for name in ("summary.json", "manifest.json"):
            if (run_dir / name).exists():
                shutil.copy(run_dir / name, dest / name)
        if (run_dir / "raw.csv").exists():
            with open(run_dir / "raw.csv", "rb") as src, gzip.open(dest / "raw.csv.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
    (dest / "cell.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"[run.py] {cell} {system}: ok={record['ok']} {record['wall_s']} s load {record['load_after']}",
          file=sys.stderr, flush=True)
    return record


def phase_seconds(phases: list[str]) -> float:
    total = 0.0
    for spec in phases:
        duration = spec.rsplit(":", 1)[1]
        total += float(duration[:-1]) * (60 if duration.endswith("m") else 1)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harness", type=Path, default=Path("/work/harness"))
    parser.add_argument("--taskmq-python", default=str(REPO / ".venv" / "bin" / "python"))
    parser.add_argument("--procrastinate-python", default=None,
                        help="default: <harness>/.venvs/procrastinate/bin/python")
    parser.add_argument("--systems", default="django_taskmq,procrastinate")
    parser.add_argument("--parts", default="sweep,chaos,pressure")
    parser.add_argument("--sweep-workers", default="4,16,32")
    parser.add_argument("--chaos-rate", type=int, default=100, help="jobs/s offered in all (split over replicas)")
    parser.add_argument("--batch-max", type=int, default=128,
                        help="PRODUCER_BATCH_MAX for every adapter: the protocol's default bulk size")
    parser.add_argument("--chaos-workers", type=int, default=4)
    parser.add_argument("--pressure-rate", type=int, default=150)
    parser.add_argument("--pressure-workers", type=int, default=16)
    parser.add_argument("--only", default="", help="comma-separated cell names to run (default: all of --parts)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    # The harness forwards PRODUCER_BATCH_MAX only when set; the Procrastinate adapter's own
    # default is 1 (one defer per job), ours is 128: set it for all, as the protocol names it.
    os.environ["PRODUCER_BATCH_MAX"] = str(args.batch_max)
    procrastinate_python = args.procrastinate_python or str(args.harness / ".venvs/procrastinate/bin/python")
    _, O = patch_harness(args.harness, args.taskmq_python, procrastinate_python)
    systems = args.systems.split(",")
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    cells: list[dict] = []
    parts = args.parts.split(",")
    if "sweep" in parts:
        for w in args.sweep_workers.split(","):
            cells.append({"cell": f"sweep_w{w}", "phases": SWEEP_PHASES, "mode": "depth-target", "rate": 50000,
                          "workers": int(w), "replicas": 1, "depth": 4000})
    if "chaos" in parts:
        for name, phases in CHAOS.items():
            # The harness's sweep offers the same total load to 1 and 2 replicas (600, 2 x 300).
            replicas = CHAOS_REPLICAS.get(name, 1)
            cells.append({"cell": name, "phases": phases, "mode": "fixed", "rate": args.chaos_rate // replicas,
                          "workers": args.chaos_workers, "replicas": replicas, "depth": 1000})
    if "pressure" in parts:
        for name, phases in PRESSURE.items():
            rate = int(args.pressure_rate * (1.5 if name == "event_burst" else 1))  # 1200 vs 800 there
            cells.append({"cell": name, "phases": phases, "mode": "fixed", "rate": rate,
                          "workers": args.pressure_workers, "replicas": 1, "depth": 1000})
    if args.only:
        cells = [c for c in cells if c["cell"] in args.only.split(",")]

    args.out.mkdir(parents=True, exist_ok=True)
    session_path = args.out / "harness_session.json"  # not session.json: that names run.py's folders
    session = json.loads(session_path.read_text()) if session_path.exists() else {"invocations": [], "cells": []}
    harness_commit = subprocess.run(["git", "-C", str(args.harness), "rev-parse", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
    ours = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "django_taskmq"], capture_output=True,
                           text=True).stdout.split("\n")
    session["invocations"].append({
        "argv": sys.argv, "seed": seed, "harness_commit": harness_commit, "taskmq_commit": ours,
        "taskmq_uncommitted": [line for line in dirty if line], "started_at": datetime.now(timezone.utc).isoformat(),
        "nproc": os.cpu_count(), "only": args.only, "producer_batch_max": args.batch_max, "quick_settings": {"sweep": SWEEP_PHASES, "chaos": CHAOS, "pressure": PRESSURE}})
    for cell in cells:
        order = systems[:]
        rng.shuffle(order)
        for system in order:
            timeout_s = phase_seconds(cell["phases"]) + 120
            record = run_cell(O, args.out, cell["cell"], system, cell["phases"], mode=cell["mode"],
                              rate=cell["rate"], workers=cell["workers"], replicas=cell["replicas"],
                              depth=cell["depth"], timeout_s=timeout_s)
            session["cells"] = [c for c in session["cells"]
                                if (c["cell"], c["system"]) != (cell["cell"], system)] + [record]
            session_path.write_text(json.dumps(session, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
