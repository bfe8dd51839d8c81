"""Performance round three (issue 30): three comparisons, each in one run, interleaved.

* ``latency``: the idle latency of django_taskmq (SQLite, PostgreSQL; ``durable_outcomes`` True, and
  False as system ``taskmq-relaxed``) against Celery on the
  machine's Redis (nothing kept on disk) and against ``celery-durable``: the same Celery on a
  private Redis with ``appendonly yes`` and ``appendfsync always`` (``durable_redis.py``), the
  durability of a database commit. The measurement is ``workloads.py``'s latency workload itself
  (README.md, "latency"): a warm cluster, idle ``--settle`` s, then single tagged jobs, each
  awaited; enqueue call -> result visible (polled every 0.5 ms) and -> task start. Goals: our
  visible p50 at or below durable Celery's on both engines; with ``durable_outcomes`` False, at or
  below 5 ms and below Celery's default. Each round's figures are also shown side by side with
  their runs' foreign load (the figures at equal load).
* ``enqueue``: ``workloads.py``'s enqueue workload (N single calls, no cluster; the raw
  INSERT + COMMIT rate after it) for django_taskmq's ``async_task()``, for ``taskmq-orm``
  (``adapters/taskmq_orm.py``: ``Job.objects.create`` of the row ``async_task`` writes, signed
  once, in the same table) and for every peer's single enqueue (django-q2, django-tasks-db,
  Celery on both Redis servers). Goal: ours >= 85 % of the ORM's jobs/s on both engines. After
  the rounds, N ``async_task()`` calls and N ORM creates run under cProfile on each engine: the
  top entries of ours say where the extra time goes (``round3-enqueue-profile-<engine>.txt``).
* ``ready``: in one driver run, alternately (which goes first alternates too; one untimed bare
  process first), ``--repeats`` times each: the cluster's ready time
  (``workloads.py``'s startup workload: exec of ``manage.py qcluster`` -> start of a job queued
  before it) and a bare process of the same project and venv: exec -> ``django.setup()`` and
  one query (the oldest queued job) done. Our part = ready - bare; goal <= 60 ms.

Each case runs as a subprocess of the system's venv (``--driver``), on a fresh database (Redis
databases flushed); every round runs every case once in a shuffled order (seeded, recorded);
the machine's foreign CPU load is measured around each run (``hostload.py``). Results:
``results/round3-<part>.json``, rendered into ARCHIVE.md by ``report.py`` (``--report``).

    python3 benchmarks/round3.py [--parts latency,enqueue,ready] [--runs 5]
    python3 benchmarks/round3.py --report benchmarks/results/round3-latency.json
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

PREFIX = "ROUND3-RESULT "
PARTS = ("latency", "enqueue", "ready")
ENGINES = ("sqlite", "postgresql")  # --engines' default; "mysql" (MariaDB) is the third
# The single enqueues compared (their engines: the system's own, among --engines).
ENQUEUE_SYSTEMS = ("taskmq", "taskmq-orm", "djangoq2", "djangoq2-tuned", "dtdb", "steady-queue")
LATENCY_GOAL = "visible p50 at or below durable Celery's"
ORM_GOAL_PCT = 85.0
READY_GOAL_MS = 60.0
RELAXED_GOAL_MS = 5.0  # issue 30: visible p50 with durable_outcomes False, and below Celery's default
LOADED_CORES = 0.25  # a median foreign load above this (cores) marks the run as measured on a loaded machine

# The one query of the bare process: what a cluster's first claim would look for.
BARE = """
import sys, time
sys.path.insert(1, {bench!r})
import django
django.setup()
from django_taskmq.models import Job
Job.objects.filter(state="QUEUED").order_by("id").values_list("id", flat=True).first()
print(repr(time.time()), flush=True)
"""


def raw_path(part: str, label: str = "") -> Path:
    return RESULTS_DIR / f"round3-{part}{'-' + label if label else ''}.json"


def cases(part: str, engines: tuple[str, ...] = ENGINES) -> list[tuple[str, str, str]]:
    """(system, engine, variant) of a part; variant "paired": ours and the ORM's in one run.
    Celery's cases come with every run of a part that has them (its Redis is not an engine)."""
    if part == "latency":
        return ([(s, e, "") for s in ("taskmq", "taskmq-relaxed") for e in engines]
                + [("celery", "redis", ""), ("celery-durable", "redis", "")])
    if part == "enqueue":
        return ([(s, e, "") for s in ENQUEUE_SYSTEMS for e in SYSTEMS[s].engines_for(engines)]
                + [("celery", "redis", ""), ("celery-durable", "redis", "")]
                + [("taskmq", e, "paired") for e in engines])
    return [("taskmq", e, "") for e in engines]


