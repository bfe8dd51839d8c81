"""Where an idle cluster's memory goes: PSS of each process after a drain.

    .venv/bin/python benchmarks/memory.py [-n 3000] [--runs 3] [--engine sqlite,postgresql] [--threads 1,8] [--source]
    .venv/bin/python benchmarks/memory.py --ref main --label before-after   # interleaved A/B
    .venv/bin/python benchmarks/memory.py --ref main --startup 8            # and start-up time, interleaved
    .venv/bin/python benchmarks/memory.py --report benchmarks/results/memory-<label>.json

Per run: N no-op jobs queued with ``enqueue_many`` in the benchmark project
(``projects/taskmq_project``: 2 workers, ``save_limit`` 0, no worker recycling so that the
workers measured are the ones that drained), then ``manage.py qcluster --threads T`` until no job
is left unfinished, two seconds of idling, then ``/proc/<pid>/smaps_rollup`` of every process of
the tree, named by order of birth (the sentinel forks the monitor, the pusher, then the workers).
PSS splits a page shared by k processes into k parts, so the sum over the tree is what the cluster
costs the machine; ``Private_Dirty`` is what a process wrote for itself (its own heap, and inherited
pages that copy-on-write unshared); ``Pss_File`` is the mapped code (python, .so files).
With ``--ref COMMIT`` each round also runs that commit's ``django_taskmq`` (exported like
``cpu_by_process.py`` does), interleaved with the working tree; the drain's rate is recorded too,
since a change that saves memory by costing throughput is no win.
With ``--startup N``, N more rounds time ``qcluster --burst`` of one job from exec to exit for
every code (the imports moved before the fork must not delay the first job).
Raw rows: ``benchmarks/results/memory-<label>.json``; ``report.py`` renders the table of
``memory-latest.json`` in ARCHIVE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from cpu_by_process import PREPARE, PROJECT, _create_pg_database, export  # noqa: E402
from hostload import LoadMeter  # noqa: E402

T = TypeVar("T")

# The sentinel's children in order of birth (Sentinel.spawn_all): the pusher, the workers, then these.
LAST_BORN = ("monitor", "scheduler")
FIELDS = ("Pss", "Pss_Anon", "Pss_File", "Private_Dirty", "Private_Clean", "Shared_Dirty", "Shared_Clean", "Rss")

SETTINGS = """
from taskmq_project.settings import *  # noqa: F401,F403
TASKMQ = dict(TASKMQ, save_limit=0, recycle=10**9)
"""

# The floor of the cluster's shape: a process of the same project after django.setup() and one
# query of the job table forks as many children as the cluster has (argv[1]), each of which runs
# the same query on its own connection; "ready" once they all have, then all wait for stdin's end.
FLOOR = """
import gc, os, sys
import django
django.setup()
from django.db import connections
from django_taskmq.models import Job

def one_query():
    list(Job.objects.all()[:1])

one_query()
connections.close_all()  # each child connects afresh, as the cluster's do
gc.freeze()  # as the sentinel does before each fork
ready_r, ready_w = os.pipe()
hold_r, hold_w = os.pipe()
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        os.close(hold_w)
        one_query()
        os.write(ready_w, b"x")
        os.read(hold_r, 1)  # EOF: the parent is done
        os._exit(0)
os.close(hold_r)
for _ in range(int(sys.argv[1])):
    os.read(ready_r, 1)
print("ready", flush=True)
sys.stdin.read()
os.close(hold_w)
for _ in range(int(sys.argv[1])):
    os.wait()
"""

# Prints the number of unfinished jobs each time a line is read on stdin: one Django start-up per run.
WAITER = """
import sys
import django
django.setup()
from django.db import connection
from django_taskmq.models import FINAL_STATES, Job
for _ in sys.stdin:
    print(Job.objects.exclude(state__in=FINAL_STATES).count(), flush=True)
    connection.close()
