"""Run one workload against one system, inside that system's venv; print one JSON line.

Called by ``run.py``, and handy alone when debugging, e.g.::

    benchmarks/.work/venv-taskmq/bin/python benchmarks/workloads.py \\
        --system taskmq --engine sqlite --workload drain -n 200

The result is printed on stdout as ``BENCH-RESULT {json}``; everything else (Django and
system logs) goes to stderr, the cluster's output to ``<log-prefix>.cluster.log``.
Every workload starts from a fresh database (see ``databases.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from cluster import Cluster, sample_tree_cpu, tree_cpu_total, tree_memory, tree_processes, trim_log
from systems import BENCH_DIR, SYSTEMS, WORK_DIR, WORKLOADS, System, not_applicable as na_reason

RESULT_PREFIX = "BENCH-RESULT "


class WorkloadError(RuntimeError):
    """The workload could not produce a valid measurement."""


# --------------------------------------------------------------------------- helpers


def percentile(values: list[float], q: float) -> float | None:
    """Return the q-th percentile (0..100) by linear interpolation between ranks."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary_ms(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms) if ms else None,
        "mean_ms": sum(ms) / len(ms) if ms else None,
    }


def sleep_until(wall_time: float) -> None:
    delay = wall_time - time.time()
    if delay > 0:
        time.sleep(delay)