# --------------------------------------------------------------------------- driver (system venv)


def _ready(ctx, repeats: int) -> dict:
    """Alternate the cluster's ready time and a bare django.setup() + one query, same project."""
    code = BARE.format(bench=str(BENCH_DIR))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ready, bare = [], []

    def one_bare() -> float:
        t0 = time.time()
        done = subprocess.run([sys.executable, "-c", code], cwd=ctx.system.project_dir, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"bare process failed: {done.stderr[-2000:]}")
        return 1000 * (float(done.stdout.split()[-1]) - t0)

    def one_cluster(i: int) -> float:
        # workloads.py's startup workload, one start with a tag of its own.
        tag = f"ready-r{i}"
        ctx.adapter.enqueue(tag=tag)
        with ctx.running_cluster(suffix=f"-{i}") as cluster:
            ctx.marks.wait_for([tag], cluster, timeout=120, interval=0.002)
        return 1000 * (ctx.marks.started[tag] - cluster.started_at)

    one_bare()  # untimed: the first process after the driver's own start reads files the others find cached
    for i in range(repeats):
        # Alternate which goes first, so neither always follows the other's exit.
        if i % 2 == 0:
            bare.append(one_bare())
            ready.append(one_cluster(i))
        else:
            ready.append(one_cluster(i))
            bare.append(one_bare())
    ours = [r - b for r, b in zip(ready, bare)]
    return {"ready_ms": statistics.median(ready), "bare_ms": statistics.median(bare),
            "ours_ms": statistics.median(ours), "samples": {"ready_ms": [round(x, 2) for x in ready],
                                                            "bare_ms": [round(x, 2) for x in bare]}}


