"""A 1000-step fan-in: django_taskmq's workflow against Celery's chord, in the same run.

* ``fan_in``: N small steps (``benchtasks.item``, which returns its argument) and one fan-in step
  that reads their N results: on django_taskmq a :class:`~django_taskmq.Workflow` whose last step
  (``benchtasks.merge_upstream``) waits for the N others and reads ``current_job().upstream``; on
  Celery a ``chord`` of N ``item`` tasks whose callback (``merge_results``) receives the N results.
  Measured from the first ``add`` / signature to the fan-in step's result being visible in the
  system's store (the step's row finished, Celery's ``celery-task-meta-<id>`` key; polled every
  5 ms), and the enqueue alone (building the graph plus the call that sends it). The cluster is
  started first and has run one job (warm), on a fresh database (Redis databases flushed).
* ``enqueue_big``: enqueue a BIG_N-step fan-in (BIG_N steps -> one) with no cluster running: the
  time of the ``add`` calls (Celery: the signatures) and of ``enqueue()`` (``apply_async()``).
  If django_taskmq's median is above one second, one extra enqueue runs under cProfile and the
  top of its profile is saved beside the raw results.

django_taskmq keeps every result here (``save_limit`` 0), as Celery keeps its results (a day by
default): with ``save_limit``'s default (250) the monitor may prune finished steps before the fan-in
step reads them (see the "Workflows" page of the docs).

The systems run as ``run.py`` runs them (``README.md``): ``venv-taskmq`` (this tree, editable,
compiled) with ``manage.py qcluster`` of ``projects/taskmq_project`` (2 workers) on SQLite and
PostgreSQL through ``benchdb.py`` and ``databases.py``; ``venv-celery`` with ``celery -A celeryapp
worker --pool prefork --concurrency 2``, Redis at 127.0.0.1:6379 as broker and result backend.
Each run is a subprocess of the system's venv (``--driver``); rounds run every case once, in a
shuffled order; the machine's foreign CPU load is measured around each run (``hostload.py``).

    python3 benchmarks/fan_in.py [--runs 5] [--engines sqlite,postgresql] [-n 1000] [--big-n 10000]
    python3 benchmarks/fan_in.py --report benchmarks/results/fan_in.json

Raw results: ``benchmarks/results/fan_in.json`` (and ``fan_in-profile.txt`` when profiled);
``report.py`` renders them into ARCHIVE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from systems import BENCH_DIR, REPO_ROOT, RESULTS_DIR, SYSTEMS, VENVS, WORK_DIR

PREFIX = "FAN-IN-RESULT "
RAW = RESULTS_DIR / "fan_in.json"
PROFILE = RESULTS_DIR / "fan_in-profile.txt"
GOAL_SECONDS = 1.0  # the goal for enqueueing a 10,000-step workflow on PostgreSQL
POLL = 0.005
FINAL = {"SUCCEEDED", "FAILED", "DEAD", "EXPIRED", "CANCELLED"}


# --------------------------------------------------------------------------- driver (system venv)


def _wait(predicate, cluster, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if cluster is not None:
            cluster.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not seen within {timeout:.0f}s")
        time.sleep(POLL)


def _taskmq_graph(n: int):
    from django_taskmq import Workflow

    wf = Workflow(name=f"fan-in-{n}")
    steps = [wf.add("benchtasks.item", i, name=f"item-{i}") for i in range(n)]
    wf.add("benchtasks.merge_upstream", after=steps, name="merge")
    return wf


def taskmq_case(case: str, n: int, ctx, profile: str | None) -> dict:
    from django_taskmq import async_task, fetch, workflow
    from django_taskmq.models import Job, WorkflowStep

    if case == "enqueue_big":
        profiler = None
        if profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        t0 = time.perf_counter()
        wf = _taskmq_graph(n)
        t1 = time.perf_counter()
        wf.enqueue()
        t2 = time.perf_counter()
        if profiler is not None:
            profiler.disable()
            _write_profile(profiler, profile, t2 - t0)
        stored = Job.objects.count()
        if stored != n + 1:
            raise RuntimeError(f"expected {n + 1} jobs stored, found {stored}")
        return {"build_s": t1 - t0, "submit_s": t2 - t1, "enqueue_s": t2 - t0}
    with ctx.running_cluster() as cluster:
        warm = async_task("benchtasks.noop")
        _wait(lambda: Job.objects.filter(pk=warm, state="SUCCEEDED").exists(), cluster, 120, "the warm-up job")
        t0 = time.perf_counter()
        wf = _taskmq_graph(n)
        t1 = time.perf_counter()
        workflow_id = wf.enqueue()
        t2 = time.perf_counter()
        merge_id = WorkflowStep.objects.get(workflow_id=workflow_id, name="merge").job_id
        state = _wait(lambda: Job.objects.filter(pk=merge_id, state__in=FINAL).values_list("state", flat=True).first(),
                      cluster, 300, "the fan-in step's end")
        t3 = time.perf_counter()
        result = fetch(merge_id).result
        info = workflow(workflow_id)
        items = Job.objects.filter(pk__in=[s.job_id for s in info.steps.values()], state="SUCCEEDED",
                                   deliveries=1).count()
    expected = {"count": n, "sum": n * (n - 1) // 2}
    if state != "SUCCEEDED" or result != expected or info.state != "SUCCEEDED" or items != n + 1:
        raise RuntimeError(f"fan-in went wrong: merge {state} {result!r}, workflow {info.state}, "
                           f"{items} of {n + 1} steps succeeded once")
    return {"build_s": t1 - t0, "submit_s": t2 - t1, "enqueue_s": t2 - t0, "done_s": t3 - t0}


def celery_case(case: str, n: int, ctx) -> dict:
    import redis
    from celery import chord

    from celeryapp import HOST, PORT, RESULT_DB, item, merge_results, noop

    def build():
        return chord([item.s(i) for i in range(n)], merge_results.s())

    if case == "enqueue_big":
        t0 = time.perf_counter()
        graph = build()
        t1 = time.perf_counter()
        graph.apply_async()
        t2 = time.perf_counter()
        return {"build_s": t1 - t0, "submit_s": t2 - t1, "enqueue_s": t2 - t0}
    store = redis.Redis(host=HOST, port=int(PORT), db=RESULT_DB)
    with ctx.running_cluster() as cluster:
        noop.delay().get(timeout=120)
        t0 = time.perf_counter()
        graph = build()
        t1 = time.perf_counter()
        callback = graph.apply_async()
        t2 = time.perf_counter()
        key = f"celery-task-meta-{callback.id}"
        raw = _wait(lambda: store.get(key), cluster, 300, "the chord callback's result")
        t3 = time.perf_counter()
    payload = json.loads(raw)
    expected = {"count": n, "sum": n * (n - 1) // 2}
    if payload.get("status") != "SUCCESS" or payload.get("result") != expected:
        raise RuntimeError(f"chord went wrong: {payload.get('status')} {payload.get('result')!r}")
    return {"build_s": t1 - t0, "submit_s": t2 - t1, "enqueue_s": t2 - t0, "done_s": t3 - t0}


def _write_profile(profiler, path: str, seconds: float) -> None:
    import io
    import pstats

    out = io.StringIO()
    out.write(f"cProfile of one {seconds:.3f} s enqueue (build + enqueue(), under the profiler's overhead)\n")
    for key, count in (("cumulative", 35), ("tottime", 25)):
        out.write(f"\n--- sorted by {key}, top {count}\n")
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(key).print_stats(count)
    # Only the table: the header lines hold this machine's paths and the run's clock.
    Path(path).write_text("\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip() + "\n")


def driver(args: argparse.Namespace) -> int:
    from databases import fresh_database, prepare_template, server_info
    from workloads import Context, setup_django

    system = SYSTEMS[args.system]
    result = {"system": system.name, "engine": args.engine, "case": args.case, "n": args.n}
    if args.prepare:
        prepare_template(system, args.engine)
        print(PREFIX + json.dumps({"ok": True}), flush=True)
        return 0
    # Keep every result, as Celery does (a day by default): with save_limit's default (250) the
    # monitor may prune finished steps before the fan-in step reads them.
    os.environ["BENCH_TASKMQ_SAVE_LIMIT"] = "0"
    marks_dir = Path(tempfile.mkdtemp(prefix="marks-", dir=WORK_DIR))
    try:
        fresh_database(system, args.engine)
        setup_django(system, args.engine)
        from adapters import load

        result["versions"] = {**server_info(args.engine), **load(system.adapter).versions()}
        result["versions"].pop("django_taskmq path", None)
        ctx = Context(system, args.engine, None, args, Path(args.log_prefix), marks_dir)
        if system.adapter == "taskmq":
            result.update(taskmq_case(args.case, args.n, ctx, args.profile))
        else:
            result.update(celery_case(args.case, args.n, ctx))
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - reported as a result line, the host decides
        import traceback

        result.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    finally:
        import shutil

        shutil.rmtree(marks_dir, ignore_errors=True)
    print(PREFIX + json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


# --------------------------------------------------------------------------- host (python3, stdlib)


def call(system: str, engine: str, extra: list[str], log_prefix: Path, timeout: float = 600) -> dict:
    """Run the driver in ``system``'s venv; return its result line, with the run's CPU load."""
    from hostload import LoadMeter

    python = VENVS[SYSTEMS[system].venv].python
    argv = [str(python), str(Path(__file__).resolve()), "--driver", "--system", system, "--engine", engine,
            "--log-prefix", str(log_prefix), *extra]
    with open(f"{log_prefix}.driver.log", "w") as log, LoadMeter() as meter:
        done = subprocess.run(argv, cwd=BENCH_DIR, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout)
    lines = [line[len(PREFIX):] for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    if not lines:
        raise RuntimeError(f"no result from {' '.join(argv)} (exit {done.returncode}); see {log_prefix}.driver.log")
    result = json.loads(lines[-1])
    result["load"] = meter.result
    return result


def host(args: argparse.Namespace) -> int:
    import venvs

    engines = [e for e in args.engines.split(",") if e]
    for name in ("taskmq", "celery"):
        venvs.ensure(VENVS[name])
    venvs.compile_tree(VENVS["taskmq"], REPO_ROOT / "django_taskmq")
    log_dir = WORK_DIR / "logs" / f"fan_in-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    for engine in sorted(set(engines) | {"postgresql"}):
        call("taskmq", engine, ["--prepare"], log_dir / f"prepare-{engine}")
    cases = [("taskmq", e, "fan_in", args.n) for e in engines] + [("celery", "redis", "fan_in", args.n)]
    cases += [("taskmq", "postgresql", "enqueue_big", args.big_n), ("celery", "redis", "enqueue_big", args.big_n)]
    seed = args.seed if args.seed is not None else int(time.time())
    shuffle = random.Random(seed)
    rows, order = [], []
    for round_ in range(1, args.runs + 1):
        planned = list(cases)
        shuffle.shuffle(planned)
        order.append([f"{s}/{e}/{c}" for s, e, c, _ in planned])
        for system, engine, case, n in planned:
            prefix = log_dir / f"r{round_}-{engine}-{system}-{case}"
            row = call(system, engine, ["--case", case, "-n", str(n)], prefix)
            row["round"] = round_
            rows.append(row)
            brief = {k: round(v, 3) for k, v in row.items() if k.endswith("_s") and isinstance(v, float)}
            print(f"round {round_} {system:6} {engine:10} {case:11} n={n}: "
                  f"{brief if row['ok'] else row['error']} [foreign {row['load']['foreign_cores']:.2f} cores]",
                  flush=True)
            if not row["ok"] and args.fail_fast:
                print(row.get("traceback", ""), file=sys.stderr)
                return 1
    big = [r["enqueue_s"] for r in rows if r["ok"] and r["system"] == "taskmq" and r["case"] == "enqueue_big"]
    profiled = None
    if big and statistics.median(big) > GOAL_SECONDS and not args.quick:
        call("taskmq", "postgresql", ["--case", "enqueue_big", "-n", str(args.big_n), "--profile", str(PROFILE)],
             log_dir / "profile-postgresql-taskmq")
        profiled = PROFILE.name
    raw = {"commit": _git("rev-parse", "--short", "HEAD"),
           "uncommitted": _git("status", "--porcelain", "--", "django_taskmq", "benchmarks").splitlines(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": os.uname().nodename,
           "cpus": os.cpu_count(), "runs": args.runs, "n": args.n, "big_n": args.big_n, "seed": seed,
           "order": order, "profile": profiled, "rows": rows}
    if args.quick:
        print(json.dumps(raw, indent=1)[:2000])
    else:
        RAW.write_text(json.dumps(raw, indent=1) + "\n")
        print(f"wrote {RAW}")
    report(raw)
    return 0


def _git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()


# --------------------------------------------------------------------------- report


def _stats(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not values:
        return "n/a"
    values = [v * scale for v in values]
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})")


def _label(system: str, engine: str) -> str:
    return ("django_taskmq workflow, " + {"sqlite": "SQLite", "postgresql": "PostgreSQL"}.get(engine, engine)
            if system == "taskmq" else "Celery chord, Redis")


def report(raw: dict) -> None:
    """Print the markdown of ARCHIVE.md's section from the raw results: median (min-max) per cell."""
    rows = raw["rows"]
    ok = [r for r in rows if r["ok"]]
    pairs = sorted({(r["system"], r["engine"]) for r in rows}, key=lambda p: (p[0] != "taskmq", p[1] != "sqlite"))
    foreign = [r["load"]["foreign_cores"] for r in rows]
    loaded = statistics.median(foreign) > 0.25 if foreign else False
    print(f"{raw['runs']} interleaved rounds (every case once per round, shuffled; seed {raw['seed']}), "
          f"commit {raw['commit']}, {raw['date']}, {raw['cpus']} CPUs. Foreign CPU load during the runs "
          f"(other programs on the machine, in cores of {raw['cpus']}): median {_stats(foreign)}"
          + (": **measured on a loaded machine**, absolute figures are pessimistic; compare the systems "
             "with each other." if loaded else "."))
    print()
    print(f"**Fan-in of {raw['n']} steps into one** (the fan-in step reads the {raw['n']} results), "
          "2 worker processes each, a warm cluster:")
    print()
    print("| system | runs ok | enqueue: build + send (ms) | enqueue -> fan-in step done (s) | steps/s, enqueue to done |")
    print("|---|---|---|---|---|")
    for system, engine in pairs:
        got = [r for r in ok if (r["system"], r["engine"], r["case"]) == (system, engine, "fan_in")]
        tried = [r for r in rows if (r["system"], r["engine"], r["case"]) == (system, engine, "fan_in")]
        if not tried:
            continue
        rates = [(raw["n"] + 1) / r["done_s"] for r in got]
        print(f"| {_label(system, engine)} | {len(got)}/{len(tried)} | {_stats([r['enqueue_s'] for r in got], 1000, 0)} "
              f"| {_stats([r['done_s'] for r in got])} | {_stats(rates, 1, 0)} |")
    print()
    print(f"**Enqueue of a {raw['big_n']:,}-step fan-in** ({raw['big_n']:,} steps -> one), no cluster running. "
          f"Goal (django_taskmq on PostgreSQL): under {GOAL_SECONDS:g} s for the whole enqueue.")
    print()
    print("| system | runs ok | build: add() / signatures (s) | enqueue() / apply_async() (s) | total (s) | goal |")
    print("|---|---|---|---|---|---|")
    for system, engine in pairs:
        got = [r for r in ok if (r["system"], r["engine"], r["case"]) == (system, engine, "enqueue_big")]
        tried = [r for r in rows if (r["system"], r["engine"], r["case"]) == (system, engine, "enqueue_big")]
        if not tried:
            continue
        total = [r["enqueue_s"] for r in got]
        goal = "n/a"
        if system == "taskmq" and total:
            goal = "met" if statistics.median(total) < GOAL_SECONDS else "**not met**"
        print(f"| {_label(system, engine)} | {len(got)}/{len(tried)} | {_stats([r['build_s'] for r in got], 1, 3)} | "
              f"{_stats([r['submit_s'] for r in got], 1, 3)} | {_stats(total, 1, 3)} | {goal} |")
    failed = [r for r in rows if not r["ok"]]
    if failed:
        print()
        print("Failed runs: " + "; ".join(f"round {r['round']} {r['system']}/{r['engine']}/{r['case']}: "
                                          f"{r['error']}" for r in failed))
    versions = {}
    for r in ok:
        versions.update(r.get("versions", {}))
    if versions:
        print()
        print("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".")


# --------------------------------------------------------------------------- entry point


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--engines", default="sqlite,postgresql", help="django_taskmq's databases for the fan-in")
    parser.add_argument("-n", type=int, default=1000, help="steps of the measured fan-in")
    parser.add_argument("--big-n", type=int, default=10000, help="steps of the enqueue-only fan-in")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="do not save the results (a smoke test)")
    parser.add_argument("--fail-fast", action="store_true")
    parser.add_argument("--report", type=Path, help="print the tables of saved raw results")
    # Driver mode (inside a system's venv, called by the host):
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", choices=("taskmq", "celery"), help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--case", choices=("fan_in", "enqueue_big"), help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    parser.add_argument("--log-prefix", default=str(WORK_DIR / "logs" / "manual" / "fan_in"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text()))
        return 0
    if args.driver:
        return driver(args)
    return host(args)


if __name__ == "__main__":
    sys.exit(main())
