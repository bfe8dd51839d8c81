#!/usr/bin/env python3
"""Benchmark django_taskmq against django-q2, django-tasks-db and Celery on one machine.

    python3 benchmarks/run.py                      # the full mode: both engines, 3 runs
    python3 benchmarks/run.py --quick              # all systems, tiny sizes, 1 run (< 2 min)
    python3 benchmarks/run.py --engines sqlite --systems taskmq,djangoq2 --workloads drain,latency
    python3 benchmarks/run.py --baseline HEAD~5 --systems taskmq,taskmq-base   # before/after

Needs only python3 (stdlib): it builds its own venvs under benchmarks/.work/, runs each
workload in a subprocess of the system's venv (``workloads.py``) in an order shuffled per
round (seeded), records the foreign CPU load of every run, and writes one JSON file per run
into the results folder (``benchmarks/results/<date>-<commit>/`` in the full mode), the plots
beside them and, in the full mode, regenerates ``benchmarks/RESULTS.md`` and ``ARCHIVE.md`` (``report.py``).
See README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import signal
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import durable_redis  # noqa: E402
import report  # noqa: E402
import venvs  # noqa: E402
from cluster import trim_log  # noqa: E402
from hostload import LoadMeter  # noqa: E402
from systems import (  # noqa: E402
    BASELINE_MARKER, BASELINE_VENV, BENCH_DIR, DEFAULT_SYSTEMS, DEFAULT_WORKLOADS, ENGINES, REPO_ROOT,
    RESULTS_DIR, SYSTEMS, VENVS, WORK_DIR, WORKLOADS, baseline_tree, baseline_venv, not_applicable,
)

RESULT_PREFIX = "BENCH-RESULT "

# Sizes of a full run and of --quick; an explicit option beats both.
FULL = {"runs": 3, "n": 2000, "large_n": 20000, "bulk_n": 10000, "mixed_n": 10000, "rss_n": 100000,
        "latency_jobs": 200, "latency_gap_ms": 50.0, "latency_max_seconds": 12.0,
        "startup_repeats": 3, "scale_rows": 1_000_000, "scale_probe_jobs": 100,
        "idle_seconds": 30.0, "settle": 1.0,
        # The slow peers drain a few dozen to a few hundred jobs/s here: 20000 jobs would take
        # minutes per run and engine. `--large-skip ""` runs them too.
        "large_skip": "djangoq2,djangoq2-tuned,dtdb",
        "large_skip_reason": "at their drain rates (see the N=2000 rows) 20000 jobs take minutes per run and "
                             "engine, which does not fit the full mode's time budget (about 55 minutes for 3 "
                             "rounds on the three engines); `--large-skip ''` runs them too"}
QUICK = {"runs": 1, "n": 50, "large_n": 150, "bulk_n": 500, "mixed_n": 1000, "rss_n": 3000,
         "latency_jobs": 10, "latency_gap_ms": 50.0, "latency_max_seconds": 1.5,
         "startup_repeats": 1, "scale_rows": 0, "scale_probe_jobs": 0,
         "idle_seconds": 5.0, "settle": 0.2, "large_skip": "", "large_skip_reason": ""}
# The workloads of --quick: drain_large and scale (1M rows) are the full mode's only (drain_large
# runs the same code as drain; add it with --workloads to see two points per line in the plot).
QUICK_WORKLOADS = tuple(w for w in DEFAULT_WORKLOADS if w not in ("drain_large", "scale"))


def csv(choices):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if items == ["all"]:
            return list(choices)
        unknown = [i for i in items if i not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(choices)}")
        return items
    return parse


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engines", type=csv(ENGINES), default=list(ENGINES))
    p.add_argument("--systems", type=csv(tuple(SYSTEMS)),
                   help=f"default: {','.join(DEFAULT_SYSTEMS)} (and {BASELINE_VENV} with --baseline)")
    p.add_argument("--baseline", metavar="REF",
                   help=f"git ref of an earlier django_taskmq to run as system {BASELINE_VENV} "
                        "(exported under .work/, own venv and databases)")
    p.add_argument("--workloads", type=csv(WORKLOADS),
                   help=f"default: {','.join(DEFAULT_WORKLOADS)} (--quick: without drain_large and scale); "
                        f"also mixed, idle_cpu, rss")
    p.add_argument("--quick", action="store_true", help="tiny sizes, 1 run: a smoke test (< 2 min)")
    p.add_argument("--runs", type=int)
    p.add_argument("-n", type=int, help="jobs for enqueue, drain and scale (default 2000)")
    p.add_argument("--large-n", type=int, help="jobs for drain_large (default 20000)")
    p.add_argument("--large-skip", help="systems not run in drain_large (comma-separated), e.g. the "
                                        "slowest, with --large-skip-reason saying why")
    p.add_argument("--large-skip-reason")
    p.add_argument("--latency-max-seconds", type=float,
                   help="stop sending latency jobs after this long (default 20)")
    p.add_argument("--startup-repeats", type=int, help="cluster starts per startup/burst run (default 3)")
    p.add_argument("--scale-rows", type=int, help="finished rows for scale (default 1000000)")
    p.add_argument("--scale-probe-jobs", type=int, help="latency jobs after the scale drain (default 100)")
    p.add_argument("--taskmq-ref", metavar="REF",
                   help="run system taskmq from commit REF, exported like --baseline into its own venv "
                        "(venv-taskmq-ref), instead of the working tree; 'worktree' for the working tree. "
                        "Default: HEAD in the full mode (the results name the commit they measured, and "
                        "edits to django_taskmq/ during the run change nothing), the working tree with --quick")
    p.add_argument("--seed", type=int, help="seed of the run order (default: from the clock; recorded)")
    p.add_argument("--out", type=Path, help="results folder (default: benchmarks/results/<date>-<commit>/ "
                                           "in the full mode, .work/results/... with --quick)")
    p.add_argument("--no-results-md", action="store_true",
                   help="do not regenerate benchmarks/RESULTS.md and ARCHIVE.md (the full mode does by default)")
    p.add_argument("--bulk-n", type=int, help="jobs for bulk enqueue (default 10000)")
    p.add_argument("--mixed-n", type=int, help="jobs in the mixed workload (default 10000)")
    p.add_argument("--rss-n", type=int, help="jobs drained before measuring RSS (default 100000)")
    p.add_argument("--latency-jobs", type=int, help="single jobs in the latency workload (default 50)")
    p.add_argument("--latency-gap-ms", type=float)
    p.add_argument("--idle-seconds", type=float, help="idle CPU window (default 30)")
    p.add_argument("--settle", type=float, help="seconds of idleness before idle measurements")
    p.add_argument("--python", default=sys.executable, help="interpreter for the venvs")
    p.add_argument("--reinstall", action="store_true", help="re-run pip --upgrade in the venvs")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed workload")
    p.add_argument("--retries", type=int, default=1,
                   help="re-run a failed workload this many times (default 1; 0 to debug)")
    args = p.parse_args(argv)
    if args.systems is None:
        args.systems = list(DEFAULT_SYSTEMS)
    elif not args.baseline and args.systems == list(SYSTEMS):  # "all" without a baseline
        args.systems = [s for s in args.systems if s != BASELINE_VENV]
    if args.baseline and BASELINE_VENV not in args.systems:
        at = args.systems.index("taskmq") + 1 if "taskmq" in args.systems else len(args.systems)
        args.systems.insert(at, BASELINE_VENV)
    if BASELINE_VENV in args.systems and not args.baseline:
        p.error(f"system {BASELINE_VENV} needs --baseline <git ref>")
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.workloads is None:
        args.workloads = list(QUICK_WORKLOADS if args.quick else DEFAULT_WORKLOADS)
    if args.taskmq_ref is None and not args.quick and not args.baseline:
        args.taskmq_ref = "HEAD"
    if args.taskmq_ref == "worktree":
        args.taskmq_ref = None
    if args.seed is None:
        args.seed = int(time.time() * 1000) % 1_000_000
    return args


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
        memory = f"{mem_kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration):
        memory = "unknown"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": memory,
            "os": platform.platform(), "host python": platform.python_version()}


def git(*argv: str) -> str:
    """Run a read-only git command in the repository; never takes the index lock."""
    result = subprocess.run(["git", "--no-optional-locks", "-C", str(REPO_ROOT), *argv],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(argv)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    return result.stdout.rstrip("\n")


def export_baseline(ref: str, log) -> dict:
    """Export commit ``ref`` to ``.work/baseline-<short sha>/`` (reused if already there).

    ``git archive``, not a worktree: it only reads the object store, so the repository's
    working tree, index and worktree list stay untouched, and deleting ``.work/`` leaves
    nothing behind. The tree is extracted next to its final place and renamed into it, so
    an interrupted export is never mistaken for a complete one.
    """
    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except RuntimeError:
        raise RuntimeError(f"{ref!r} is not a commit of {REPO_ROOT}") from None
    short = git("rev-parse", "--short", sha)
    tree = baseline_tree(short)
    info = {"ref": ref, "sha": sha, "tree": str(tree),
            "subject": git("log", "-1", "--format=%s", sha)}
    marker = tree / BASELINE_MARKER
    if marker.exists() and marker.read_text().strip() == sha:
        return info
    log(f"exporting {ref} ({short}) to {tree}")
    partial = tree.with_name(f"{tree.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", sha],
                               stdout=subprocess.PIPE)
    with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(partial, filter="data")
        else:
            tar.extractall(partial)
    if archive.wait() != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(f"git archive {sha} failed ({archive.returncode})")
    (partial / BASELINE_MARKER).write_text(sha + "\n")
    shutil.rmtree(tree, ignore_errors=True)
    partial.rename(tree)
    return info


def working_tree_info() -> dict:
    """HEAD and the uncommitted files that make up the ``taskmq`` system."""
    changed = git("status", "--porcelain", "--", "django_taskmq", "setup.cfg", "pyproject.toml")
    return {"head": git("rev-parse", "HEAD"),
            "uncommitted": [line[3:] for line in changed.splitlines()]}


def results_folder(args: argparse.Namespace, head: str | None) -> Path:
    """``benchmarks/results/<date>-<short commit>/`` (full mode), a fresh suffix if taken."""
    if args.out:
        return args.out.resolve()
    short = head[:7] if head else "nogit"
    base = f"{time.strftime('%Y-%m-%d')}-{short}"
    if args.quick:
        return WORK_DIR / "results" / f"{base}-quick-{time.strftime('%H%M%S')}"
    folder, k = RESULTS_DIR / base, 2
    while folder.exists():
        folder, k = RESULTS_DIR / f"{base}-{k}", k + 1
    return folder


class Runner:
    """Runs ``workloads.py`` in the right venv; one JSON file per run in the results folder.

    ``session.json`` holds what the runs share (command, options, seed and run order,
    machine, versions, code); ``runs/NNN-<engine>-<system>-<workload>-r<round>.json`` one
    workload run each, written as soon as it ends, with its foreign CPU load.
    """

    def __init__(self, args: argparse.Namespace, measured: dict | None = None) -> None:
        self.args = args
        self.started = time.strftime("%Y-%m-%d %H:%M:%S")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if measured:  # taskmq runs an exported commit: the working tree does not matter
            tree = {"head": measured["sha"], "uncommitted": [], "exported": measured}
        else:
            try:
                tree = working_tree_info()
            except (OSError, RuntimeError) as exc:  # not a git checkout: the numbers still count
                tree = {"error": str(exc)}
        self.folder = results_folder(args, tree.get("head"))
        (self.folder / "runs").mkdir(parents=True, exist_ok=True)
        self.results_path = self.folder / "session.json"
        self.log_dir = WORK_DIR / "logs" / stamp
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.seq = 0
        self.results = {
            "format": 2,
            "started": self.started,
            "command": "python3 benchmarks/run.py " + shlex.join(sys.argv[1:]),
            "mode": "quick" if args.quick else "full",
            "engines": args.engines, "systems": args.systems, "workloads": args.workloads,
            "options": {k: getattr(args, k) for k in FULL},
            "seed": args.seed, "order": [],
            "machine": machine_info(), "versions": {}, "working_tree": tree, "records": [],
        }

    def save(self) -> None:
        """Write session.json (without the records: they are the files under runs/)."""
        session = {k: v for k, v in self.results.items() if k != "records"}
        session["runs_written"] = self.seq
        self.results_path.write_text(json.dumps(session, indent=1))

    def save_record(self, record: dict) -> None:
        self.seq += 1
        record["seq"] = self.seq
        name = (f"{self.seq:03d}-{record['engine']}-{record['system']}-{record['workload']}"
                f"-r{record['run']}.json")
        (self.folder / "runs" / name).write_text(json.dumps(record, indent=1))
        self.results["records"].append(record)
        self.save()

    def call(self, system: str, engine: str, extra: list[str], log_name: str, timeout: float) -> dict:
        """Run workloads.py for ``system``; return its result dict (never raises)."""
        python = VENVS[SYSTEMS[system].venv].python
        argv = [str(python), str(BENCH_DIR / "workloads.py"), "--system", system, "--engine", engine, *extra]
        driver_log = self.log_dir / f"{log_name}.driver.log"
        # No PYTHONPATH: each venv must import its own django_taskmq (the working tree or
        # the baseline), which a PYTHONPATH naming a checkout would override.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        meter = LoadMeter()
        with open(driver_log, "w") as err, meter:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, cwd=BENCH_DIR,
                                    env=env)
            try:
                out, _ = proc.communicate(timeout=timeout)
            except KeyboardInterrupt:
                # Ctrl-C reached the child too: give it time to stop its cluster.
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
            except subprocess.TimeoutExpired:
                # SIGTERM lets workloads.py stop its cluster in its finally blocks.
                proc.send_signal(signal.SIGTERM)
                try:
                    out, _ = proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, _ = proc.communicate()
                out = ""
                timed_out = True
            else:
                timed_out = False
        if timed_out:
            return {"ok": False, "error": f"timed out after {timeout:.0f}s", "driver_log": str(driver_log),
                    "load": meter.result}
        for line in reversed(out.splitlines()):
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX):])
                result["driver_log"] = str(driver_log)
                result["load"] = meter.result
                if result.get("ok"):
                    trim_log(driver_log)  # django-q2 logs a line per enqueued job
                return result
        return {"ok": False, "error": f"no result line (exit {proc.returncode}); see {driver_log}",
                "driver_log": str(driver_log), "load": meter.result}

    def workload_options(self) -> list[str]:
        a = self.args
        return ["-n", str(a.n), "--large-n", str(a.large_n), "--bulk-n", str(a.bulk_n),
                "--mixed-n", str(a.mixed_n), "--rss-n", str(a.rss_n),
                "--latency-jobs", str(a.latency_jobs), "--latency-gap-ms", str(a.latency_gap_ms),
                "--latency-max-seconds", str(a.latency_max_seconds),
                "--startup-repeats", str(a.startup_repeats), "--scale-rows", str(a.scale_rows),
                "--scale-probe-jobs", str(a.scale_probe_jobs),
                "--large-skip", a.large_skip or "", "--large-skip-reason", a.large_skip_reason or "",
                "--idle-seconds", str(a.idle_seconds), "--settle", str(a.settle)]

    def timeout(self, workload: str) -> float:
        """Outer safety net only; workloads.py has its own tighter deadlines."""
        a = self.args
        jobs = {"enqueue": a.n, "bulk": a.bulk_n, "drain": a.n, "drain_large": a.large_n, "mixed": a.mixed_n,
                "rss": a.rss_n, "memory": 2 * a.n, "scale": a.n + a.scale_rows / 1000}.get(workload, 0)
        return 900 + jobs / 3 + a.idle_seconds


def log(message: str) -> None:
    print(message, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    # celery-durable's private Redis (durable_redis.py) runs from the version checks to the report.
    if "celery-durable" not in args.systems:
        return run(args, None)
    with durable_redis.running(log=log) as settings:
        return run(args, settings)


def run(args: argparse.Namespace, durable: dict | None) -> int:
    # Where each taskmq venv must import django_taskmq from.
    expected_package = {"taskmq": REPO_ROOT / "django_taskmq"}
    baseline = None
    if args.baseline:
        try:
            baseline = export_baseline(args.baseline, log)
        except (OSError, RuntimeError, tarfile.TarError) as exc:
            log(f"!! --baseline {args.baseline}: {exc}")
            return 2
        VENVS[BASELINE_VENV] = baseline_venv(Path(baseline["tree"]))
        expected_package[BASELINE_VENV] = Path(baseline["tree"]) / "django_taskmq"
    measured = None
    if args.taskmq_ref:
        try:
            measured = export_baseline(args.taskmq_ref, log)
        except (OSError, RuntimeError, tarfile.TarError) as exc:
            log(f"!! --taskmq-ref {args.taskmq_ref}: {exc}")
            return 2
        tree = Path(measured["tree"])
        spec = baseline_venv(tree)
        VENVS["taskmq"] = type(spec)(name="taskmq-ref", requirements=spec.requirements,
                                     fingerprint_files=spec.fingerprint_files)
        expected_package["taskmq"] = tree / "django_taskmq"
    runner = Runner(args, measured)
    if durable:
        runner.results["durable_redis"] = durable
    if measured:
        log(f"taskmq: {measured['ref']} = {measured['sha'][:12]} {measured['subject']} (exported, "
            f"venv-taskmq-ref)")
    if baseline:
        runner.results["baseline"] = baseline
        log(f"baseline: {baseline['ref']} = {baseline['sha'][:12]} {baseline['subject']}")
    log(f"results: {runner.folder}\nlogs:    {runner.log_dir}\nseed:    {args.seed}")

    # 1. Environments, versions and template databases.
    needed = {SYSTEMS[s].venv for s in args.systems}
    broken: dict[tuple[str, str], str] = {}  # (system, engine) -> why it cannot run
    for name in sorted(needed):
        try:
            venvs.ensure(VENVS[name], args.python, args.reinstall, log)
            if name in expected_package:
                venvs.compile_tree(VENVS[name], expected_package[name])
        except Exception as exc:
            log(f"!! venv-{name} could not be built: {exc}")
            for s in args.systems:
                if SYSTEMS[s].venv == name:
                    for e in SYSTEMS[s].engines_for(args.engines):
                        broken[s, e] = f"venv-{name} could not be built"
    for name in sorted(needed):
        system = next(s for s in args.systems if SYSTEMS[s].venv == name)
        for engine in SYSTEMS[system].engines_for(args.engines):
            if (system, engine) not in broken:
                info = runner.call(system, engine, ["--info"], f"info-{name}-{engine}", 300)
                info.pop("driver_log", None)
                info.pop("load", None)
                runner.results["versions"].setdefault(name, {})[engine] = info
                problem = import_problem(info, expected_package.get(name))
                if problem:
                    log(f"!! venv-{name} on {engine}: {problem}")
                    for s in args.systems:
                        if SYSTEMS[s].venv == name:
                            broken[s, engine] = problem
        if name in expected_package:
            paths = {i.get("django_taskmq path") for i in runner.results["versions"].get(name, {}).values()}
            log(f"venv-{name}: django_taskmq from {', '.join(sorted(p or '?' for p in paths))}")
    prepared: dict[tuple, dict] = {}
    for system in args.systems:
        for engine in SYSTEMS[system].engines_for(args.engines):
            db = SYSTEMS[system].database_key
            key = (db, engine)
            if (system, engine) in broken:
                continue
            if key not in prepared:
                log(f"preparing template database: {db[0]} ({SYSTEMS[system].project}, venv-"
                    f"{SYSTEMS[system].venv}) on {engine}")
                prepared[key] = runner.call(system, engine, ["--prepare"], f"prepare-{db[0]}-{engine}", 600)
            if not prepared[key].get("ok"):
                broken[system, engine] = f"template database: {prepared[key].get('error', '?')}"
                log(f"!! {system} on {engine} will be skipped: {broken[system, engine]}")
    runner.save()

    # 2. Interleaved rounds: every system runs a workload before any system runs the next.
    try:
        failed = run_rounds(runner, args, broken)
    except KeyboardInterrupt:
        log("\n!! interrupted: reporting what was measured so far")
        failed = True
    return finish(runner, args, 1 if failed else 0)


def import_problem(info: dict, expected: Path | None) -> str | None:
    """Return why a taskmq venv imports the wrong django_taskmq (or none), else None."""
    if expected is None:
        return None
    found = info.get("django_taskmq path")
    if found is None:
        return f"django_taskmq could not be imported: {info.get('error', '?')}"
    if Path(found).resolve() != expected.resolve():
        return f"imports django_taskmq from {found}, expected {expected}"
    return None


def run_rounds(runner: Runner, args: argparse.Namespace, broken: dict) -> bool:
    """Run every (engine, system, workload) once per round, in an order shuffled per round.

    The shuffle is seeded (``--seed``, recorded with the order in session.json), so a
    drift of the machine's load spreads over all systems instead of hitting one of them.
    Return whether any run failed.
    """
    failed = False
    rng = random.Random(args.seed)
    cells = [(engine, system, workload) for system in args.systems
             for engine in SYSTEMS[system].engines_for(args.engines) for workload in args.workloads]
    total = len(cells) * args.runs
    done = 0
    for run in range(1, args.runs + 1):
        order = list(cells)
        rng.shuffle(order)
        runner.results["order"].append([list(c) for c in order])
        runner.save()
        for engine, system, workload in order:
            name = f"{engine}-{system}-{workload}-r{run}"
            started = time.strftime("%Y-%m-%dT%H:%M:%S")
            skip = [x for x in (args.large_skip or "").split(",") if x]
            reason = not_applicable(SYSTEMS[system], workload, skip, args.large_skip_reason)
            if reason:  # nothing to measure: recorded as n/a without starting anything
                result = {"ok": True, "metrics": {}, "details": {"na": reason}, "elapsed_seconds": 0.0}
            elif (system, engine) in broken:
                result = {"ok": False, "error": broken[system, engine]}
            else:
                result = run_one(runner, args, system, engine, workload, name)
            result.update(engine=engine, system=system, workload=workload, run=run, started=started)
            runner.save_record(result)
            done += 1
            log(f"({done}/{total}) " + progress_line(result, args.runs))
            if not result.get("ok"):
                failed = True
                if args.fail_fast:
                    return failed
    return failed


def run_one(runner: Runner, args: argparse.Namespace, system: str, engine: str,
            workload: str, name: str) -> dict:
    """Run one workload, retrying a failure up to ``--retries`` times.

    On a shared machine a failure is often someone else's doing (a test restarting
    PostgreSQL); every attempt starts from a fresh database, so a retry is safe. Failed
    attempts stay in the record under ``failed_attempts``.
    """
    failed_attempts = []
    for attempt in range(args.retries + 1):
        suffix = f"-retry{attempt}" if attempt else ""
        result = runner.call(
            system, engine,
            ["--workload", workload, "--log-prefix", str(runner.log_dir / (name + suffix)),
             *runner.workload_options()],
            name + suffix, runner.timeout(workload))
        if result.get("ok"):
            break
        first = (result.get("error") or "?").splitlines()[0]
        failed_attempts.append({"error": first, "driver_log": result.get("driver_log"),
                                "load": result.get("load")})
        if attempt < args.retries:
            log(f"   {name}: attempt {attempt + 1} failed ({first[:200]}); retrying")
    if len(failed_attempts) > 1 or (failed_attempts and result.get("ok")):
        result["failed_attempts"] = failed_attempts if result.get("ok") else failed_attempts[:-1]
    return result


def progress_line(result: dict, runs: int) -> str:
    head = (f"[{result['engine']} run {result['run']}/{runs}] "
            f"{result['workload']:<9} {result['system']:<15}")
    if not result.get("ok"):
        first = (result.get("error") or "?").splitlines()[0]
        return f"{head} FAILED: {first[:300]}  (driver log: {result.get('driver_log', '-')})"
    metrics = ", ".join(f"{k}={report.fmt(v)}" for k, v in (result.get("metrics") or {}).items())
    load = result.get("load") or {}
    return (f"{head} {metrics}  [{result.get('elapsed_seconds', 0):.1f}s, foreign "
            f"{load.get('foreign_cores', float('nan')):.2f} cores]")


def finish(runner: Runner, args: argparse.Namespace, status: int) -> int:
    runner.results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    runner.save()
    folder = runner.folder
    data = report.load_folder(folder)
    print(report.text_summary(data))
    log(f"\nraw results: {folder}")
    if not args.no_plot:
        try:
            python = venvs.ensure(VENVS["tools"], args.python, False, log)
            subprocess.run([str(python), str(BENCH_DIR / "plot.py"), str(folder)], check=True, cwd=BENCH_DIR)
            log(f"plots:       {', '.join(p.name for p in sorted(folder.glob('*.png')))}")
        except Exception as exc:  # a missing plot must not lose the numbers
            log(f"!! plot failed: {exc}")
    preview = folder / "report.md"
    preview.write_text(report.folder_markdown(data, link_base=folder))
    log(f"markdown:    {preview}")
    if not args.quick and not args.out and not args.no_results_md:
        log(f"regenerated: {', '.join(str(path) for path in report.write_pages())}")
    return status


if __name__ == "__main__":
    sys.exit(main())