def _paired(ctx, n: int, block: int = 100) -> dict:
    """``async_task()`` and the ORM's create of the same row, alternating blocks of ``block`` calls on
    one database in one process: both meet the same machine load, which separate runs do not."""
    from adapters.taskmq_orm import Adapter as OrmAdapter
    from workloads import check_stored

    sides = {"taskmq": ctx.adapter, "orm": OrmAdapter()}
    for adapter in sides.values():
        for _ in range(10):  # untimed, as the enqueue workload's warm-up
            adapter.enqueue()
    seconds = {name: 0.0 for name in sides}
    blocks = max(1, n // block)
    for b in range(2 * blocks):
        name = ("taskmq", "orm")[(b + b // 2) % 2]  # taskmq, orm, orm, taskmq, ...: neither always first
        adapter = sides[name]
        t0 = time.perf_counter()
        for _ in range(block):
            adapter.enqueue()
        seconds[name] += time.perf_counter() - t0
    check_stored(ctx.adapter, 2 * (10 + blocks * block))
    calls = blocks * block
    return {"metrics": {"jobs_per_s": calls / seconds["taskmq"], "orm_jobs_per_s": calls / seconds["orm"],
                        "pct_of_orm": 100 * seconds["orm"] / seconds["taskmq"]},
            "details": {"calls_each": calls, "block": block, "seconds": seconds}}


def _profile(ctx, n: int, path: str) -> dict:
    """N enqueues under cProfile; the top of the profile goes to ``path``."""
    import cProfile
    import io
    import pstats

    for _ in range(10):
        ctx.adapter.enqueue()
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    for _ in range(n):
        ctx.adapter.enqueue()
    profiler.disable()
    seconds = time.perf_counter() - t0
    out = io.StringIO()
    out.write(f"cProfile of {n} single enqueues, {ctx.system.name} on {ctx.engine}: {seconds:.3f} s "
              f"under the profiler ({1e6 * seconds / n:.0f} us a call)\n")
    for key, count in (("tottime", 30), ("cumulative", 40)):
        out.write(f"\n--- sorted by {key}, top {count}\n")
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(key).print_stats(count)
    # django_taskmq's own functions by cumulative time: what the queue adds around the INSERT.
    out.write("\n--- django_taskmq's functions, sorted by cumulative, top 25\n")
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(r"/django_taskmq/", 25)
    text = out.getvalue().replace(str(REPO_ROOT) + "/", "")
    # Only the tables: the header lines of pstats hold the machine's paths and the run's clock.
    lines = [line.rstrip() for line in text.splitlines()
             if not line.lstrip().startswith(("Ordered by", "List reduced"))]
    Path(path).write_text("\n".join(lines).strip() + "\n")
    return {"seconds": seconds}


def driver(args: argparse.Namespace) -> int:
    from databases import fresh_database, prepare_template, server_info
    from workloads import Context, setup_django, workload_enqueue, workload_latency

    system = SYSTEMS[args.system]
    os.environ.update(system.env)  # celery-durable: its Redis port, before anything connects
    result = {"system": system.name, "engine": args.engine, "part": args.part}
    if args.prepare:
        prepare_template(system, args.engine)
        print(PREFIX + json.dumps({"ok": True}), flush=True)
        return 0
    marks_dir = Path(tempfile.mkdtemp(prefix="marks-", dir=WORK_DIR))
    try:
        fresh_database(system, args.engine)
        setup_django(system, args.engine)
        from adapters import load

        result["versions"] = {**server_info(args.engine), **load(system.adapter).versions()}
        result["versions"].pop("django_taskmq path", None)
        ctx = Context(system, args.engine, load(system.adapter), args, Path(args.log_prefix), marks_dir)
        if args.profile:
            result.update(_profile(ctx, args.n, args.profile))
        elif args.part == "latency":
            result.update(workload_latency(ctx))
        elif args.part == "enqueue" and args.paired:
            result.update(_paired(ctx, args.n))
            result["variant"] = "paired"
        elif args.part == "enqueue":
            result.update(workload_enqueue(ctx))
        else:
            result["metrics"] = _ready(ctx, args.repeats)
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
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with open(f"{log_prefix}.driver.log", "w") as log, LoadMeter() as meter:
        done = subprocess.run(argv, cwd=BENCH_DIR, stdout=subprocess.PIPE, stderr=log, text=True,
                              timeout=timeout, env=env)
    lines = [line[len(PREFIX):] for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    if not lines:
        raise RuntimeError(f"no result from {' '.join(argv)} (exit {done.returncode}); see {log_prefix}.driver.log")
    result = json.loads(lines[-1])
    result["load"] = meter.result
    return result


def _options(args) -> list[str]:
    return ["-n", str(args.n), "--latency-jobs", str(args.latency_jobs), "--latency-gap-ms", str(args.latency_gap_ms),
            "--latency-max-seconds", str(args.latency_max_seconds), "--settle", str(args.settle),
            "--repeats", str(args.repeats)]


def host(args: argparse.Namespace) -> int:
    import durable_redis
    import venvs

    parts = [p for p in args.parts.split(",") if p]
    engines = tuple(e for e in args.engines.split(",") if e)
    planned_cases = [(part, s, e, v) for part in parts for s, e, v in cases(part, engines)]
    for name in sorted({SYSTEMS[s].venv for _, s, _, _ in planned_cases}):
        venvs.ensure(VENVS[name])
    venvs.compile_tree(VENVS["taskmq"], REPO_ROOT / "django_taskmq")
    log_dir = WORK_DIR / "logs" / f"round3-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    for system, engine in sorted({(s, e) for _, s, e, _ in planned_cases if e != "redis"}):
        if SYSTEMS[system].database_key != SYSTEMS["taskmq"].database_key or system == "taskmq":
            call(system, engine, ["--prepare"], log_dir / f"prepare-{system}-{engine}")
    seed = args.seed if args.seed is not None else int(time.time())
    shuffle = random.Random(seed)
    rows, order = [], []
    durable = any(s == "celery-durable" for _, s, _, _ in planned_cases)
    with (durable_redis.running() if durable else _nothing()) as redis_settings:
        for round_ in range(1, args.runs + 1):
            planned = list(planned_cases)
            shuffle.shuffle(planned)
            order.append([f"{p}/{s}/{e}" + (f"/{v}" if v else "") for p, s, e, v in planned])
            for part, system, engine, variant in planned:
                prefix = log_dir / f"r{round_}-{part}-{engine}-{system}{'-' + variant if variant else ''}"
                extra = ["--part", part, *(["--paired"] if variant == "paired" else []), *_options(args)]
                row = call(system, engine, extra, prefix)
                failed_attempts = []
                while not row["ok"] and len(failed_attempts) < args.retries:
                    # Often someone else's doing on this shared machine (a test restarting a server);
                    # a fresh database makes the retry safe; the failure stays in the record.
                    failed_attempts.append({"error": row["error"].splitlines()[0][:300], "load": row["load"]})
                    row = call(system, engine, extra, Path(f"{prefix}-retry{len(failed_attempts)}"))
                if failed_attempts:
                    row["failed_attempts"] = failed_attempts
                row["round"] = round_
                trace = row.pop("traceback", "")  # the driver log has it; the raw file keeps the error
                rows.append(row)
                metrics = {k: round(v, 2) for k, v in (row.get("metrics") or {}).items() if isinstance(v, float)}
                print(f"round {round_} {part:8} {system + ('/' + variant if variant else ''):15} {engine:10}: "
                      f"{metrics if row['ok'] else row['error']} [foreign {row['load']['foreign_cores']:.2f} cores]",
                      flush=True)
                if not row["ok"] and args.fail_fast:
                    print(trace, file=sys.stderr)
                    return 1
    profiles = {}
    if "enqueue" in parts and not args.quick:
        for engine in engines:
            for system in ("taskmq", "taskmq-orm"):
                name = f"round3-enqueue-profile-{engine}-{system}.txt"
                path = (RESULTS_DIR if not args.quick else WORK_DIR) / name
                got = call(system, engine, ["--part", "enqueue", "--profile", str(path), *_options(args)],
                           log_dir / f"profile-{engine}-{system}")
                if got["ok"]:
                    profiles[f"{engine}/{system}"] = name
                else:
                    print(f"profile {engine}/{system} failed: {got['error']}", file=sys.stderr)
    common = {"commit": _git("rev-parse", "--short", "HEAD"),
              "uncommitted": _git("status", "--porcelain", "--", "django_taskmq", "benchmarks").splitlines(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": os.uname().nodename,
              "cpus": os.cpu_count(), "runs": args.runs, "seed": seed, "parts_run_together": parts,
              "order": order, "durable_redis": redis_settings,
              "options": {"n": args.n, "latency_jobs": args.latency_jobs, "latency_gap_ms": args.latency_gap_ms,
                          "latency_max_seconds": args.latency_max_seconds, "settle": args.settle,
                          "repeats": args.repeats}}
    for part in parts:
        raw = {**common, "part": part, "rows": [r for r in rows if r["part"] == part]}
        if part == "enqueue":
            raw["profiles"] = profiles
        if args.quick:
            print(json.dumps(raw, indent=1)[:3000])
        else:
            raw_path(part, args.label).write_text(json.dumps(raw, indent=1) + "\n")
            print(f"wrote {raw_path(part, args.label)}")
        report(raw)
    return 0


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()


# --------------------------------------------------------------------------- report


def _stats(values: list[float], digits: int = 1) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


LABELS = {"taskmq": "django_taskmq", "taskmq-relaxed": "django_taskmq, `durable_outcomes` False", "taskmq-orm": "Django ORM `Job.objects.create` (same row)",
          "djangoq2": "django-q2 `async_task`", "djangoq2-tuned": "django-q2 `async_task`, CONN_MAX_AGE=60",
          "dtdb": "django-tasks-db `Task.enqueue`", "steady-queue": "Steady Queue `Task.enqueue` (Django 6)",
          "celery": "Celery `delay`, Redis (nothing on disk)",
          "celery-durable": "Celery `delay`, Redis appendfsync always"}
SHORT = {"taskmq": "ours", "taskmq-relaxed": "ours relaxed", "celery": "Celery", "celery-durable": "Celery fsync"}
ENGINE_LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB", "redis": "Redis"}


def _metric(rows, system, engine, key):
    return [r["metrics"].get(key) for r in rows if r["ok"] and (r["system"], r["engine"]) == (system, engine)]


def _load_line(raw: dict) -> str:
    foreign = [r["load"]["foreign_cores"] for r in raw["rows"]]
    loaded = statistics.median(foreign) > LOADED_CORES if foreign else False
    return (f"{raw['runs']} interleaved rounds (every case of {', '.join(raw['parts_run_together'])} once per round, "
            f"shuffled; seed {raw['seed']}), commit {raw['commit']}, {raw['date']}, {raw['cpus']} CPUs. Foreign CPU "
            f"load during these runs (other programs on the machine, in cores of {raw['cpus']}): median "
            f"{_stats(foreign, 2)}" + (": **measured on a loaded machine**, absolute figures are pessimistic; "
                                      "compare the systems with each other." if loaded else "."))


def report(raw: dict) -> None:
    """Print the markdown of a part's ARCHIVE.md section: median (min–max) over the rounds."""
    rows, part = raw["rows"], raw["part"]
    print(_load_line(raw))
    print()
    pairs = sorted({(r["system"], r["engine"]) for r in rows},
                   key=lambda p: (list(LABELS).index(p[0]), list(ENGINE_LABELS).index(p[1])))
    if part == "latency":
        o = raw["options"]
        settings = raw.get("durable_redis") or {}
        print(f"Idle cluster, up to {o['latency_jobs']} single jobs {o['latency_gap_ms']:g} ms apart for at most "
              f"{o['latency_max_seconds']:g} s per run (README.md, \"latency\"). Durable Redis: "
              + ", ".join(f"`{k} {v!r}`" if k == "save" else f"`{k} {v}`" for k, v in settings.items())
              + "; the machine's Redis keeps nothing on disk. Goal: django_taskmq's enqueue -> visible p50 "
              "at or below durable Celery's, on both engines. ms:")
        print()
        print("| system | engine | runs ok | enqueue -> visible p50 | p99 | enqueue -> task start p50 | "
              "enqueue returned (its commit) -> task start p50 | enqueue call p50 | goal |")
        print("|---|---|---|---|---|---|---|---|---|")
        durable = _median(_metric(rows, "celery-durable", "redis", "visible_p50_ms"))
        default = _median(_metric(rows, "celery", "redis", "visible_p50_ms"))
        for system, engine in pairs:
            got = [r for r in rows if r["ok"] and (r["system"], r["engine"]) == (system, engine)]
            tried = [r for r in rows if (r["system"], r["engine"]) == (system, engine)]
            p50 = _metric(rows, system, engine, "visible_p50_ms")
            goal = "–"
            if system == "taskmq" and p50 and durable is not None:
                goal = "met" if _median(p50) <= durable else "**not met**"
            elif system == "taskmq-relaxed" and p50 and default is not None:
                goal = "met" if _median(p50) <= min(RELAXED_GOAL_MS, default) else "**not met**"
            call_p50 = [r["details"]["enqueue_call"]["p50_ms"] for r in got]
            print(f"| {LABELS[system].split(' `')[0] if not system.startswith('taskmq') else LABELS[system]}"
                  f"{', Redis appendfsync always' if system == 'celery-durable' else ''} | {ENGINE_LABELS[engine]} | "
                  f"{len(got)}/{len(tried)} | {_stats(p50, 2)} | {_stats(_metric(rows, system, engine, 'visible_p99_ms'), 2)} | "
                  f"{_stats(_metric(rows, system, engine, 'start_p50_ms'), 2)} | "
                  f"{_stats(_metric(rows, system, engine, 'start_after_commit_p50_ms'), 2)} | {_stats(call_p50, 2)} | {goal} |")
        if any(r["system"] == "taskmq-relaxed" for r in rows):
            print()
            print(f"Goal of `durable_outcomes` False: visible p50 <= {RELAXED_GOAL_MS:g} ms on both engines and below "
                  "Celery's default (nothing on disk) in the same run. At equal load: the runs of one round follow "
                  "each other within a minute or two; each round's visible p50 (ms) and the foreign load of its run "
                  "(cores), then ours divided by Celery's default of the same round (below 1: ours faster):")
            print()
            print("| round | " + " | ".join(f"{SHORT[s]} {ENGINE_LABELS[e]}" for s, e in pairs) + " | " +
                  " | ".join(f"{SHORT[s]} {ENGINE_LABELS[e]} / Celery" for s, e in pairs if s.startswith("taskmq"))
                  + " |")
            print("|---" * (1 + len(pairs) + sum(1 for s, _ in pairs if s.startswith("taskmq"))) + "|")
            for round_ in sorted({r["round"] for r in rows}):
                by = {(r["system"], r["engine"]): r for r in rows if r["round"] == round_ and r["ok"]}
                cells = [f"{by[p]['metrics']['visible_p50_ms']:.2f} ({by[p]['load']['foreign_cores']:.2f})"
                         if p in by else "–" for p in pairs]
                celery = by.get(("celery", "redis"))
                ratios = [f"{by[p]['metrics']['visible_p50_ms'] / celery['metrics']['visible_p50_ms']:.2f}"
                          if p in by and celery else "–" for p in pairs if p[0].startswith("taskmq")]
                print(f"| {round_} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    elif part == "enqueue":
        paired = [r for r in rows if r.get("variant") == "paired"]
        rows = [r for r in rows if not r.get("variant")]
        print(f"Goal: django_taskmq's `async_task()` at >= {ORM_GOAL_PCT:g} % of the ORM's jobs/s on each engine. "
              "Decided in the paired runs: one process, one fresh database, alternating blocks of 100 `async_task()` "
              "calls and 100 `Job.objects.create` of the same row (taskmq, orm, orm, taskmq, ...), "
              f"{raw['options']['n']} calls each, so both meet the same machine load:")
        print()
        print("| engine | runs ok | django_taskmq jobs/s | ORM create jobs/s | django_taskmq as % of the ORM | goal |")
        print("|---|---|---|---|---|---|")
        engines = [e for e in ENGINE_LABELS if any(r["engine"] == e for r in raw["rows"])]
        for engine in engines:
            got = [r for r in paired if r["ok"] and r["engine"] == engine]
            tried = [r for r in paired if r["engine"] == engine]
            if not tried:
                continue
            pct = [r["metrics"]["pct_of_orm"] for r in got]
            goal = ("met" if _median(pct) >= ORM_GOAL_PCT else "**not met**") if pct else "–"
            print(f"| {ENGINE_LABELS[engine]} | {len(got)}/{len(tried)} | "
                  f"{_stats([r['metrics']['jobs_per_s'] for r in got], 0)} | "
                  f"{_stats([r['metrics']['orm_jobs_per_s'] for r in got], 0)} | {_stats(pct, 1)} | {goal} |")
        print()
        print(f"Every system's single enqueue, a run each (README.md, \"enqueue\"): {raw['options']['n']} calls, no "
              "cluster; then, on the same database in the same run, as many single-row INSERT + COMMIT with the "
              "database's own driver (Redis: one RPUSH). The last column divides django_taskmq's jobs/s of the same "
              "round by the row's: separate runs, so the machine's load moves it more than the paired figure above.")
        print()
        print("| enqueue | engine | runs ok | jobs/s | % of raw INSERT+COMMIT | django_taskmq as % of this (per round) |")
        print("|---|---|---|---|---|---|")
        pairs = sorted({(r["system"], r["engine"]) for r in rows},
                       key=lambda p: (list(LABELS).index(p[0]), list(ENGINE_LABELS).index(p[1])))
        for system, engine in pairs:
            got = [r for r in rows if r["ok"] and (r["system"], r["engine"]) == (system, engine)]
            tried = [r for r in rows if (r["system"], r["engine"]) == (system, engine)]
            rate = _metric(rows, system, engine, "jobs_per_s")
            ours = {r["round"]: r["metrics"]["jobs_per_s"] for r in rows
                    if r["ok"] and (r["system"], r["engine"]) == ("taskmq", engine)}
            pct = [100 * ours[r["round"]] / r["metrics"]["jobs_per_s"] for r in got if r["round"] in ours]
            print(f"| {LABELS[system]} | {ENGINE_LABELS[engine]} | {len(got)}/{len(tried)} | {_stats(rate, 0)} | "
                  f"{_stats(_metric(rows, system, engine, 'pct_of_raw'), 1)} | "
                  f"{'–' if system == 'taskmq' or engine == 'redis' else _stats(pct, 1)} |")
        print()
        print("Goal: django_taskmq's single enqueue at or above every peer's on the same database (medians of "
              "the runs above; the Redis peers write to another server and are left out):")
        print()
        print("| engine | django_taskmq jobs/s | fastest peer | its jobs/s | goal |")
        print("|---|---|---|---|---|")
        for engine in engines:
            ours = _median(_metric(rows, "taskmq", engine, "jobs_per_s"))
            peers = {s: _median(_metric(rows, s, engine, "jobs_per_s")) for s, e in pairs
                     if e == engine and s not in ("taskmq", "taskmq-orm")}
            peers = {s: v for s, v in peers.items() if v is not None}
            if ours is None or not peers:
                continue
            best = max(peers, key=peers.get)
            print(f"| {ENGINE_LABELS[engine]} | {ours:.0f} | {LABELS[best]} | {peers[best]:.0f} | "
                  f"{'met' if ours >= peers[best] else '**not met**'} |")
        print()
        print("Celery's ratio is left out: its store is another server. Where django_taskmq's time goes: after the "
              f"rounds, {raw['options']['n']} `async_task()` calls and as many ORM creates ran under cProfile, one run "
              "each per engine (the profiler's overhead inflates every figure). Per engine: both totals, then "
              "django_taskmq's own functions by cumulative time (the files also hold the top entries by own and "
              "by cumulative time of every function):")
        profiles = raw.get("profiles") or {}
        for engine in engines:
            texts = {}
            for system in ("taskmq", "taskmq-orm"):
                name = profiles.get(f"{engine}/{system}")
                if name and (RESULTS_DIR / name).exists():
                    texts[system] = (name, (RESULTS_DIR / name).read_text())
            if "taskmq" not in texts:
                continue
            print()
            print(f"{ENGINE_LABELS[engine]}: " + "; ".join(
                f"[`results/{name}`](results/{name}): {text.splitlines()[0].split(': ', 1)[1]}"
                for name, text in texts.values()) + ".")
            ours = texts["taskmq"][1].split("--- django_taskmq's functions, sorted by cumulative, top 25")[-1]
            table = [line for line in ours.strip().splitlines() if line.strip() and "function calls" not in line]
            print()
            print("```")
            print("\n".join(table[:19]))
            print("```")
    else:
        o = raw["options"]
        print(f"{o['repeats']} cluster starts per run, alternating with as many bare processes of the same project "
              "and venv (exec -> `django.setup()` and one query of the job table done). Ready: exec of "
              "`manage.py qcluster` -> start of a job queued before it (README.md, \"startup\"). Ours: ready - bare, "
              f"pairwise, median per run. Goal: ours <= {READY_GOAL_MS:g} ms. ms:")
        print()
        print("| engine | runs ok | cluster ready | bare django.setup() + 1 query | ours (ready - bare) | goal |")
        print("|---|---|---|---|---|---|")
        for system, engine in pairs:
            got = [r for r in rows if r["ok"] and (r["system"], r["engine"]) == (system, engine)]
            tried = [r for r in rows if (r["system"], r["engine"]) == (system, engine)]
            ours = _metric(rows, system, engine, "ours_ms")
            goal = ("met" if _median(ours) <= READY_GOAL_MS else "**not met**") if ours else "–"
            print(f"| {ENGINE_LABELS[engine]} | {len(got)}/{len(tried)} | {_stats(_metric(rows, system, engine, 'ready_ms'))} | "
                  f"{_stats(_metric(rows, system, engine, 'bare_ms'))} | {_stats(ours)} | {goal} |")
    rows = raw["rows"]
    retried = [r for r in rows if r.get("failed_attempts")]
    if retried:
        print()
        print("Retried runs (the figures above are the retry's): " + "; ".join(
            f"round {r['round']} {r['system']}/{r['engine']}: {a['error'][:200]}"
            for r in retried for a in r["failed_attempts"]))
    failed = [r for r in rows if not r["ok"]]
    if failed:
        print()
        print("Failed runs: " + "; ".join(f"round {r['round']} {r['system']}/{r['engine']}: "
                                          f"{r['error'].splitlines()[0][:200]}" for r in failed))
    versions = {}
    for r in rows:
        if r["ok"]:
            versions.update(r.get("versions", {}))
    if versions:
        print()
        print("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".")


# --------------------------------------------------------------------------- entry point


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--runs", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--engines", default=",".join(ENGINES), help="database engines: sqlite, postgresql, mysql")
    parser.add_argument("--label", default="", help="results go to round3-<part>-<label>.json")
    parser.add_argument("-n", type=int, default=1000, help="single enqueues per enqueue run (and profile)")
    parser.add_argument("--latency-jobs", type=int, default=100)
    parser.add_argument("--latency-gap-ms", type=float, default=50)
    parser.add_argument("--latency-max-seconds", type=float, default=8)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=4, help="cluster starts (and bare processes) per ready run")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--retries", type=int, default=1, help="re-run a failed case this many times")
    parser.add_argument("--quick", action="store_true", help="do not save the results (a smoke test)")
    parser.add_argument("--fail-fast", action="store_true")
    parser.add_argument("--report", type=Path, help="print the section of saved raw results")
    # Driver mode (inside a system's venv, called by the host):
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    parser.add_argument("--paired", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log-prefix", default=str(WORK_DIR / "logs" / "manual" / "round3"), help=argparse.SUPPRESS)
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
