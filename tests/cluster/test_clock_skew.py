"""Hosts whose clocks disagree, on one PostgreSQL database: the queue uses the database's clock.

Debian's libfaketime (``LD_PRELOAD``, ``FAKETIME=+120s``, ``DONT_FAKE_MONOTONIC=1``) moves the wall
clock of a whole process tree, its database driver included, and leaves the monotonic clock alone:
one cluster runs two minutes fast, one two minutes slow, one on the true clock. With the hosts'
clocks, the fast cluster took over the others' running jobs (their leases looked expired to it) and
ran delayed work early, and work enqueued from a skewed web host waited two minutes or ran at once.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import signal
import time

import pytest

from django_taskmq import enqueue_many
from django_taskmq.models import Job

from tests.clock_probe import server_time
from tests.conftest import db_env, finish, start_script

from .conftest import engine_is_server, job_states  # noqa: F401 (engine_is_server: in skipif)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("not engine_is_server()",
                       reason="many hosts share one database on a server engine only (SQLite keeps the host's clock)"),
]

SKEW = 120  # seconds: the two minutes
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)
DELAY = 6.0  # seconds of delay= for the skewed enqueuers' work
# A delayed job starts this long after its due time at most: generous for a busy machine (the
# claim is woken by NOTIFY or polls every 0.25 s), and far below the SKEW a host clock would add.
LATE_AT_MOST = 45.0


@pytest.fixture
def faked():
    """Return ``faked(offset)``: environment variables that run a process ``offset`` seconds off."""
    if LIBFAKETIME is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Debian's libfaketime is not installed and CI is set (scripts/test installs it)")
        pytest.skip("Debian's libfaketime is not installed (apt-get install faketime)")

    def env(offset: int) -> dict[str, str]:
        return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"{offset:+d}s", "DONT_FAKE_MONOTONIC": "1"}

    return env


def database_time() -> float:
    from django.db import connection

    return server_time(connection)


PROBE = """
import ctypes, json, time
from django.db import connection
from django_taskmq.brokers import get_broker

wall, mono = time.time(), time.monotonic()
skew = get_broker().clock_skew()
# The libpq this process loaded (psycopg's own or the system's): its clock, when it can tell it (17+).
libpq = None
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if "/libpq" in path and ".so" in path:
        try:
            read = ctypes.CDLL(path).PQgetCurrentTimeUSec
        except AttributeError:
            break
        read.restype = ctypes.c_int64
        with connection.cursor() as cursor:
            before = read() / 1e6
            cursor.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8")
            libpq = before - cursor.fetchone()[0]
        break
import threading
waited = time.monotonic()
threading.Event().wait(0.5)  # a duration measured on this host: true under the fake
waited = time.monotonic() - waited
print(json.dumps({"wall": wall, "monotonic": mono, "skew": skew.seconds, "libpq": libpq, "waited": waited}))
"""


@pytest.mark.parametrize("offset", [SKEW, -SKEW])
def test_libfaketime_moves_the_wall_clock_of_python_and_libpq_but_not_the_monotonic_clock(faked, offset):
    """The harness's premise: in a faked process ``time.time()`` and libpq's clock are ``offset``
    seconds off the database's, the broker measures that skew, and ``time.monotonic()`` is the
    machine's (durations measured on the host stay true)."""
    mono_before = time.monotonic()
    out = json.loads(finish(start_script(PROBE, env=db_env(faked(offset)))))
    mono_after = time.monotonic()
    now = database_time()
    assert abs(out["wall"] - now - offset) < 10, out
    assert abs(out["skew"] - offset) < 5, out
    assert mono_before <= out["monotonic"] <= mono_after, (mono_before, out, mono_after)
    assert 0.5 <= out["waited"] < mono_after - mono_before, out
    if out["libpq"] is not None:  # libpq 17 and later say their clock
        assert abs(out["libpq"] - offset) < 5, out


ENQUEUE = """
import json, sys
from django.db import connection
from django_taskmq import async_task
from tests.clock_probe import server_time

def database_time():
    return server_time(connection)

tag, delay = sys.argv[1], float(sys.argv[2])
before = database_time()
job_id = async_task("tests.cluster.tasks_cluster.clocked", tag, delay=delay)
after = database_time()
print(json.dumps({"job": job_id, "before": before, "after": after}))
"""


def starts(log: list[tuple[str, str]]) -> dict[str, list[tuple[int, float]]]:
    """Job id -> (worker pid, database time) of each start of a :func:`clocked` task."""
    found = collections.defaultdict(list)
    for job_id, tag in log:
        if tag.startswith("start:"):
            _, pid, at = tag.split()
            found[job_id].append((int(pid), float(at)))
    return found


