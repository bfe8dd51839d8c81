#!/usr/bin/env python3
"""Benchmark django_taskmq against django-q2 on the same machine and database.

    python3 benchmarks/run.py                      # everything: both engines, 3 runs
    python3 benchmarks/run.py --quick              # smoke run, a few minutes
    python3 benchmarks/run.py --engines sqlite --systems taskmq,djangoq2 --workloads drain,latency
    python3 benchmarks/run.py --baseline HEAD~5 --systems taskmq,taskmq-base   # before/after

Needs only python3 (stdlib): it builds its own venvs under benchmarks/.work/, runs each
workload in a subprocess of the system's venv (``workloads.py``), interleaves systems
inside each run, and writes ``.work/results-<timestamp>.json``, ``.work/latest.md`` (a
table to paste into RESULTS.md) and ``.work/latest.png``. See README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
import venvs  # noqa: E402
from cluster import trim_log  # noqa: E402
from systems import (  # noqa: E402
    BASELINE_MARKER, BASELINE_VENV, BENCH_DIR, DEFAULT_SYSTEMS, ENGINES, REPO_ROOT, SYSTEMS, VENVS,
    WORK_DIR, WORKLOADS, baseline_tree, baseline_venv,
)

RESULT_PREFIX = "BENCH-RESULT "

# Sizes of a full run and of --quick; an explicit option beats both.
FULL = {"runs": 3, "n": 2000, "bulk_n": 10000, "mixed_n": 10000, "rss_n": 100000,
        "latency_jobs": 50, "latency_gap_ms": 100.0, "idle_seconds": 30.0, "settle": 2.0}
QUICK = {"runs": 1, "n": 300, "bulk_n": 2000, "mixed_n": 1000, "rss_n": 3000,
         "latency_jobs": 20, "latency_gap_ms": 100.0, "idle_seconds": 5.0, "settle": 1.0}


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
    p.add_argument("--workloads", type=csv(WORKLOADS), default=list(WORKLOADS),
                   help=f"default: all of {','.join(WORKLOADS)}")
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run: a smoke test")
    p.add_argument("--runs", type=int)
    p.add_argument("-n", type=int, help="jobs for enqueue and drain (default 2000)")
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


class Runner:
    """Runs ``workloads.py`` in the right venv and keeps every result in one JSON file."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.strftime("%Y-%m-%d %H:%M:%S")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.results_path = WORK_DIR / f"results-{stamp}.json"
        self.log_dir = WORK_DIR / "logs" / stamp
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.results = {
            "started": self.started,
            "command": "python3 benchmarks/run.py " + shlex.join(sys.argv[1:]),
            "engines": args.engines, "systems": args.systems, "workloads": args.workloads,
            "options": {k: getattr(args, k) for k in FULL},
            "machine": machine_info(), "versions": {}, "records": [],
        }
        try:
            self.results["working_tree"] = working_tree_info()
        except (OSError, RuntimeError) as exc:  # not a git checkout: the numbers still count
            self.results["working_tree"] = {"error": str(exc)}

    def save(self) -> None:
        self.results_path.write_text(json.dumps(self.results, indent=1))

    def call(self, system: str, engine: str, extra: list[str], log_name: str, timeout: float) -> dict:
        """Run workloads.py for ``system``; return its result dict (never raises)."""
        python = VENVS[SYSTEMS[system].venv].python
        argv = [str(python), str(BENCH_DIR / "workloads.py"), "--system", system, "--engine", engine, *extra]
        driver_log = self.log_dir / f"{log_name}.driver.log"
        # No PYTHONPATH: each venv must import its own django_taskmq (the working tree or
        # the baseline), which a PYTHONPATH naming a checkout would override.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with open(driver_log, "w") as err:
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
                return {"ok": False, "error": f"timed out after {timeout:.0f}s", "driver_log": str(driver_log)}
        for line in reversed(out.splitlines()):
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX):])
                result["driver_log"] = str(driver_log)
                if result.get("ok"):
                    trim_log(driver_log)  # django-q2 logs a line per enqueued job
                return result
        return {"ok": False, "error": f"no result line (exit {proc.returncode}); see {driver_log}",
                "driver_log": str(driver_log)}

    def workload_options(self) -> list[str]:
        a = self.args
        return ["-n", str(a.n), "--bulk-n", str(a.bulk_n), "--mixed-n", str(a.mixed_n),
                "--rss-n", str(a.rss_n), "--latency-jobs", str(a.latency_jobs),
                "--latency-gap-ms", str(a.latency_gap_ms), "--idle-seconds", str(a.idle_seconds),
                "--settle", str(a.settle)]

    def timeout(self, workload: str) -> float:
        """Outer safety net only; workloads.py has its own tighter deadlines."""
        a = self.args
        jobs = {"enqueue": a.n, "bulk": a.bulk_n, "drain": a.n, "mixed": a.mixed_n,
                "rss": a.rss_n}.get(workload, 0)
        return 900 + jobs / 3 + a.idle_seconds


