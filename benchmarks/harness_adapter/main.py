#!/usr/bin/env python
"""django_taskmq's adapter for hardbyte/postgresql-job-queue-benchmarking (its JSONL contract).

One replica is this process and the cluster it starts, ``manage.py qcluster`` of
``harness_project`` (the cluster as it is run in production: its own processes, its settings
from ``settings.py``). This process is the producer and the sampler only:

* producer: ``enqueue_many`` (the public bulk API) of at most ``PRODUCER_BATCH_MAX`` jobs
  (default 128, the protocol's) per call, paced on wall-clock time at the rate of
  ``PRODUCER_RATE_CONTROL_FILE`` (the harness rewrites it in ``high-load`` phases) or topping the
  queue up to ``TARGET_DEPTH`` in ``depth-target`` mode;
* completions and claim latencies arrive as datagrams from the job (``harness_project/tasks.py``);
* every ``SAMPLE_EVERY_S`` (clock-aligned) it prints the contract's samples on stdout.

The cluster dies with this process (``PR_SET_PDEATHSIG``), so the harness's SIGKILL of a
replica kills a whole node, cluster included, as a machine's crash would.
"""

from __future__ import annotations

import collections
import ctypes
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

HERE = Path(__file__).resolve().parent
SYSTEM = "django_taskmq"
TASK = "harness_project.tasks.bench_job"
EVENT_TABLES = ["public.django_taskmq_job"]
OBSERVER_METRICS = {"queue_depth", "producer_target_rate"}


def env_int(key: str, default: int) -> int:
    value = os.environ.get(key)
    return int(value) if value not in (None, "") else default


INSTANCE = env_int("BENCH_INSTANCE_ID", 0)
SAMPLE_EVERY_S = env_int("SAMPLE_EVERY_S", 5)
PRODUCER_MODE = os.environ.get("PRODUCER_MODE", "fixed")
PRODUCER_RATE = env_int("PRODUCER_RATE", 800)
BATCH_MAX = max(1, env_int("PRODUCER_BATCH_MAX", 128))
BATCH_MS = max(1, env_int("PRODUCER_BATCH_MS", 25))
TARGET_DEPTH = env_int("TARGET_DEPTH", 1000)
PADDING = "x" * max(0, env_int("JOB_PAYLOAD_BYTES", 256) - 64)  # about the payload size asked for