class Marks:
    """Read the ``tag -> start time`` lines that ``benchtasks.noop`` appends.

    Reads incrementally (remembering each file's offset) so waiting on a few tags stays
    cheap, and never consumes a line that has no newline yet.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: dict[str, float] = {}
        self._offsets: dict[str, int] = {}

    def poll(self) -> dict[str, float]:
        for path in self.directory.glob("marks-*.txt"):
            offset = self._offsets.get(path.name, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]
            for line in complete.decode().splitlines():
                tag, started = line.split()
                self.started[tag] = float(started)
            self._offsets[path.name] = offset + len(complete)
        return self.started

    def wait_for(self, tags, cluster: Cluster, timeout: float, interval: float = 0.005) -> None:
        missing = set(tags)
        deadline = time.time() + timeout
        while True:
            missing.difference_update(self.poll())
            if not missing:
                return
            cluster.check_alive()
            if time.time() > deadline:
                raise WorkloadError(f"{len(missing)} tagged jobs never started within {timeout:.0f}s "
                                    f"(e.g. {sorted(missing)[:3]}); log {cluster.log_path}")
            time.sleep(interval)


class Context:
    """Everything a workload needs: the system, its adapter, options and a cluster factory."""

    def __init__(self, system: System, engine: str, adapter, options: argparse.Namespace,
                 log_prefix: Path, marks_dir: Path) -> None:
        self.system = system
        self.engine = engine
        self.adapter = adapter
        self.options = options
        self.log_prefix = log_prefix
        self.marks = Marks(marks_dir)
        self.cluster_env = {**os.environ, "BENCH_MARKS_DIR": str(marks_dir), "PYTHONUNBUFFERED": "1"}
        self.cluster_info: dict = {}

    def timeout_for(self, jobs: int) -> float:
        """Generous deadline: anything slower than 10 jobs/s counts as broken."""
        return 120 + jobs / 10

    def cluster_argv(self, burst: bool = False) -> list[str]:
        """The command that starts the system's "cluster" (2 workers), as its docs say."""
        python, system = sys.executable, self.system
        manage = str(system.project_dir / "manage.py")
        if system.launcher == "qcluster":
            return [python, manage, "qcluster", *(["--burst"] if burst else [])]
        threads = self.threads
        if system.launcher == "celery":
            assert not burst, "Celery has no burst mode"
            # 2 workers: prefork 2 (its default pool); 16 threads: its thread pool of 16.
            pool = ["--pool", "prefork", "--concurrency", "2"] if threads == 2 else \
                ["--pool", "threads", "--concurrency", str(threads)]
            return [python, "-m", "celery", "-A", "celeryapp", "worker", *pool]
        if system.launcher == "db_worker":
            return ["bash", "-c", DB_WORKERS_SH, "bench-db-workers", python, manage,
                    *(["--batch"] if burst else [])]
        assert not burst, f"{system.name} has no burst mode here"
        if system.launcher == "dramatiq":
            return [python, "-m", "dramatiq", "dramatiqapp", "--processes", "2", "--threads", str(threads // 2)]
        if system.launcher == "procrastinate":
            return [python, manage, "procrastinate", "worker", "--concurrency", str(threads)]
        if system.launcher == "oban":
            from adapters.oban import dsn

            return [python, "-m", "oban", "start", "--dsn", dsn(), "--queues", f"default:{threads}"]
        if system.launcher == "steady_queue":
            return [python, manage, "steady_queue"]  # processes and threads: its settings
        raise ValueError(f"unknown launcher {system.launcher!r}")

    @property
    def threads(self) -> int:
        """Threads of the cluster: 2 (2 workers of one thread) unless BENCH_THREADS says more."""
        return int(self.cluster_env.get("BENCH_THREADS") or 2)

    def new_cluster(self, burst: bool = False, suffix: str = "") -> Cluster:
        env = dict(self.cluster_env)
        if self.system.launcher in ("celery", "dramatiq", "oban"):
            # benchtasks and the project's module; these workers import no Django.
            env["PYTHONPATH"] = f"{self.system.project_dir}{os.pathsep}{BENCH_DIR}"
        return Cluster(sys.executable, self.system.project_dir, env,
                       Path(f"{self.log_prefix}{suffix}.cluster.log"), argv=self.cluster_argv(burst))

    @contextmanager
    def running_cluster(self, suffix: str = ""):
        cluster = self.new_cluster(suffix=suffix)
        cluster.start()
        try:
            yield cluster
        finally:
            self.cluster_info.update(cluster.stop())
            self.cluster_info["cluster_log"] = str(cluster.log_path)

    def wait_drained(self, cluster: Cluster, total: int, interval: float,
                     cpu: dict | None = None) -> tuple[float, tuple]:
        """Poll until no job is pending; return (end time, (first-progress time, pending then)).

        With ``cpu`` (a dict), the CPU seconds of the cluster's whole tree are put in it at
        the first progress (``first``) and once drained (``end``).

        Failures abort at once: django-q2 keeps a failed job in its queue for a later
        retry, so "pending reaches 0" alone would just wait for the deadline.
        """
        adapter = self.adapter
        deadline = time.time() + self.timeout_for(total)
        first_progress = None
        next_check = 0.0
        while True:
            pending = adapter.pending()
            now = time.time()
            if first_progress is None and pending < total:
                first_progress = (now, pending)
                if cpu is not None:
                    cpu["first"] = tree_cpu_total(cluster.pid)
            if pending == 0:
                if cpu is not None:
                    cpu["end"] = tree_cpu_total(cluster.pid)
                    cpu.setdefault("first", cpu["end"])
                return now, first_progress or (now, 0)
            if now >= next_check:
                cluster.check_alive()
                failed = adapter.failed()
                if failed:
                    raise WorkloadError(f"{failed} jobs failed; log {cluster.log_path}")
                next_check = now + 1.0
            if now > deadline:
                raise WorkloadError(f"{pending} of {total} jobs still pending after "
                                    f"{self.timeout_for(total):.0f}s; log {cluster.log_path}")
            time.sleep(interval)

    def warm_up(self, cluster: Cluster) -> None:
        """Wait until the cluster has run one job, i.e. it is up and consuming."""
        self.adapter.enqueue(tag="warmup")
        self.marks.wait_for(["warmup"], cluster, timeout=120)


def check_stored(adapter, expected: int) -> None:
    stored = adapter.pending()
    if stored != expected:
        raise WorkloadError(f"expected {expected} queued jobs after enqueueing, found {stored}")


# --------------------------------------------------------------------------- workloads

ENQUEUE_WARMUP = 10  # untimed: first-call costs (imports, connection) are not throughput

# Two db_worker processes for django-tasks-db's "2 workers"; SIGTERM/SIGINT reach both, and
# the shell exits once both did. bash, not a Python launcher: its CPU is next to nothing.
DB_WORKERS_SH = """
py=$1; manage=$2; shift 2
"$py" "$manage" db_worker "$@" & a=$!
"$py" "$manage" db_worker "$@" & b=$!
trap 'kill -TERM $a $b 2>/dev/null' TERM INT
wait $a; wait $a; wait $b
"""


def not_applicable(reason: str, metrics: tuple[str, ...]) -> dict:
    return {"metrics": {m: None for m in metrics}, "details": {"na": reason}}


def verify_done(adapter) -> None:
    """Systems that check every result at the end (Celery) do it here."""
    verify = getattr(adapter, "verify", None)
    if verify is not None:
        try:
            verify()
        except RuntimeError as exc:
            raise WorkloadError(str(exc)) from None


def workload_enqueue(ctx: Context) -> dict:
    """(1) Enqueue N jobs one call at a time, no cluster running; then, on the same database
    in the same run, N single-row INSERT + COMMIT with the database's own driver."""
    from databases import raw_commit_rate

    n, adapter = ctx.options.n, ctx.adapter
    for _ in range(ENQUEUE_WARMUP):
        adapter.enqueue()
    t0 = time.perf_counter()
    for _ in range(n):
        adapter.enqueue()
    seconds = time.perf_counter() - t0
    check_stored(adapter, n + ENQUEUE_WARMUP)
    raw = raw_commit_rate(ctx.system, ctx.engine, n)
    rate = n / seconds
    return {"metrics": {"jobs_per_s": rate, "raw_commits_per_s": raw["commits_per_s"],
                        "pct_of_raw": 100.0 * rate / raw["commits_per_s"]},
            "details": {"n": n, "seconds": seconds, "raw": raw}}


def workload_bulk(ctx: Context) -> dict:
    """(2) Enqueue N jobs with the system's bulk API in one call (n/a without one)."""
    n, adapter = ctx.options.bulk_n, ctx.adapter
    if not adapter.supports_bulk:
        return not_applicable(na_reason(ctx.system, "bulk") or "no bulk API", ("jobs_per_s",))
    adapter.enqueue_bulk(ENQUEUE_WARMUP)
    t0 = time.perf_counter()
    adapter.enqueue_bulk(n)
    seconds = time.perf_counter() - t0
    check_stored(adapter, n + ENQUEUE_WARMUP)
    metrics = {"jobs_per_s": n / seconds}
    details = {"n": n, "seconds": seconds, "api": adapter.bulk_api}
    chunks = getattr(adapter, "enqueue_chunks", None)
    if chunks is not None:  # Celery: chunks of 100 calls per message, for information
        t0 = time.perf_counter()
        chunks(n, 100)
        details["chunks_seconds"] = time.perf_counter() - t0
        metrics["chunks_calls_per_s"] = n / details["chunks_seconds"]
    return {"metrics": metrics, "details": details}


def drain(ctx: Context, n: int, probe: int = 0) -> dict:
    """Queue ``n`` jobs, start the cluster, wait until none is pending.

    Rates: n / (drained - exec) and, "steady", the jobs still pending at the first
    progress / (drained - first progress). CPU: the whole cluster tree (exited processes
    included) from exec to drained, and from the first progress to drained, per 1000 jobs.
    With ``probe`` > 0, the same cluster then runs the latency probe on that many jobs.
    """
    adapter = ctx.adapter
    adapter.prefill([_untagged()] * n)
    check_stored(adapter, n)
    cpu: dict = {}
    probe_result = None
    with ctx.running_cluster() as cluster:
        # Polled every 10 ms (50 ms above 5000 jobs: counting a large backlog that often
        # would load the database the cluster is draining; the error stays under 2 %).
        interval = 0.01 if n <= 5000 else 0.05
        t_end, (t_first, pending_at_first) = ctx.wait_drained(cluster, n, interval=interval, cpu=cpu)
        if probe:
            time.sleep(ctx.options.settle)
            probe_result = latency_probe(ctx, cluster, probe)
    verify_done(adapter)
    seconds = t_end - cluster.started_at
    steady_seconds = t_end - t_first
    metrics = {
        "jobs_per_s": n / seconds,
        # After the first job is recorded: throughput without the start-up cost.
        "steady_jobs_per_s": pending_at_first / steady_seconds if steady_seconds > 0 else None,
        "cpu_s_per_1000": 1000 * cpu["end"] / n,
        "steady_cpu_s_per_1000": (1000 * (cpu["end"] - cpu["first"]) / pending_at_first
                                  if pending_at_first else None),
    }
    details = {"n": n, "seconds": seconds, "first_progress_seconds": t_first - cluster.started_at,
               "pending_at_first_progress": pending_at_first, "cpu_seconds": cpu}
    if probe_result:
        metrics.update(probe_result["metrics"])
        details["probe"] = probe_result["details"]
    return {"metrics": metrics, "details": details}


def workload_drain(ctx: Context) -> dict:
    """(3) Drain N queued no-op jobs: exec of the cluster to the last job recorded as done."""
    return drain(ctx, ctx.options.n)


def workload_drain_large(ctx: Context) -> dict:
    """(3b) The same with --large-n jobs (20000 in the full mode)."""
    reason = na_reason(ctx.system, "drain_large", ctx.options.large_skip, ctx.options.large_skip_reason)
    if reason:
        return not_applicable(reason, ("jobs_per_s", "steady_jobs_per_s", "cpu_s_per_1000",
                                       "steady_cpu_s_per_1000"))
    return drain(ctx, ctx.options.large_n)


def latency_probe(ctx: Context, cluster: Cluster, count: int) -> dict:
    """Enqueue single tagged jobs into an idle cluster, one at a time, each waited for.

    For each job: call and return times of the enqueue call, the time the finished job was
    first seen by polling the system's result store (every 0.5 ms, one query each: what a
    user's harness sees), and the task's own start time (benchtasks' mark). A job is sent
    ``--latency-gap-ms`` after the previous one was sent and at least that long after the
    previous one became visible, so every job meets an idle cluster (a worker that just
    finished a job and polls again at once would otherwise pick the next one up at once);
    sending stops after ``--latency-max-seconds`` (slow pollers get fewer samples).
    """
    adapter, options = ctx.adapter, ctx.options
    gap = options.latency_gap_ms / 1000
    sent: list[tuple[str, float, float, float]] = []
    base = next_at = time.time()
    stop_at = base + options.latency_max_seconds
    for _ in range(count):
        sleep_until(next_at)
        if time.time() > stop_at and len(sent) >= 5:
            break
        tag = f"lat{len(sent)}-{int(base * 1000) % 100000}"
        t_call = time.time()
        job_id = adapter.enqueue(tag=tag)
        t_return = time.time()
        deadline = t_return + 60
        while not adapter.is_done(job_id):
            if time.time() > deadline:
                cluster.check_alive()
                raise WorkloadError(f"job {job_id} not finished 60 s after its enqueue; log {cluster.log_path}")
            time.sleep(0.0005)
        t_visible = time.time()
        sent.append((tag, t_call, t_return, t_visible))
        next_at = max(next_at + gap, t_visible + gap)
    ctx.marks.wait_for([t for t, *_ in sent], cluster, timeout=30)
    started = ctx.marks.started
    visible = [v - c for _, c, _, v in sent]
    start = [started[t] - c for t, c, _, _ in sent]
    after_commit = [started[t] - r for t, _, r, _ in sent]
    call = [r - c for _, c, r, _ in sent]
    v, st, ac = summary_ms(visible), summary_ms(start), summary_ms(after_commit)
    return {
        "metrics": {"visible_p50_ms": v["p50_ms"], "visible_p99_ms": v["p99_ms"],
                    "start_p50_ms": st["p50_ms"], "start_after_commit_p50_ms": ac["p50_ms"],
                    "start_after_commit_p99_ms": ac["p99_ms"]},
        "details": {"jobs": len(sent), "gap_ms": gap * 1000, "visible": v, "start": st,
                    "start_after_enqueue_return": ac, "enqueue_call": summary_ms(call),
                    # raw samples (ms) for the CDF plot
                    "visible_ms": [round(x * 1000, 3) for x in visible],
                    "start_ms": [round(x * 1000, 3) for x in start]},
    }


def workload_latency(ctx: Context) -> dict:
    """(4) Enqueue -> result visible, and enqueue -> task start, on an idle cluster."""
    with ctx.running_cluster() as cluster:
        ctx.warm_up(cluster)
        time.sleep(ctx.options.settle)  # let the cluster go idle (pollers back off, etc.)
        result = latency_probe(ctx, cluster, ctx.options.latency_jobs)
    verify_done(ctx.adapter)
    return result


def workload_startup(ctx: Context) -> dict:
    """(5) Exec of the cluster to the start of a job that was queued before it (ready time).

    Repeated ``--startup-repeats`` times, a new cluster each time; the metric is the median.
    """
    adapter, times = ctx.adapter, []
    for i in range(ctx.options.startup_repeats):
        tag = f"ready{i}"
        adapter.enqueue(tag=tag)
        with ctx.running_cluster(suffix=f"-{i}") as cluster:
            ctx.marks.wait_for([tag], cluster, timeout=120, interval=0.002)
        times.append(ctx.marks.started[tag] - cluster.started_at)
    import statistics

    return {"metrics": {"ready_ms": 1000 * statistics.median(times)},
            "details": {"ready_ms": [round(t * 1000, 2) for t in times]}}


def workload_burst(ctx: Context) -> dict:
    """(6) One queued job, the cluster in burst mode: exec to exit (median of repeats)."""
    import statistics

    reason = na_reason(ctx.system, "burst")
    if reason:
        return not_applicable(reason, ("burst_s",))
    adapter, times = ctx.adapter, []
    for i in range(ctx.options.startup_repeats):
        job_id = adapter.enqueue(tag=f"burst{i}")
        cluster = ctx.new_cluster(burst=True, suffix=f"-{i}")
        t0 = cluster.start()
        try:
            code = cluster.wait_exit(120)
            elapsed = time.time() - t0  # the exit, not the harness's clean-up after it
        finally:
            cluster.stop(grace=5)
        if code != 0 or not adapter.is_done(job_id):
            raise WorkloadError(f"burst run {i}: exit {code}, job done: {adapter.is_done(job_id)}; "
                                f"log {cluster.log_path}")
        times.append(elapsed)
    return {"metrics": {"burst_s": statistics.median(times)},
            "details": {"burst_s": [round(t, 4) for t in times],
                        "command": "qcluster --burst" if ctx.system.launcher == "qcluster"
                        else "db_worker --batch (x2)"}}


def workload_scale(ctx: Context) -> dict:
    """(7) An empty table against --scale-rows finished jobs, in the same run, same settings.

    Both halves keep every finished job (``save_limit`` 0, BENCH_TASKMQ_SAVE_LIMIT): first the
    drain of N jobs and the latency probe on the fresh (empty) table; then --scale-rows
    finished jobs are added with one INSERT ... SELECT (and ANALYZE / checkpoint / VACUUM,
    see the adapter) and the same drain and probe run again. Metrics without a prefix are
    the full table's; ``empty_*`` the empty table's; ``*_ratio`` full / empty of this run.
    """
    adapter = ctx.adapter
    keys = ("jobs_per_s", "steady_jobs_per_s", "visible_p50_ms", "visible_p99_ms", "steady_ratio",
            "visible_p50_ratio")
    if not hasattr(adapter, "fill_finished"):
        return not_applicable(na_reason(ctx.system, "scale") or "no fill", keys)
    ctx.cluster_env["BENCH_TASKMQ_SAVE_LIMIT"] = "0"
    probe = ctx.options.scale_probe_jobs
    empty = drain(ctx, ctx.options.n, probe=probe)
    t0 = time.time()
    adapter.fill_finished(ctx.options.scale_rows)
    fill_seconds = time.time() - t0
    full = drain(ctx, ctx.options.n, probe=probe)
    e, f = empty["metrics"], full["metrics"]
    metrics = {k: f.get(k) for k in ("jobs_per_s", "steady_jobs_per_s", "visible_p50_ms", "visible_p99_ms",
                                      "steady_cpu_s_per_1000")}
    metrics.update({f"empty_{k}": e.get(k) for k in ("jobs_per_s", "steady_jobs_per_s", "visible_p50_ms",
                                                     "visible_p99_ms", "steady_cpu_s_per_1000")})
    metrics["steady_ratio"] = (f["steady_jobs_per_s"] / e["steady_jobs_per_s"]
                               if f.get("steady_jobs_per_s") and e.get("steady_jobs_per_s") else None)
    metrics["visible_p50_ratio"] = (f["visible_p50_ms"] / e["visible_p50_ms"]
                                    if f.get("visible_p50_ms") and e.get("visible_p50_ms") else None)
    return {"metrics": metrics,
            "details": {"finished_rows": ctx.options.scale_rows, "fill_seconds": fill_seconds,
                        "save_limit": 0, "empty": empty["details"], "full": full["details"]}}


PRIORITIES = ("LOW", "NORMAL", "CRITICAL")


def workload_mixed(ctx: Context) -> dict:
    """(5) Mixed priorities on queues a (weight 3) and b (weight 1); per-priority waits.

    A backlog of LOW (10%) and NORMAL jobs is queued first; once the cluster is busy
    with it, CRITICAL jobs (2%) are enqueued one at a time, so they arrive while the
    cluster is saturated. Wait = start - max(enqueue, first job start): backlog jobs do
    not count the cluster's start-up as waiting.
    """
    n, adapter, rng = ctx.options.mixed_n, ctx.adapter, random.Random(4)
    n_critical = max(10, round(n * 0.02))
    n_low = round(n * 0.10)
    priorities = ["LOW"] * n_low + ["NORMAL"] * (n - n_low - n_critical)
    rng.shuffle(priorities)
    from adapters import JobSpec

    backlog = [JobSpec(f"m{i}", rng.choice("ab"), p) for i, p in enumerate(priorities)]
    critical = [JobSpec(f"c{i}", rng.choice("ab"), "CRITICAL") for i in range(n_critical)]
    enqueued_at = {}
    adapter.prefill(backlog)
    t_prefilled = time.time()
    enqueued_at.update((job.tag, t_prefilled) for job in backlog)
    check_stored(adapter, len(backlog))

    gap = ctx.options.critical_gap_ms / 1000
    with ctx.running_cluster() as cluster:
        # Saturated: the cluster is working through the backlog and most of it remains.
        busy_below = int(len(backlog) * 0.95)
        deadline = time.time() + ctx.timeout_for(len(backlog))
        while adapter.pending() > busy_below:
            cluster.check_alive()
            if time.time() > deadline:
                raise WorkloadError(f"cluster never got through 5% of the backlog; log {cluster.log_path}")
            time.sleep(0.01)
        base = time.time()
        for i, job in enumerate(critical):
            sleep_until(base + i * gap)
            enqueued_at[job.tag] = time.time()
            adapter.enqueue(tag=job.tag, queue=job.queue, priority=job.priority)
        t_last_critical = time.time()
        t_end, _ = ctx.wait_drained(cluster, n, interval=0.02)
        ctx.marks.wait_for(enqueued_at, cluster, timeout=30)

    started = ctx.marks.started
    first_start = min(started[tag] for tag in enqueued_at)
    jobs = backlog + critical
    waits = {p: [] for p in PRIORITIES}
    for job in jobs:
        waits[job.priority].append(started[job.tag] - max(enqueued_at[job.tag], first_start))
    per_priority = {p: summary_ms(w) for p, w in waits.items()}
    metrics = {f"{p.lower()}_p95_ms": per_priority[p]["p95_ms"] for p in PRIORITIES}
    metrics["critical_p50_ms"] = per_priority["CRITICAL"]["p50_ms"]
    metrics["queue_a_share"] = _queue_a_share([j for j in backlog if j.priority == "NORMAL"], started)
    return {
        "metrics": {**metrics, "jobs_per_s": n / (t_end - cluster.started_at)},
        "details": {
            "n": n, "per_priority": per_priority,
            "critical_gap_ms": gap * 1000,
            # > 0 means the cluster still had backlog when the last CRITICAL arrived.
            "backlog_started_after_last_critical": sum(
                1 for job in backlog if started[job.tag] > t_last_critical),
        },
    }


def _queue_a_share(jobs, started: dict[str, float]) -> float | None:
    """Return queue a's share of NORMAL starts while both queues still had NORMAL work.

    With weights 3:1 a weighted pick gives 0.75; a FIFO over a random a/b mix gives 0.5.
    """
    last = {q: max((started[j.tag] for j in jobs if j.queue == q), default=None) for q in "ab"}
    if None in last.values():
        return None
    window_end = min(last.values())
    in_window = [j for j in jobs if started[j.tag] <= window_end]
    return sum(1 for j in in_window if j.queue == "a") / len(in_window) if in_window else None


def workload_idle_cpu(ctx: Context) -> dict:
    """(6) CPU of the whole idle cluster (all processes), % of one core."""
    with ctx.running_cluster() as cluster:
        ctx.warm_up(cluster)
        time.sleep(ctx.options.settle)
        usage = sample_tree_cpu(cluster.pid, ctx.options.idle_seconds)
        cluster.check_alive()
    return {"metrics": {"cpu_percent": usage["cpu_percent"]}, "details": usage}


def workload_rss(ctx: Context) -> dict:
    """(7) Memory of the whole cluster process tree after draining many jobs."""
    n, adapter = ctx.options.rss_n, ctx.adapter
    adapter.prefill([_untagged()] * n)
    check_stored(adapter, n)
    with ctx.running_cluster() as cluster:
        t_end, _ = ctx.wait_drained(cluster, n, interval=0.25)
        time.sleep(1.0)  # let the last batch settle (results flushed, buffers freed)
        memory = tree_memory(cluster.pid)
    return {
        "metrics": {"rss_mb": memory["rss_mb"], "pss_mb": memory["pss_mb"]},
        "details": {**memory, "n": n, "drain_jobs_per_s": n / (t_end - cluster.started_at)},
    }


# The memory workload's two configurations: (name, BENCH_THREADS or None).
MEMORY_CONFIGS = (("2w", None), ("16t", 16))
# Systems that run one job per worker process: 16 threads would be 16 processes, another thing.
PROCESS_ONLY = {"djangoq2": "django-q2 runs one task per worker process and has no threads",
                "dtdb": "django-tasks-db's db_worker runs one task at a time and has no threads"}
TASKMQ_ROLES = ("monitor", "pusher")  # the sentinel's first children, in spawn order; then workers


def process_roles(system: System, processes: list[dict]) -> None:
    """Name each process of the tree (``role``): django_taskmq's by spawn order, the rest by command."""
    root = processes[0]["pid"]
    children = [p for p in processes if p["ppid"] == root]
    for p in processes:
        p["role"] = p["comm"]
    if system.adapter == "taskmq":
        processes[0]["role"] = "sentinel"
        for i, p in enumerate(children):
            p["role"] = TASKMQ_ROLES[i] if i < len(TASKMQ_ROLES) else "worker"
    else:
        processes[0]["role"] = "main"
        for p in processes[1:]:
            p["role"] = "child" if p["ppid"] == root else "grandchild"


def workload_memory(ctx: Context) -> dict:
    """(8) PSS of the whole cluster after a drain of N jobs, at 2 workers and at 16 threads.

    For each configuration a new cluster drains N queued jobs; one second after the last one
    is recorded, every process of its tree is read from /proc/<pid>/smaps_rollup (PSS: shared
    pages divided between their users, so the sum is the tree's real memory) and status (RSS).
    16 threads: django_taskmq 2 workers x 8 threads, Celery its thread pool of 16, Dramatiq
    2 processes x 8 threads, Steady Queue 2 processes x 8 threads, Procrastinate and oban a
    concurrency of 16 in their one asyncio process; django-q2 and django-tasks-db have no
    threads (n/a).
    """
    n, adapter = ctx.options.n, ctx.adapter
    metrics: dict = {}
    details: dict = {"n": n}
    for name, threads in MEMORY_CONFIGS:
        keys = (f"pss_{name}_mb", f"rss_{name}_mb")
        reason = PROCESS_ONLY.get(ctx.system.adapter) if threads else None
        if reason:
            metrics.update({k: None for k in keys})
            details[name] = {"na": reason}
            continue
        if threads:
            ctx.cluster_env["BENCH_THREADS"] = str(threads)
        else:
            ctx.cluster_env.pop("BENCH_THREADS", None)
        adapter.prefill([_untagged()] * n)
        with ctx.running_cluster(suffix=f"-{name}") as cluster:
            argv = cluster.argv
            t_end, _ = ctx.wait_drained(cluster, n, interval=0.05)
            time.sleep(1.0)  # let the last batch settle (results flushed, buffers freed)
            processes = tree_processes(cluster.pid)
        verify_done(adapter)
        process_roles(ctx.system, processes)
        metrics[keys[0]] = sum(p["pss_kb"] for p in processes) / 1024
        metrics[keys[1]] = sum(p["rss_kb"] for p in processes) / 1024
        details[name] = {"threads": threads or 2, "command": argv[1:] if argv else None,
                         "drain_jobs_per_s": n / (t_end - cluster.started_at),
                         "processes": [{"role": p["role"], "comm": p["comm"], "threads": p["threads"],
                                        "pss_mb": round(p["pss_kb"] / 1024, 2),
                                        "rss_mb": round(p["rss_kb"] / 1024, 2)} for p in processes]}
    ctx.cluster_env.pop("BENCH_THREADS", None)
    return {"metrics": metrics, "details": details}


def _untagged():
    from adapters import JobSpec

    return JobSpec()


WORKLOAD_FUNCTIONS = {
    "enqueue": workload_enqueue,
    "bulk": workload_bulk,
    "drain": workload_drain,
    "drain_large": workload_drain_large,
    "latency": workload_latency,
    "startup": workload_startup,
    "burst": workload_burst,
    "scale": workload_scale,
    "mixed": workload_mixed,
    "idle_cpu": workload_idle_cpu,
    "rss": workload_rss,
    "memory": workload_memory,
}
assert set(WORKLOAD_FUNCTIONS) == set(WORKLOADS)


# --------------------------------------------------------------------------- entry point


def setup_django(system: System, engine: str) -> None:
    """Point this process at the system's project and its live database, then set up Django."""
    from databases import database_env

    os.environ.update(system.env)
    os.environ.update(database_env(system, engine))
    os.environ["DJANGO_SETTINGS_MODULE"] = system.settings_module
    sys.path.insert(0, str(system.project_dir))
    import django

    django.setup()


def collect_info(system: System, engine: str) -> dict:
    """Return versions seen from this venv (Python, Django, the system, the database)."""
    import platform

    from databases import server_info

    info: dict = {"python": platform.python_version()}
    os.environ.update(system.env)  # e.g. celery-durable's Redis port, before the server is asked
    try:
        info.update(server_info(engine))
    except Exception as exc:  # the report still wants the rest
        info[engine] = f"unavailable: {exc}"
    try:
        setup_django(system, engine)
        import django

        from adapters import load

        info["django"] = django.get_version()
        info.update(load(system.adapter).versions())
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system", required=True, choices=sorted(SYSTEMS))
    parser.add_argument("--engine", required=True, choices=("sqlite", "postgresql", "mysql", "redis"))
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--workload", choices=WORKLOADS)
    action.add_argument("--prepare", action="store_true", help="(re)build the migrated template database")
    action.add_argument("--info", action="store_true", help="print versions as JSON")
    parser.add_argument("-n", type=int, default=2000, help="jobs for enqueue and drain")
    parser.add_argument("--bulk-n", type=int, default=10000)
    parser.add_argument("--mixed-n", type=int, default=10000)
    parser.add_argument("--rss-n", type=int, default=100000)
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--latency-gap-ms", type=float, default=50)
    parser.add_argument("--latency-max-seconds", type=float, default=30,
                        help="stop sending latency jobs after this long (at least 5 jobs)")
    parser.add_argument("--large-n", type=int, default=20000, help="jobs for drain_large")
    parser.add_argument("--large-skip", default="", help="systems not run in drain_large")
    parser.add_argument("--large-skip-reason", default="")
    parser.add_argument("--startup-repeats", type=int, default=3)
    parser.add_argument("--scale-rows", type=int, default=1_000_000)
    parser.add_argument("--scale-probe-jobs", type=int, default=50)
    parser.add_argument("--critical-gap-ms", type=float, default=5)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--settle", type=float, default=2.0, help="idle seconds before measuring idle things")
    parser.add_argument("--log-prefix", type=Path, default=None,
                        help="path prefix of the cluster log (default .work/logs/manual/...)")
    options = parser.parse_args(argv)
    options.large_skip = [x for x in options.large_skip.split(",") if x]
    return options


def emit(result: dict) -> None:
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    options = parse_args(argv)
    system = SYSTEMS[options.system]
    # SIGTERM from run.py's timeout must still run the finally blocks that stop the cluster.
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if options.info:
        emit(collect_info(system, options.engine))
        return 0
    from databases import fresh_database, prepare_template

    if options.prepare:
        prepare_template(system, options.engine)
        emit({"ok": True, "prepared": system.project, "database": system.database_key,
              "engine": options.engine})
        return 0

    log_prefix = options.log_prefix or (
        WORK_DIR / "logs" / "manual" / f"{options.engine}-{system.name}-{options.workload}")
    log_prefix.parent.mkdir(parents=True, exist_ok=True)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    result = {"system": system.name, "engine": options.engine, "workload": options.workload}
    marks_dir = Path(tempfile.mkdtemp(prefix="marks-", dir=WORK_DIR))
    ctx = None
    try:
        os.environ.update(system.env)  # e.g. celery-durable's Redis port, before it is flushed
        fresh_database(system, options.engine)
        setup_django(system, options.engine)
        from adapters import load

        ctx = Context(system, options.engine, load(system.adapter), options, log_prefix, marks_dir)
        t0 = time.time()
        result.update(WORKLOAD_FUNCTIONS[options.workload](ctx))
        result["ok"] = True
        result["elapsed_seconds"] = time.time() - t0
    except BaseException as exc:  # noqa: BLE001 - report every failure as a result line
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    finally:
        shutil.rmtree(marks_dir, ignore_errors=True)
    if ctx is not None:
        result["cluster"] = ctx.cluster_info
        if result["ok"] and "cluster_log" in ctx.cluster_info:
            trim_log(Path(ctx.cluster_info["cluster_log"]))
    emit(result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