"""


def export_worktree(bytecode: bool = True) -> Path:
    """A copy of the working tree's ``django_taskmq`` (uncommitted edits included) in ``.work/``,
    compiled to bytecode as pip compiles what it installs; with ``bytecode`` False, source only.

    Both codes of a comparison then import from a plain directory first on ``PYTHONPATH``. Without
    bytecode (``PYTHONDONTWRITEBYTECODE`` is set on this machine, so the working tree has none) every
    process start compiles django_taskmq: that left the whole cluster about 5 MiB larger here.
    """
    target = HERE / ".work" / ("tree-worktree" if bytecode else "tree-worktree-source")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(HERE.parent / "django_taskmq", target / "django_taskmq",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if bytecode:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(target / "django_taskmq")], check=True)
    return target


def smaps_rollup(pid: int) -> dict[str, int] | None:
    """The kB fields of ``/proc/<pid>/smaps_rollup`` named in FIELDS, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            lines = f.readlines()
    except OSError:
        return None
    out = {}
    for line in lines[1:]:
        key, _, rest = line.partition(":")
        if key in FIELDS:
            out[key] = int(rest.split()[0])
    return out


PFN_MASK = (1 << 55) - 1


def _anonymous_pages(pid: int) -> dict[int, int]:
    """Resident anonymous pages of ``pid`` (heap, stack, anonymous mappings): address -> page frame.
    Empty if not readable; frames read as 0 without CAP_SYS_ADMIN (then nothing can be told apart)."""
    found: dict[int, int] = {}
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for line in maps:
                parts = line.split()
                if len(parts) > 5 and parts[5] not in ("[heap]", "[stack]"):
                    continue  # a file's pages are code and data, accounted as Pss_File
                low, high = (int(x, 16) for x in parts[0].split("-"))
                pagemap.seek(low // 4096 * 8)
                for i, (entry,) in enumerate(struct.iter_unpack("Q", pagemap.read((high - low) // 4096 * 8))):
                    if entry >> 63:  # present in memory
                        found[low + i * 4096] = entry & PFN_MASK
    except OSError:
        return {}
    return found


def copy_on_write(names: dict[int, str]) -> dict[str, dict[str, int]] | None:
    """Each process's resident anonymous memory (KiB) split by what fork made of it: pages still
    shared with another process of the cluster; its own pages at an address where the sentinel has
    one too (inherited, then copied by a write on either side: a reference count, a free slot of
    the inherited heap taken by a new object); its own pages elsewhere (new memory).
    None when page frames cannot be read (they need root)."""
    pages = {pid: _anonymous_pages(pid) for pid in names}
    sentinel = next(pid for pid, name in names.items() if name == "sentinel")
    if not pages[sentinel] or not any(pages[sentinel].values()):
        return None
    users: dict[int, int] = {}
    for mine in pages.values():
        for frame in mine.values():
            users[frame] = users.get(frame, 0) + 1
    out = {}
    for pid, mine in pages.items():
        split = {"shared": 0, "copied": 0, "new": 0}
        for address, frame in mine.items():
            kind = "shared" if users[frame] > 1 else "copied" if address in pages[sentinel] else "new"
            split[kind] += 4
        out[names[pid]] = split
    return out


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2:].split()[1])


def children(root: int) -> list[int]:
    """The pids of ``root``'s children, in order of birth (pids were not recycled in between)."""
    return sorted(p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if _parent(p) == root)


def roles(root: int) -> dict[int, str]:
    """The cluster's processes by pid, named: sentinel, pusher, worker-0, worker-1..., monitor, scheduler."""
    born = children(root)
    names = {root: "sentinel", born[0]: "pusher"}
    workers = born[1:len(born) - len(LAST_BORN)]
    names.update((pid, f"worker-{i}") for i, pid in enumerate(workers))
    names.update(zip(born[len(born) - len(LAST_BORN):], LAST_BORN))
    return names


def floor_once(tree: Path | None, engine: str, settings_dir: str, shape: int) -> dict:
    """PSS of the floor of the cluster's shape (see FLOOR) with ``shape`` children, after the same
    job table was prepared (an empty one: the floor runs no job)."""
    with tempfile.TemporaryDirectory() as work:
        env = prepared(tree, engine, settings_dir, work, 0)
        floor = subprocess.Popen([sys.executable, "-c", FLOOR, str(shape)], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            if floor.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the floor exited with {floor.wait()}")
            time.sleep(2.0)  # as the cluster idles before its measure
            pids = [floor.pid, *children(floor.pid)]
            processes = {("parent" if i == 0 else f"child-{i}"): smaps_rollup(pid) for i, pid in enumerate(pids)}
        finally:
            floor.stdin.close()
            floor.wait(60)
    processes = {name: fields for name, fields in processes.items() if fields is not None}
    return {"engine": engine, "children": len(processes) - 1, "pss_mib": sum(f["Pss"] for f in processes.values()) / 1024,
            "kib_by_process": processes}


def prepared(tree: Path | None, engine: str, settings_dir: str, work: str, n: int) -> dict[str, str]:
    """The environment of a cluster (or floor) of ``tree`` on ``engine``, its database migrated in
    ``work`` (SQLite) or ``bench_memory`` (the servers) and ``n`` no-op jobs queued."""
    env = dict(os.environ, BENCH_ENGINE=engine, DJANGO_SETTINGS_MODULE="memory_settings")
    env["PYTHONPATH"] = os.pathsep.join(([str(tree)] if tree else []) + [str(PROJECT), str(HERE), settings_dir])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a source-only tree stays so
    env["BENCH_SQLITE_PATH"] = os.path.join(work, "db.sqlite3")
    env.setdefault("BENCH_PG_NAME", "bench_memory")
    env.setdefault("BENCH_MYSQL_NAME", "bench_memory")
    if engine == "postgresql":
        _create_pg_database(env["BENCH_PG_NAME"])
    elif engine == "mysql":
        import MySQLdb
        from benchdb import mysql_params

        params = mysql_params()
        server = MySQLdb.connect(host=params["host"], port=int(params["port"]), user=params["user"],
                                 passwd=params["password"])
        server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {env['BENCH_MYSQL_NAME']}")
        server.close()
    subprocess.run([sys.executable, "-c", PREPARE, str(n)], env=env, check=True)
    return env


def run_once(tree: Path | None, n: int, engine: str, threads: int, settings_dir: str) -> dict:
    with tempfile.TemporaryDirectory() as work:
        env = prepared(tree, engine, settings_dir, work, n)
        waiter = subprocess.Popen([sys.executable, "-c", WAITER], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        started = time.perf_counter()
        cluster = subprocess.Popen([sys.executable, str(PROJECT / "manage.py"), "qcluster", "--threads", str(threads)],
                                   env=env, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while True:
                if cluster.poll() is not None:
                    raise RuntimeError(f"qcluster exited with {cluster.returncode}")
                waiter.stdin.write("\n")
                waiter.stdin.flush()
                if int(waiter.stdout.readline()) == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("not drained in 600 s")
                time.sleep(0.1)
            drained = time.perf_counter() - started
            time.sleep(2.0)  # idle: the last outcomes recorded, buffers given back
            names = roles(cluster.pid)
            processes = {name: smaps_rollup(pid) for pid, name in names.items()}
            cow = copy_on_write(names)
        finally:
            waiter.stdin.close()
            waiter.wait()
            cluster.send_signal(signal.SIGTERM)
            try:
                cluster.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(cluster.pid, signal.SIGKILL)
                cluster.wait()
    processes = {name: fields for name, fields in processes.items() if fields is not None}
    pss = sum(f["Pss"] for f in processes.values()) / 1024
    return {"n": n, "engine": engine, "workers": sum(name.startswith("worker") for name in processes),
            "threads": threads, "pss_mib": pss, "drain_s": drained, "jobs_per_s_incl_startup": n / drained,
            "kib_by_process": processes, "copy_on_write_kib": cow}


def startup_once(tree: Path | None, engine: str, settings_dir: str) -> float:
    """Seconds from exec to exit of ``qcluster --burst`` with one no-op job queued."""
    with tempfile.TemporaryDirectory() as work:
        env = prepared(tree, engine, settings_dir, work, 1)
        started = time.perf_counter()
        subprocess.run([sys.executable, str(PROJECT / "manage.py"), "qcluster", "--burst"], env=env, check=True,
                       stderr=subprocess.DEVNULL)
        return time.perf_counter() - started


def group(name: str) -> str:
    return "worker" if name.startswith("worker") else name


def report(rows: list[dict]) -> None:
    """Median (min-max) of the cluster's PSS and its parts, per code, engine and threads."""
    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    for key in dict.fromkeys((r["code"], r["engine"], r["threads"]) for r in rows):
        mine = [r for r in rows if (r["code"], r["engine"], r["threads"]) == key]
        print(f"{key[0]} {key[1]} {mine[0]['workers']} workers x {key[2]} threads ({len(mine)} runs): "
              f"PSS {cell([r['pss_mib'] for r in mine])} MiB, drain {cell([r['jobs_per_s_incl_startup'] for r in mine])} "
              "jobs/s incl. start-up")
        for role in dict.fromkeys(group(p) for r in mine for p in r["kib_by_process"]):
            parts = []
            for field in ("Pss", "Pss_Anon", "Pss_File", "Private_Dirty"):
                values = [sum(f[field] for p, f in r["kib_by_process"].items() if group(p) == role) / 1024 for r in mine]
                parts.append(f"{field} {cell(values)}")
            print(f"  {role:8s} " + "; ".join(parts))


def markdown(raw: dict) -> list[str]:
    """ARCHIVE.md's "where the memory goes" tables: per engine and threads, the parts of the
    working tree's cluster PSS by process, then every code's total (median (min-max), MiB)."""
    rows = raw["rows"]

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    def mib(row: dict, role: str, field: str) -> float:
        return sum(f[field] for p, f in row["kib_by_process"].items() if group(p) == role) / 1024

    loads = [r["host_load"]["foreign_cores"] for r in rows if "host_load" in r]
    lines = [f"Raw results: [`results/memory-latest.json`](results/memory-latest.json) ({raw['date']}, "
             f"django_taskmq of commit {raw['worktree_head']}{' with uncommitted edits' if raw['worktree_dirty'] else ''}"
             f"); measured with `{raw['command'].replace('benchmarks/memory.py', '.venv/bin/python benchmarks/memory.py')}`, "
             "how: the script's docstring. An idle cluster after draining no-op jobs, "
             f"{len({r['round'] for r in rows})} interleaved rounds; foreign load "
             f"{cell(loads) if loads else '(not recorded)'} cores of 2. Cells: median (min-max), MiB; "
             "\"workers\" sums the workers. Private dirty is what a process wrote for itself after the fork "
             "(its own heap, and inherited pages that copy-on-write copied); file is mapped code. The last three "
             "columns split resident anonymous memory by page frame (`/proc/<pid>/pagemap`): shared with another "
             "process of the cluster; a process's own page at an address where the sentinel has one as well "
             "(inherited, then copied by a write on either side: a reference count, an inherited free slot taken "
             "by a new object; for the sentinel, all its own pages); its own page elsewhere (new memory)."]
    for engine, threads in dict.fromkeys((r["engine"], r["threads"]) for r in rows):
        mine = [r for r in rows if (r["engine"], r["threads"]) == (engine, threads) and r["code"] == "worktree"]
        if not mine:
            continue
        cow = [r for r in mine if r.get("copy_on_write_kib")]

        def split(role: str | None, kind: str) -> str:
            return cell([sum(v[kind] for p, v in r["copy_on_write_kib"].items() if role in (None, group(p))) / 1024
                         for r in cow])

        lines += ["", f"**{engine}, {mine[0]['workers']} workers x {threads} thread{'s' if threads > 1 else ''}**", "",
                  "| process | PSS | of which anonymous | of which file | private dirty |"
                  + (" anonymous: shared | own, copied | own, new |" if cow else ""),
                  "|---|---|---|---|---|" + ("---|---|---|" if cow else "")]
        for role in dict.fromkeys(group(p) for r in mine for p in r["kib_by_process"]):
            lines.append(f"| {role}{'s' if role == 'worker' else ''} | " + " | ".join(
                cell([mib(r, role, field) for r in mine]) for field in ("Pss", "Pss_Anon", "Pss_File", "Private_Dirty"))
                + " |" + ("".join(f" {split(role, kind)} |" for kind in ("shared", "copied", "new")) if cow else ""))
        lines.append(f"| **cluster** | **{cell([r['pss_mib'] for r in mine])}** | "
                     + " | ".join(cell([sum(f[field] for f in r["kib_by_process"].values()) / 1024 for r in mine])
                                  for field in ("Pss_Anon", "Pss_File", "Private_Dirty")) + " |"
                     + (" | " + " | ".join(split(None, kind) for kind in ("copied", "new")) + " |" if cow else ""))
    lines += ["", "Cluster PSS by code (`worktree-source`: the same code without bytecode, compiled at every "
              "start; drain rate: jobs/s including start-up, for the record, not a benchmark of speed):", "",
              "| engine | workers x threads | code | cluster PSS | drain jobs/s |", "|---|---|---|---|---|"]
    for key in dict.fromkeys((r["engine"], r["threads"], r["code"]) for r in rows):
        mine = [r for r in rows if (r["engine"], r["threads"], r["code"]) == key]
        lines.append(f"| {key[0]} | {mine[0]['workers']} x {key[1]} | {key[2]} | {cell([r['pss_mib'] for r in mine])} | "
                     f"{statistics.median(r['jobs_per_s_incl_startup'] for r in mine):.0f} |")
    startup = raw.get("startup_rows") or []
    if startup:
        lines += ["", f"Start-up, each code in turn ({len({r['round'] for r in startup})} rounds): `qcluster --burst` "
                  "with one no-op job queued, from exec to exit, ms:", "",
                  "| engine | code | exec to exit |", "|---|---|---|"]
        for engine, code in dict.fromkeys((r["engine"], r["code"]) for r in startup):
            values = [1000 * r["seconds"] for r in startup if (r["engine"], r["code"]) == (engine, code)]
            lines.append(f"| {engine} | {code} | {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f}) |")
    return lines


#: Issue 50's goal: the cluster's PSS within this factor of the floor of its shape (see FLOOR).
FLOOR_GOAL = 1.10


def floor_markdown(raw: dict, name: str) -> list[str]:
    """RESULTS.md's table of a ``--floor`` run: per engine, each code's cluster PSS against the floor
    of the same shape, measured in the same rounds; then PSS by process (median, MiB)."""
    rows, floors = raw["rows"], raw["floor_rows"]

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"

    loads = [r["host_load"]["foreign_cores"] for r in rows + floors]
    codes = list(dict.fromkeys(r["code"] for r in rows))
    shape = floors[0]["children"] + 1
    lines = [f"Raw results: [`results/{name}`](results/{name}) ({raw['date']}, django_taskmq of commit "
             f"{raw['worktree_head']}{' with uncommitted edits' if raw['worktree_dirty'] else ''}); measured with "
             f"`{raw['command'].replace('benchmarks/memory.py', '.venv/bin/python benchmarks/memory.py')}`, "
             f"{len({r['round'] for r in rows})} interleaved rounds, foreign load {cell(loads)} cores of 2. "
             f"The cluster: 2 workers of one thread, `save_limit` 0, idle 2 s after draining {rows[0]['n']} no-op "
             f"jobs; {shape} processes (sentinel, pusher, 2 workers, monitor, scheduler). The floor of its shape: a "
             f"process of the same project after `django.setup()` and one query of the job table that forks "
             f"{shape - 1} children, each of which runs the same query on its own connection ({shape} processes; "
             "the sentinel's bookkeeping thread has no counterpart there). PSS summed over the processes, MiB, "
             f"median (min–max); goal: within {FLOOR_GOAL:.2f}x of the floor.", "",
             "| engine | floor | " + " | ".join(f"cluster, {c}" for c in codes) + " | "
             + " | ".join(f"{c} / floor" for c in codes) + " |",
             "|---|---|" + "---|" * (2 * len(codes))]
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    for engine in engines:
        floor = [r["pss_mib"] for r in floors if r["engine"] == engine]
        clusters = {c: [r["pss_mib"] for r in rows if (r["engine"], r["code"]) == (engine, c)] for c in codes}
        ratios = [statistics.median(clusters[c]) / statistics.median(floor) for c in codes]
        lines.append(f"| {engine} | {cell(floor)} | " + " | ".join(cell(clusters[c]) for c in codes) + " | "
                     + " | ".join(f"{x:.2f}x {'met' if x <= FLOOR_GOAL else 'not met'}" for x in ratios) + " |")
    roles = list(dict.fromkeys(p for r in rows for p in r["kib_by_process"]))
    lines += ["", "PSS by process, median MiB (the floor: its parent, then the mean of its children):", "",
              "| engine | code | " + " | ".join(roles) + " |", "|---|---|" + "---|" * len(roles)]
    for engine in engines:
        for code in codes:
            mine = [r for r in rows if (r["engine"], r["code"]) == (engine, code)]
            lines.append(f"| {engine} | {code} | " + " | ".join(
                f"{statistics.median(r['kib_by_process'][role]['Pss'] / 1024 for r in mine):.1f}" for role in roles)
                + " |")
        mine = [r for r in floors if r["engine"] == engine]
        parent = statistics.median(r["kib_by_process"]["parent"]["Pss"] / 1024 for r in mine)
        child = statistics.median(statistics.mean(f["Pss"] for p, f in r["kib_by_process"].items() if p != "parent")
                                  / 1024 for r in mine)
        lines.append(f"| {engine} | floor | {parent:.1f} | " + " | ".join(f"{child:.1f}" for _ in roles[1:]) + " |")
    return lines


def save(label: str, rows: list[dict], startup_rows: list[dict], floor_rows: list[dict]) -> Path:
    """Write what was measured so far to ``results/memory-<label>.json``; return its path."""
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=HERE.parent, capture_output=True,
                          text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "django_taskmq"], cwd=HERE.parent,
                                capture_output=True, text=True).stdout.strip())
    out = HERE / "results" / f"memory-{label}.json"
    out.write_text(json.dumps({"command": " ".join(sys.argv), "worktree_head": head, "worktree_dirty": dirty,
                               "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows,
                               "startup_rows": startup_rows, "floor_rows": floor_rows},
                              indent=1) + "\n")
    return out


def retried(label: str, measure: Callable[[], T]) -> T | None:
    """``measure()``, up to three times (a database server restarted meanwhile: a shared machine);
    None when every attempt failed."""
    for _ in range(3):
        try:
            return measure()
        except Exception as exc:
            print(f"{label}: {exc!r}; again in 10 s", flush=True)
            time.sleep(10)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", default="sqlite,postgresql", help="sqlite, postgresql or both, comma-separated")
    parser.add_argument("--threads", default="1,8", help="threads per worker, comma-separated")
    parser.add_argument("--ref", help="also run this commit's django_taskmq, interleaved")
    parser.add_argument("--source", action="store_true",
                        help="also run the working tree without bytecode (compiled from source at every start)")
    parser.add_argument("--startup", type=int, default=0, metavar="ROUNDS",
                        help="also time qcluster --burst of one job, this many rounds of every code")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the floor of the cluster's shape (see FLOOR), interleaved")
    parser.add_argument("--label", default="latest")
    parser.add_argument("--report", help="print the table of a results file and exit")
    args = parser.parse_args()
    if args.report:
        report(json.loads(Path(args.report).read_text())["rows"])
        return
    settings_dir = tempfile.mkdtemp()
    Path(settings_dir, "memory_settings.py").write_text(SETTINGS)
    codes: list[tuple[str, Path | None]] = [("worktree", export_worktree())]
    if args.ref:
        codes.append((args.ref, export(args.ref)))
    if args.source:
        codes.append(("worktree-source", export_worktree(bytecode=False)))
    rows: list[dict] = []
    floor_rows: list[dict] = []
    shape = 2 + 1 + len(LAST_BORN)  # the cluster's children: 2 workers, the pusher, the monitor, the scheduler
    for round_ in range(1, args.runs + 1):
        for engine in args.engine.split(","):
            cases = [(code, tree, threads) for threads in map(int, args.threads.split(",")) for code, tree in codes]
            if args.floor:
                cases.append(("floor", codes[0][1], 0))
            for code, tree, threads in (cases if round_ % 2 else cases[::-1]):
                def measured() -> dict:
                    with LoadMeter() as load:
                        if code == "floor":
                            row = floor_once(tree, engine, settings_dir, shape)
                        else:
                            row = run_once(tree, args.n, engine, threads, settings_dir)
                    return dict(row, host_load=load.result)

                row = retried(f"round {round_} {code} {engine} t{threads}", measured)
                if row is None:
                    continue
                row.update(code=code, round=round_)
                (floor_rows if code == "floor" else rows).append(row)
                save(args.label, rows, [], floor_rows)
                print(f"round {round_} {code} {engine} t{threads}: PSS {row['pss_mib']:.1f} MiB "
                      + " ".join(f"{p}:{f['Pss'] / 1024:.1f}" for p, f in row["kib_by_process"].items())
                      + (f" | {row['jobs_per_s_incl_startup']:.0f} jobs/s" if code != "floor" else "")
                      + f" | foreign load {row['host_load']['foreign_cores']:.2f} cores", flush=True)
    startup_rows = []
    for round_ in range(1, args.startup + 1):
        for engine in args.engine.split(","):
            for code, tree in (codes if round_ % 2 else codes[::-1]):
                seconds = retried(f"start-up round {round_} {code} {engine}",
                                  lambda: startup_once(tree, engine, settings_dir))
                if seconds is None:
                    continue
                startup_rows.append({"code": code, "engine": engine, "round": round_, "seconds": seconds})
                save(args.label, rows, startup_rows, floor_rows)
                print(f"start-up round {round_} {code} {engine}: {startup_rows[-1]['seconds'] * 1000:.0f} ms", flush=True)
    print(f"raw rows: {save(args.label, rows, startup_rows, floor_rows)}")
    report(rows)


if __name__ == "__main__":
    main()