def emit(record: dict) -> None:
    record.setdefault("instance_id", INSTANCE)
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def log(message: str) -> None:
    print(f"[{SYSTEM}-{INSTANCE}] {message}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def offered_rate() -> int:
    path = os.environ.get("PRODUCER_RATE_CONTROL_FILE")
    if path:
        try:
            return int(float(Path(path).read_text().strip()))
        except (OSError, ValueError):
            pass
    return PRODUCER_RATE


def die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class Adapter:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.latencies: collections.deque[tuple[float, float]] = collections.deque(maxlen=65536)
        self.enqueued = 0
        self.completed = 0
        self.depth = 0
        self.enqueued_at_depth_poll = 0
        self.target_rate = 0.0
        self.socket_dir = tempfile.mkdtemp(prefix="harness-taskmq-")
        self.socket_path = os.path.join(self.socket_dir, "report.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.socket_path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.settimeout(0.5)
        self.cluster: subprocess.Popen | None = None

    # -- set-up -------------------------------------------------------------------------
    def migrate(self) -> None:
        from django.core.management import call_command
        from django.db import connection

        # Replicas start together: one migrates, the others wait for it.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(7150050)")
            try:
                call_command("migrate", verbosity=0, interactive=False)
            finally:
                cursor.execute("SELECT pg_advisory_unlock(7150050)")
        connection.close()

    def start_cluster(self) -> None:
        env = {**os.environ, "HARNESS_REPORT_SOCKET": self.socket_path, "PYTHONUNBUFFERED": "1"}
        self.cluster = subprocess.Popen(
            [sys.executable, str(HERE / "manage.py"), "qcluster"], cwd=HERE, env=env,
            stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr, preexec_fn=die_with_parent)

    # -- threads ------------------------------------------------------------------------
    def receive(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.sock.recv(256)
            except socket.timeout:
                continue
            except OSError:
                return
            _, latency = data.split()
            with self.lock:
                self.latencies.append((time.monotonic(), float(latency)))
                self.completed += 1

    def drain_stdin(self) -> None:
        # The harness's pacer writes ENQUEUE tokens here at the base rate; it does not follow
        # the rate file that high-load phases raise, so pacing is done below, on that file (as
        # the harness's Procrastinate adapter does), and the tokens are only read away.
        for _ in iter(sys.stdin.readline, ""):
            if self.stop.is_set():
                return

    def enqueue(self, seq: int, count: int) -> bool:
        from django.db import connection

        from django_taskmq import enqueue_many

        created = time.time()
        try:
            enqueue_many(TASK, [(seq + i, created, PADDING) for i in range(count)])
        except Exception as exc:  # a killed backend, the server away: count nothing, try again
            log(f"enqueue failed: {exc.__class__.__name__}: {exc}")
            connection.close()
            self.stop.wait(0.1)
            return False
        with self.lock:
            self.enqueued += count
        return True

    def produce(self) -> None:
        seq = INSTANCE * 1_000_000_000
        credit = 0.0
        last = time.monotonic()
        while not self.stop.is_set():
            if PRODUCER_MODE == "depth-target":
                self.target_rate = 0.0
                with self.lock:
                    estimate = self.depth + (self.enqueued - self.enqueued_at_depth_poll)
                count = min(BATCH_MAX, TARGET_DEPTH - estimate)
                if count <= 0:
                    self.stop.wait(0.01)
                    continue
            else:
                rate = offered_rate()
                self.target_rate = float(rate)
                wait = BATCH_MS / 1000.0 - (time.monotonic() - last)
                if wait > 0:
                    self.stop.wait(wait)
                now = time.monotonic()
                credit += rate * (now - last)  # credited on real elapsed time (the protocol's rule)
                last = now
                if credit < 1:
                    continue
                count = min(BATCH_MAX, int(credit))
            if self.enqueue(seq, count):
                seq += count
                if PRODUCER_MODE != "depth-target":
                    credit -= count

    def poll_depth(self) -> None:
        from django.db import connection

        from django_taskmq.models import Job

        while not self.stop.is_set():
            try:
                with self.lock:
                    enqueued = self.enqueued
                depth = Job.objects.filter(state="QUEUED").count()
                with self.lock:
                    self.depth, self.enqueued_at_depth_poll = depth, enqueued
            except Exception:
                connection.close()
            self.stop.wait(0.2)

    def sample(self) -> None:
        self.stop.wait(SAMPLE_EVERY_S - time.time() % SAMPLE_EVERY_S)
        last_tick, last_enq, last_cmp = time.monotonic(), 0, 0
        while not self.stop.wait(SAMPLE_EVERY_S - time.time() % SAMPLE_EVERY_S):
            now = time.monotonic()
            with self.lock:
                enqueued, completed, depth = self.enqueued, self.completed, self.depth
                window = sorted(v for t, v in self.latencies if t >= now - 30.0)
            elapsed = max(0.001, now - last_tick)
            last_tick = now
            p50, p95, p99 = (percentile(window, q) for q in (0.50, 0.95, 0.99))
            ts = now_iso()
            for metric, value, window_s in (
                ("claim_p50_ms", p50, 30.0), ("claim_p95_ms", p95, 30.0), ("claim_p99_ms", p99, 30.0),
                ("enqueue_rate", (enqueued - last_enq) / elapsed, float(SAMPLE_EVERY_S)),
                ("completion_rate", (completed - last_cmp) / elapsed, float(SAMPLE_EVERY_S)),
                ("queue_depth", float(depth), 0.0),
                ("producer_target_rate", self.target_rate, 0.0),
            ):
                if metric in OBSERVER_METRICS and INSTANCE != 0:
                    continue  # one observer per fleet, as the contract asks
                emit({"t": ts, "system": SYSTEM, "kind": "adapter", "subject_kind": "adapter", "subject": "",
                      "metric": metric, "value": value, "window_s": window_s})
            last_enq, last_cmp = enqueued, completed

    # -- life ---------------------------------------------------------------------------
    def run(self) -> int:
        self.migrate()
        self.start_cluster()
        emit({"kind": "descriptor", "system": SYSTEM, "event_tables": EVENT_TABLES, "extensions": [],
              "version": package_version(), "schema_version": "migrations",
              "db_name": urlparse(os.environ["DATABASE_URL"]).path.lstrip("/"), "started_at": now_iso()})
        threads = [threading.Thread(target=fn, name=fn.__name__, daemon=True)
                   for fn in (self.receive, self.drain_stdin, self.produce, self.sample)]
        if INSTANCE == 0 or PRODUCER_MODE == "depth-target":
            threads.append(threading.Thread(target=self.poll_depth, name="poll_depth", daemon=True))
        for thread in threads:
            thread.start()
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop.set())
        while not self.stop.wait(0.5):
            if self.cluster.poll() is not None:
                log(f"the cluster exited (rc={self.cluster.returncode})")
                self.stop.set()
                return 1
        # The contract: exit within 5 s of SIGTERM. The cluster's own stop finishes the
        # running 1 ms jobs and hands the rest back.
        self.cluster.send_signal(signal.SIGTERM)
        try:
            self.cluster.wait(timeout=8.0)
        except subprocess.TimeoutExpired:
            log("the cluster did not stop within 8 s: SIGKILL")
            self.cluster.kill()
        return 0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))]


def package_version() -> str:
    from importlib.metadata import version

    return f"django_taskmq {version('django-taskmq')} @ {os.environ.get('HARNESS_TASKMQ_COMMIT', 'worktree')}"


def main() -> int:
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_project.settings")
    import django

    django.setup()
    return Adapter().run()


if __name__ == "__main__":
    sys.exit(main())
