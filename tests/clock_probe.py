"""Every time the broker stores for its own decisions, checked against the broker's clock.

:func:`problems` runs the broker's timed operations and brackets each stored time between two
readings of the clock the queue must use (:func:`reference`: the server's on PostgreSQL, read
without the broker) taken around the operation.
``tests/api/test_database_clock.py`` runs it in the test process and, on PostgreSQL, in processes
whose wall clock libfaketime moves two minutes: a time taken from the host's clock falls out of
its bracket by those two minutes.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection

from django_taskmq import async_task, enqueue_many
from django_taskmq.brokers import get_broker
from django_taskmq.models import Cluster, IdempotencyKey, Job, Schedule, State
from django_taskmq.scheduler import schedule, tick

SLACK = 0.05  # seconds: float rounding between the clock's readings and the stored values


#: SQL reading a server's own clock now (epoch seconds), written apart from the broker's.
SERVER_TIME = {
    "postgresql": "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8",
    "mysql": "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', SYSDATE(6)) / 1e6 "
             "- TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())",
}


def server_time(connection) -> float:
    """The time of the server behind ``connection`` (PostgreSQL, MySQL), epoch seconds."""
    with connection.cursor() as cursor:
        cursor.execute(SERVER_TIME[connection.vendor])
        return float(cursor.fetchone()[0])


def reference() -> float:
    """The clock the queue must use, read without the broker: the server's, the host's on SQLite."""
    if connection.vendor == "sqlite":
        return time.time()
    return server_time(connection)


def problems() -> list[str]:
    """Return what is wrong (empty: every stored time is the broker's clock plus its duration)."""
    broker = get_broker()
    found: list[str] = []

    def bracket(name: str, operation: Callable[[], Any], read: Callable[[Any], float], offset: float) -> Any:
        before = reference()
        result = operation()
        after = reference()
        value = read(result)
        if not before + offset - SLACK <= value <= after + offset + SLACK:
            found.append(f"{name}: stored {value:.3f}, expected {offset:+} s from the clock's "
                         f"[{before:.3f}, {after:.3f}] (off by {value - before - offset:+.1f} s)")
        return result

    def visible(job_id: str) -> float:
        return Job.objects.get(pk=job_id).visible_at

    def lease_until(job_id: str) -> float:
        return Job.objects.get(pk=job_id).lease_until

    # Visibility at enqueue: now, and after a delay (one INSERT, and COPY for many).
    delayed = bracket("async_task(delay=30).visible_at", lambda: async_task("tests.tasks.noop", delay=30),
                      visible, 30)
    ready = bracket("async_task().visible_at", lambda: async_task("tests.tasks.noop"), visible, 0)
    bracket("enqueue_many(delay=15).visible_at",
            lambda: enqueue_many("tests.tasks.noop", [(1,), (2,)], delay=15, queue="b")[0], visible, 15)
    bracket("async_task(expires_at=timedelta(90)).expires_at",
            lambda: async_task("tests.tasks.noop", queue="b", expires_at=datetime.timedelta(seconds=90)),
            lambda job_id: Job.objects.get(pk=job_id).expires_at, 90)
    bracket("async_task(key=...) key expiry", lambda: async_task("tests.tasks.noop", key="probe", queue="b"),
            lambda _: IdempotencyKey.objects.get(key="probe").expires_at, broker.settings.idempotency_ttl)

    # What is ready, by the clock: the job enqueued now is, the delayed ones are not.
    async_task("tests.tasks.noop", queue="a", delay=30)
    if broker.has_ready(["a"]) or broker.unfinished(["a"]):
        found.append("a job delayed 30 s is ready or unfinished already")
    counts = {row["queue"]: row for row in broker.stats()}
    if counts["a"]["ready"] != 0 or counts["a"]["delayed"] != 1:
        found.append(f"stats() of queue a (one job delayed 30 s): {counts['a']}")

    # Leases: the claim, renewals; then the ends of a delivery that set a visibility.
    owner = "probe:host:1:x"
    (held,) = bracket("reserve(lease=50).lease_until",
                      lambda: broker.reserve(["default"], 10, lease=50, owner=owner),
                      lambda got: lease_until(got[0].job_id), 50)
    if held.job_id != ready:
        found.append(f"reserve() took {held.job_id}, not the one job visible now ({ready}; {delayed} is delayed)")
    bracket("extend_leases(80)", lambda: broker.extend_leases(owner, [held.job_id], 80),
            lambda _: lease_until(held.job_id), 80)
    bracket("settle(delay=40).visible_at", lambda: broker.settle(held, delay=40, error="x"),
            lambda _: visible(held.job_id), 40)
    for name, hand_back, delay in (("defer", broker.defer, 20), ("yield_reservation", broker.yield_reservation, 25)):
        job_id = async_task("tests.tasks.noop", queue="emails")
        (reservation,) = broker.reserve(["emails"], 1, lease=50, owner=owner)
        bracket(f"{name}(delay={delay}).visible_at", lambda: hand_back(reservation, delay),
                lambda _: visible(job_id), delay)

    # A lease that runs out (by the clock) is reclaimed, and visible again from the sweep on.
    job_id = async_task("tests.tasks.noop", queue="reports")
    broker.reserve(["reports"], 1, lease=0.2, owner=owner)
    threading.Event().wait(0.5)  # (not time.sleep: see tests.cluster.tasks_cluster.clocked)
    bracket("reclaim_expired().visible_at", broker.reclaim_expired, lambda _: visible(job_id), 0)
    if Job.objects.get(pk=job_id).state != State.RETRYING:
        found.append(f"the lease of {job_id} ran out but it was not reclaimed")

    # Heartbeats and schedules.
    bracket("publish_heartbeat().beat_at", lambda: broker.publish_heartbeat(
        owner, name="probe", host="host", pid=1, state="running", workers=1, queues=["default"], counts={},
        started_at=datetime.datetime.now(tz=datetime.UTC)), lambda _: Cluster.objects.get(pk=owner).beat_at.timestamp(), 0)
    bracket("schedule().next_run", lambda: schedule("tests.tasks.noop", name="probe", schedule_type=Schedule.MINUTES,
                                                    minutes=1), lambda s: s.next_run.timestamp(), 0)
    first = Schedule.objects.get(name="probe").next_run
    fired = tick()  # due now by the clock: it fires, and its next run is a minute after this one
    following = Schedule.objects.get(name="probe").next_run
    if len(fired) != 1 or following != first + datetime.timedelta(minutes=1):
        found.append(f"tick() of a schedule due at {first}: fired {fired}, next run {following}")
    return found
