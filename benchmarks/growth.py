"""Cost that stays flat as work grows (issue 50): each large case against its small case, one run.

    .venv/bin/python benchmarks/growth.py [--runs 3] [--engines sqlite,postgresql,mysql] [--ref COMMIT]
    .venv/bin/python benchmarks/growth.py --quick
    python3 benchmarks/growth.py --report benchmarks/results/growth.json

Two comparisons, each measured through the broker's public calls (``has_ready``: the pusher's look
for work; ``reserve``: the claim) and the public enqueue (``async_task``), in a child process per
measurement on a fresh database of the test settings (``tests.settings_<engine>``, database
``bench_held_keys``, made by ``held_keys.py``'s ``fresh_database``), the cases shuffled in each
round and ``--ref``'s ``django_taskmq`` (exported with ``git archive``) interleaved with the working
tree:

* **queues**: ``TASKMQ['queues']`` holds 1 queue, or 1,000 queues with work (40 jobs each) in 10 of
  them; ``--ready`` ready jobs in all. The cluster claims over every queue it serves: ``has_ready``
  and ``reserve`` name all of them.
* **delayed**: none, or ``--delayed`` jobs not due for an hour queued first (so they sort before the
  ready ones: the claim's index walks them in id order), then the ready jobs. Also the claim and the
  look when nothing is ready (an idle cluster's), and a single enqueue.

Before the timings the broker's own ``analyze`` runs, as the cluster's scheduler process would.
Raw results: ``results/growth.json``; ``--report`` prints the tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "growth.json"
sys.path[:0] = [str(HERE)]

from cpu_by_process import export  # noqa: E402
from held_keys import fresh_database  # noqa: E402  (its database, bench_held_keys)
from hostload import LoadMeter  # noqa: E402

CHILD = r"""
import json, os, sys, time
import django
django.setup()
import django_taskmq
from django.conf import settings
from django.core.management import call_command
from django_taskmq import async_task, enqueue_many
from django_taskmq.brokers import get_broker

tree = os.environ.get("GROWTH_TREE")
assert not tree or django_taskmq.__file__.startswith(tree), django_taskmq.__file__
call_command("migrate", verbosity=0)
case, size, ready, samples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
queues = sorted(settings.TASKMQ["queues"])  # the delayed case's: "default" only
busy = queues[:10] if case == "queues" else queues[:1]
if case == "delayed" and size:
    for start in range(0, size, 10000):
        enqueue_many("tests.tasks.noop", [()] * min(10000, size - start), queue=busy[0], delay=3600)