def log(message: str) -> None:
    print(message, flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
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
    runner = Runner(args)
    if baseline:
        runner.results["baseline"] = baseline
        log(f"baseline: {baseline['ref']} = {baseline['sha'][:12]} {baseline['subject']}")
    log(f"results: {runner.results_path}\nlogs:    {runner.log_dir}")

    # 1. Environments, versions and template databases.
    needed = {SYSTEMS[s].venv for s in args.systems}
    broken: dict[tuple[str, str], str] = {}  # (system, engine) -> why it cannot run
    for name in sorted(needed):
        try:
            venvs.ensure(VENVS[name], args.python, args.reinstall, log)
        except Exception as exc:
            log(f"!! venv-{name} could not be built: {exc}")
            for s in args.systems:
                if SYSTEMS[s].venv == name:
                    for e in args.engines:
                        broken[s, e] = f"venv-{name} could not be built"
    for name in sorted(needed):
        system = next(s for s in args.systems if SYSTEMS[s].venv == name)
        for engine in args.engines:
            if (system, engine) not in broken:
                info = runner.call(system, engine, ["--info"], f"info-{name}-{engine}", 300)
                info.pop("driver_log", None)
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
        for engine in args.engines:
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
    """Run every (engine, run, workload, system); return whether any of them failed."""
    failed = False
    for engine in args.engines:
        for run in range(1, args.runs + 1):
            for workload in args.workloads:
                for system in args.systems:
                    name = f"{engine}-{system}-{workload}-r{run}"
                    if (system, engine) in broken:
                        result = {"ok": False, "error": broken[system, engine]}
                    else:
                        result = run_one(runner, args, system, engine, workload, name)
                    result.update(engine=engine, system=system, workload=workload, run=run)
                    runner.results["records"].append(result)
                    runner.save()
                    log(progress_line(result, args.runs))
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
        failed_attempts.append({"error": first, "driver_log": result.get("driver_log")})
        if attempt < args.retries:
            log(f"   {name}: attempt {attempt + 1} failed ({first[:200]}); retrying")
    if failed_attempts and result.get("ok"):
        result["failed_attempts"] = failed_attempts
    return result


def progress_line(result: dict, runs: int) -> str:
    head = (f"[{result['engine']} run {result['run']}/{runs}] "
            f"{result['workload']:<9} {result['system']:<15}")
    if not result.get("ok"):
        first = (result.get("error") or "?").splitlines()[0]
        return f"{head} FAILED: {first[:300]}  (driver log: {result.get('driver_log', '-')})"
    metrics = ", ".join(f"{k}={report.fmt(v)}" for k, v in (result.get("metrics") or {}).items())
    return f"{head} {metrics}  [{result.get('elapsed_seconds', 0):.1f}s]"


def finish(runner: Runner, args: argparse.Namespace, status: int) -> int:
    runner.save()
    results = runner.results
    print(report.text_table(results))
    latest = WORK_DIR / "latest.md"
    latest.write_text(report.markdown(results))
    log(f"\nraw results: {runner.results_path}\nmarkdown:    {latest}")
    if not args.no_plot and "drain" in args.workloads:
        try:
            python = venvs.ensure(VENVS["tools"], args.python, False, log)
            png = WORK_DIR / f"drain-{runner.results_path.stem.removeprefix('results-')}.png"
            subprocess.run([str(python), str(BENCH_DIR / "plot.py"), str(runner.results_path), str(png)],
                           check=True, cwd=BENCH_DIR)
            (WORK_DIR / "latest.png").write_bytes(png.read_bytes())
            log(f"plot:        {png} (and .work/latest.png)")
        except Exception as exc:  # a missing plot must not lose the numbers
            log(f"!! plot failed: {exc}")
    return status


if __name__ == "__main__":
    sys.exit(main())