def test_clusters_two_minutes_apart_start_no_job_twice_and_run_delayed_work_when_due(cluster, faked):
    # Each cluster runs two five-second jobs of a queue of its own (it also serves "default", the
    # delayed work's), holding their leases while the other two sweep for expired leases every
    # second: with the hosts' clocks the fast one took them all over. (Own queues: how six jobs
    # enqueued at once spread over three clusters otherwise depends on which wakes first, on an
    # engine that wakes idle clusters by polling.)
    cluster.configure(lease=10, prefetch=0, queue_limit=2)
    own = {"fast": "a", "true": "b", "slow": "emails"}
    clusters = {"fast": cluster.start("-w", "2", "-n", "fast", "-Q", "default,a", env=faked(SKEW)),
                "true": cluster.start("-w", "2", "-n", "true", "-Q", "default,b"),
                "slow": cluster.start("-w", "2", "-n", "slow", "-Q", "default,emails", env=faked(-SKEW))}
    alive = list(clusters.values())
    for qc in alive:
        cluster.wait_pool(qc, 2)

    # Every heartbeat is stamped by the database: the slow cluster is alive too, and each shows its skew.
    def skews() -> dict[str, float] | None:
        found = {c["name"]: c["clock_skew"] for c in qinfo()["clusters"]}
        return found if len(found) == 3 and None not in found.values() else None

    measured = cluster.wait_until(skews, "three clusters alive with their clock skew", alive=alive)
    assert abs(measured["fast"] - SKEW) < 5 and abs(measured["slow"] + SKEW) < 5 and abs(measured["true"]) < 5

    ids = [job_id for name, queue in own.items()
           for job_id in enqueue_many("tests.cluster.tasks_cluster.clocked", [(f"long-{name}{i}", 5.0) for i in range(2)],
                                      queue=queue)]
    # Delayed work from web hosts two minutes fast and slow, and from a true one.
    enqueued = {}
    for name, env in (("fast", faked(SKEW)), ("slow", faked(-SKEW)), ("true", {})):
        out = json.loads(finish(start_script(ENQUEUE, f"delayed-{name}", str(DELAY), env=db_env(env))))
        enqueued[out["job"]] = out
    cluster.wait_final(ids + list(enqueued), alive=alive)

    assert job_states(ids + list(enqueued)) == {"SUCCEEDED": 9}, [
        (j.task_name, j.state, j.error, j.traceback, j.deliveries, j.cluster) for j in Job.objects.exclude(state="SUCCEEDED")]
    started = starts(cluster.log())
    # No job started twice: one start each in the run log, one delivery and one execution each.
    assert {job_id: len(runs) for job_id, runs in started.items()} == {job_id: 1 for job_id in ids + list(enqueued)}
    rows = Job.objects.in_bulk(ids + list(enqueued))
    assert {(rows[j].deliveries, rows[j].attempt) for j in rows} == {(1, 1)}
    # The long jobs ran on every cluster, the skewed ones included (each held two).
    assert {rows[j].cluster for j in ids} == {"fast", "true", "slow"}

    for job_id, out in enqueued.items():
        # Visible DELAY seconds after the INSERT by the database's clock, whatever the enqueuer's said...
        assert out["before"] + DELAY <= rows[job_id].visible_at <= out["after"] + DELAY, (out, rows[job_id].visible_at)
        # ...and started then: not early, and not two minutes late.
        ((_, at),) = started[job_id]
        assert out["before"] + DELAY <= at <= out["after"] + DELAY + LATE_AT_MOST, (out, at)

    for qc in alive:
        qc.send(signal.SIGTERM)
    for name, qc in clusters.items():
        assert qc.wait() == 0, qc.output()
        # The skewed clusters said so once; the true one did not.
        warnings = qc.output(tail=10**6).count("from the database's")
        assert warnings == (0 if name == "true" else 1), qc.output()


def qinfo() -> dict:
    """``manage.py qinfo --json``, run as a separate process as an operator would."""
    return json.loads(finish(start_script(
        "from django.core.management import call_command\ncall_command('qinfo', '--json')")))


def test_the_clock_skew_shows_in_qinfo_and_in_the_metrics(cluster, faked):
    fast = cluster.start("-w", "1", "-n", "ahead", env=faked(SKEW))
    cluster.wait_pool(fast, 1)

    def reported() -> float | None:
        (entry,) = [c for c in qinfo()["clusters"] if c["name"] == "ahead"] or [{"clock_skew": None}]
        return entry["clock_skew"]

    skew = cluster.wait_until(reported, "qinfo --json to show the fast cluster's clock skew", alive=[fast])
    assert abs(skew - SKEW) < 5

    text = finish(start_script("from django.core.management import call_command\ncall_command('qinfo')"))
    (shown,) = re.findall(r"ahead .* clock_skew=([-+][0-9.]+)s", text)
    assert abs(float(shown) - SKEW) < 5, text

    from django_taskmq.observability import metrics

    exposition = metrics.exposition().decode()
    (sample,) = [line for line in exposition.splitlines() if line.startswith("taskmq_clock_skew_seconds{")]
    assert 'cluster="ahead:' in sample and abs(float(sample.rsplit(" ", 1)[1]) - SKEW) < 5, exposition