for queue in busy:
    enqueue_many("tests.tasks.noop", [()] * (ready // len(busy)), queue=queue)
broker = get_broker()
broker.analyze()  # the statistics as the cluster's scheduler process leaves them

def timed(call, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append(round((time.perf_counter() - t) * 1000, 3))
    return out

times = {}
times["has_ready_ms"] = timed(lambda: broker.has_ready(queues), samples)
claimed = []
times["reserve_ms"] = timed(lambda: claimed.extend(broker.reserve(queues, 1, 3600, "bench-owner")), samples)
assert len(claimed) == samples, len(claimed)
if case == "delayed":
    times["enqueue_ms"] = timed(lambda: async_task("tests.tasks.noop", queue=busy[0], delay=7200), samples)
    while broker.reserve(queues, 500, 3600, "bench-owner"):
        pass
    times["idle_has_ready_ms"] = timed(lambda: broker.has_ready(queues), samples)
    times["idle_reserve_ms"] = timed(lambda: broker.reserve(queues, 1, 3600, "bench-owner"), samples)
print(json.dumps(times))
"""

def queues_override(case: str, size: int) -> dict:
    if case != "queues":
        return {"queues": {"default": {}}}
    return {"queues": {f"q{i:04d}": {} for i in range(size)}, "default_queue": "q0000"}


def measure_one(engine: str, case: str, size: int, tree: Path | None, args: argparse.Namespace) -> dict:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=f"tests.settings_{engine}", TASKMQ_DB_NAME=fresh_database(engine),
               PYTHONPATH=os.pathsep.join(([str(tree)] if tree else []) + [str(ROOT)]), GROWTH_TREE=str(tree or ""),
               TASKMQ_OVERRIDES=json.dumps(queues_override(case, size)))
    done = subprocess.run([sys.executable, "-c", CHILD, case, str(size), str(args.ready), str(args.samples)],
                          # not the repository's root: "-c" puts the working directory first on the path
                          env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{engine} {case} {size} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> dict:
    codes: list[tuple[str, Path | None]] = [("worktree", None)] + ([(args.ref, export(args.ref))] if args.ref else [])
    sizes = {"queues": (1, 1000), "delayed": (0, args.delayed)}
    cells = [(engine, case, size, code, tree) for engine in args.engines.split(",") for case in args.cases.split(",")
             for size in sizes[case] for code, tree in codes]
    seed = int(time.time())
    shuffle = random.Random(seed)
    rows = []
    for round_ in range(1, args.runs + 1):
        order = list(cells)
        shuffle.shuffle(order)
        for engine, case, size, code, tree in order:
            with LoadMeter() as meter:
                times = measure_one(engine, case, size, tree, args)
            rows.append({"run": round_, "code": code, "engine": engine, "case": case, "size": size, **times,
                         "foreign_cores": meter.result["foreign_cores"]})
            print(f"round {round_} {engine} {case}={size} {code}: "
                  + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in times.items())
                  + f" (foreign load {meter.result['foreign_cores']} cores)", file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "django_taskmq"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip())
    return {"commit": commit + (" (with uncommitted edits)" if dirty else ""), "ref": args.ref, "seed": seed,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["benchmarks/growth.py", *sys.argv[1:]]), "runs": args.runs, "ready": args.ready,
            "samples": args.samples, "rows": rows}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def report(rows: list[dict]) -> None:
    """Print the tables of a results file's rows (markdown): per engine, case and code, the median
    of the runs' medians (their range), and the large case over the small one."""
    runs = len({r["run"] for r in rows})
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case]
        metrics = [k for k in mine[0] if k.endswith("_ms")]
        print(f"\n**{case}** (ms: median of each run's median, range over {runs} runs)\n")
        print("| engine | code | size | " + " | ".join(f"`{m[:-3]}`" for m in metrics) + " |")
        print("|---|---|---|" + "---|" * len(metrics))
        for engine in dict.fromkeys(r["engine"] for r in mine):
            for code in dict.fromkeys(r["code"] for r in mine):
                sizes = sorted({r["size"] for r in mine})
                medians = {}
                for size in sizes:
                    cell = [r for r in mine if r["engine"] == engine and r["code"] == code and r["size"] == size]
                    if not cell:
                        continue
                    medians[size] = {m: [statistics.median(r[m]) for r in cell] for m in metrics}
                    print(f"| {engine} | {code} | {size:,} | "
                          + " | ".join(_spread(medians[size][m]) for m in metrics) + " |")
                if len(medians) == 2:
                    small, large = (medians[s] for s in sizes)
                    print(f"| {engine} | {code} | ratio | " + " | ".join(
                        f"{statistics.median(large[m]) / statistics.median(small[m]):.2f}x" for m in metrics) + " |")
    loads = sorted({r["foreign_cores"] for r in rows})
    print(f"\nForeign load per run: {min(loads):g} to {max(loads):g} cores (of 2).")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql,mysql")
    parser.add_argument("--cases", default="queues,delayed")
    parser.add_argument("--delayed", type=int, default=100_000, help="jobs not due in the large delayed case")
    parser.add_argument("--ready", type=int, default=400, help="ready jobs in every case")
    parser.add_argument("--samples", type=int, default=40, help="timed calls of each kind per measurement")
    parser.add_argument("--ref", default="", help="also measure this commit's django_taskmq, interleaved")
    parser.add_argument("--quick", action="store_true", help="PostgreSQL, one round, 10,000 delayed jobs")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="print the tables of a saved results file and exit")
    args = parser.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text())["rows"])
        return 0
    if args.quick:
        args.runs, args.engines, args.delayed, args.samples = 1, "postgresql", 10_000, 20
    raw = measure(args)
    out = args.out or (Path(tempfile.gettempdir()) / "growth-quick.json" if args.quick else OUT)
    out.write_text(json.dumps(raw, indent=1) + "\n")
    report(raw["rows"])
    print(f"raw: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
