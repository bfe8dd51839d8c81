"""Two clusters on one PostgreSQL database: each job runs once, each schedule fires once per due time."""

from __future__ import annotations

import collections
import datetime
import signal

import pytest
from django.utils import timezone

from django_taskmq import enqueue_many, schedule
from django_taskmq.models import Cluster, Job, Schedule

from .conftest import engine_is_server, job_states  # noqa: F401 (engine_is_server: in skipif)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("not engine_is_server()",
                       reason="several clusters share one database in production on a server engine only"),
]


def test_two_clusters_run_5000_jobs_once_and_fire_schedules_once(cluster):
    cluster.configure(scheduler_interval=0.2)
    now = timezone.now()
    for i in range(5):
        schedule("tests.tasks.record_run", f"once{i}", name=f"once-{i}", schedule_type=Schedule.ONCE,
                 next_run=now - datetime.timedelta(minutes=i + 1))
    # Due 20 times already (every minute from 19.5 minutes ago); catch_up fires each missed run.
    first_due = now - datetime.timedelta(minutes=19, seconds=30)
    schedule("tests.tasks.record_run", "minutely", name="minutely", schedule_type=Schedule.MINUTES, minutes=1,
             next_run=first_due, catch_up=True)
    ids = enqueue_many("tests.tasks.record_run", [() for _ in range(5000)])

    a = cluster.start("-w", "2")
    b = cluster.start("-w", "2")

    def schedules_done() -> bool:
        return (Schedule.objects.filter(schedule_type=Schedule.ONCE, repeats=0).count() == 5
                and Schedule.objects.get(name="minutely").next_run > now)

    cluster.wait_final(ids, alive=[a, b])
    cluster.wait_until(schedules_done, "the schedules to fire their due runs", alive=[a, b])
    scheduled = list(Job.objects.filter(task_name__in=[f"once-{i}" for i in range(5)] + ["minutely"])
                     .values_list("pk", flat=True))
    cluster.wait_final(scheduled, alive=[a, b])
    for qc in (a, b):
        qc.send(signal.SIGTERM)
    for qc in (a, b):
        assert qc.wait() == 0, qc.output()

    assert job_states(ids) == {"SUCCEEDED": 5000}
    runs = collections.Counter(j for j, _ in cluster.log())
    assert set(ids) <= set(runs)
    assert {n for j, n in runs.items()} == {1}, f"ran more than once: {[j for j, n in runs.items() if n > 1][:10]}"
    # Each ONCE schedule fired exactly once; the MINUTES one once per due time it passed.
    fired = collections.Counter(Job.objects.filter(task_name__in=[f"once-{i}" for i in range(5)] + ["minutely"])
                                .values_list("task_name", flat=True))
    steps = (Schedule.objects.get(name="minutely").next_run - first_due) // datetime.timedelta(minutes=1)
    assert steps >= 20
    assert fired == {**{f"once-{i}": 1 for i in range(5)}, "minutely": steps}
    assert set(runs) == set(ids) | set(Job.objects.filter(task_name__in=list(fired)).values_list("pk", flat=True))
    # Both clusters did share the work.
    counts = {c.pid: c.counts["succeeded"] for c in Cluster.objects.filter(pid__in=[a.pid, b.pid])}
    assert len(counts) == 2 and min(counts.values()) > 0, counts
    assert sum(counts.values()) == 5000 + sum(fired.values())


# The enqueuer beside the two clusters: single enqueues (each its own transaction), batches, and
# jobs with a concurrency key (flow control's locks) interleaved; it prints the ids it made.
ENQUEUER = """
import json, sys
from django_taskmq import async_task, enqueue_many

total, ids = int(sys.argv[1]), []
while len(ids) < total:
    ids += enqueue_many("tests.tasks.record_run", [() for _ in range(min(200, total - len(ids)))])
    for i in range(min(100, total - len(ids))):
        ids.append(async_task("tests.tasks.record_run", concurrency_key=f"k{i % 8}", concurrency_limit=2)
                   if i % 4 == 0 else async_task("tests.tasks.record_run"))
print(json.dumps(ids))
"""
UNDER_LOAD = 20_000


def test_two_clusters_and_an_enqueuer_at_once_lose_nothing_and_run_each_job_once(cluster):
    """The issue's load: 20,000 jobs enqueued while two clusters claim them (MySQL: their claims,
    the enqueuer's inserts and flow control's locks meet in InnoDB). Every job succeeds once; no
    deadlock or lock wait timeout reaches the enqueuer (it exits 0) or a job (none FAILED or DEAD)."""
    import json

    from tests.conftest import finish, start_script

    a = cluster.start("-w", "2")
    b = cluster.start("-w", "2")
    enqueuer = start_script(ENQUEUER, str(UNDER_LOAD))
    ids = json.loads(finish(enqueuer, timeout=cluster_deadline()))
    assert len(ids) == len(set(ids)) == UNDER_LOAD
    cluster.wait_final(ids, alive=[a, b], timeout=cluster_deadline())
    for qc in (a, b):
        qc.send(signal.SIGTERM)
    for qc in (a, b):
        assert qc.wait() == 0, qc.output()
        logged = qc.output(tail=10**7)
        assert not any(word in logged for word in ("Deadlock", "Lock wait timeout", "Traceback")), logged[-4000:]

    assert job_states(ids) == {"SUCCEEDED": UNDER_LOAD}
    runs = collections.Counter(j for j, _ in cluster.log())
    assert set(runs) == set(ids)
    assert set(runs.values()) == {1}, f"ran more than once: {[j for j, n in runs.items() if n > 1][:10]}"
    assert Job.objects.filter(pk__in=ids, deliveries__gt=1).count() == 0  # no claim was counted twice
    counts = {c.pid: c.counts["succeeded"] for c in Cluster.objects.filter(pid__in=[a.pid, b.pid])}
    assert len(counts) == 2 and min(counts.values()) > 0, counts


def cluster_deadline() -> float:
    from .conftest import DEADLINE

    return 2 * DEADLINE  # 20,000 jobs on a shared 2-core machine
