"""Killed workers, a killed cluster, crash loops and timeouts: nothing is lost, nothing loops forever."""

from __future__ import annotations

import collections
import os
import random
import signal
import time

import pytest

from django_taskmq import async_task, enqueue_many
from django_taskmq.models import Cluster, DeadLetter, Job

from .conftest import is_alive, job_states, jobs

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"


def starts(log, job_id: str | None = None) -> collections.Counter:
    """Count the ``start:...`` lines per job (one per execution that began)."""
    return collections.Counter(j for j, tag in log if tag.startswith("start:") and (job_id is None or j == job_id))


def statements_in_flight() -> bool:
    """True while a session of another connection to the test database runs a statement (a server
    engine; SQLite's are over with their process)."""
    from django.db import connection

    queries = {
        "postgresql": "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                      "AND state <> 'idle'",
        "mysql": "SELECT 1 FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID() "
                 "AND COMMAND <> 'Sleep'",
    }
    if connection.vendor not in queries:
        return False
    with connection.cursor() as cursor:
        cursor.execute(queries[connection.vendor])
        return cursor.fetchone() is not None


def stop(cluster, qc) -> None:
    """SIGTERM the cluster and check the stop procedure ends with exit status 0."""
    qc.send(signal.SIGTERM)
    code = qc.wait()
    assert code == 0, f"qcluster exited {code} after SIGTERM:\n{qc.output()}"


def test_sigkill_of_a_busy_worker_redelivers_its_task_and_the_pool_recovers(cluster, tmp_path):
    pid_file = tmp_path / "victim.pid"
    victim = async_task(f"{TASKS}.victim", str(pid_file))
    qc = cluster.start("-w", "2")
    pool = cluster.wait_pool(qc, 2)
    cluster.wait_until(pid_file.exists, "the victim task to start in a worker", alive=[qc])
    worker = int(pid_file.read_text())
    assert worker in pool, f"the task ran in pid {worker}, not a child of the sentinel {pool}"

    others = enqueue_many("tests.tasks.record_run", [() for _ in range(300)])
    cluster.wait_until(lambda: len(cluster.log()) >= 30, "other jobs to run beside the victim", alive=[qc])
    os.kill(worker, signal.SIGKILL)

    cluster.wait_final([victim, *others], alive=[qc])
    cluster.wait_pool(qc, 2)
    assert worker not in qc.children() and not is_alive(worker)
    stop(cluster, qc)

    job = Job.objects.get(pk=victim)
    assert (job.state, job.deliveries) == ("SUCCEEDED", 2), (job.state, job.deliveries, job.error)
    log = cluster.log()
    assert [tag.split()[0] for j, tag in log if j == victim] == ["start:victim", "start:victim", "end:victim"]
    # Nothing else was disturbed: every other job ran once, on its first delivery.
    assert job_states(others) == {"SUCCEEDED": len(others)}
    assert {j.deliveries for j in jobs(others).values()} == {1}
    runs = collections.Counter(j for j, _ in log if j != victim)
    assert set(runs) == set(others) and set(runs.values()) == {1}
    counts = Cluster.objects.get(pid=qc.pid).counts
    assert counts["crashes"] == 1 and counts["reincarnations"] >= 1, counts


def test_sigkill_of_the_whole_cluster_loses_no_job(cluster):
    # A short lease so the new cluster reclaims the dead cluster's reservations quickly.
    cluster.configure(lease=4, queue_limit=700)
    ids = enqueue_many(f"{TASKS}.slow", [("j", 0.02) for _ in range(600)])
    first = cluster.start("-w", "2")
    cluster.wait_until(lambda: sum(1 for _, t in cluster.log() if t.startswith("end:")) >= 20,
                       "the first cluster to finish 20 jobs", alive=[first])
    tree = first.tree()
    assert len(tree) == 1 + 3 + 2, f"sentinel, pusher, monitor, scheduler process and 2 workers expected: {tree}"
    first.kill_all()
    assert not any(is_alive(p) for p in tree), "a process of the killed cluster survived"
    # A statement the killed cluster sent just before (an ack and its commit) still ends on a
    # server: the state at the kill is the one once it has.
    cluster.wait_until(lambda: not statements_in_flight(), "the killed cluster's last statements to end")

    # What the database and the run log held at the kill.
    at_kill = jobs(ids)
    reserved = [j for j, job in at_kill.items() if job.state == "RUNNING"]
    succeeded = {j for j, job in at_kill.items() if job.state == "SUCCEEDED"}
    assert len(reserved) >= 500, f"only {len(reserved)} jobs were reserved or running at the kill"
    assert len(reserved) + len(succeeded) == len(ids), collections.Counter(j.state for j in at_kill.values())
    started = set(starts(cluster.log()))
    # Started but not recorded: running at the kill (or just finished, its outcome not yet saved).
    in_flight = started - succeeded

    second = cluster.burst("-w", "2")

    assert job_states(ids) == {"SUCCEEDED": len(ids)}, f"{job_states(ids)}\n{second.output()}"
    runs = starts(cluster.log())
    assert set(runs) == set(ids), "some job never ran"
    twice = {j for j, n in runs.items() if n > 1}
    assert max(runs.values()) <= 2
    assert twice <= in_flight, f"jobs ran twice without being in flight at the kill: {sorted(twice - in_flight)[:5]}"
    after = jobs(ids)
    assert {after[j].deliveries for j in succeeded} == {1}
    assert {after[j].deliveries for j in reserved} == {2}, "a reclaimed reservation counts one more delivery"


def test_a_task_that_always_crashes_its_worker_reaches_the_dlq(cluster):
    crasher = async_task(f"{TASKS}.crash_logged", max_deliveries=3)
    qc = cluster.start("-w", "2")
    cluster.wait_final([crasher], alive=[qc])

    job = Job.objects.get(pk=crasher)
    assert (job.state, job.deliveries) == ("DEAD", 3), (job.state, job.deliveries, job.error)
    assert "WorkerDied" in job.error
    letters = list(DeadLetter.objects.filter(job_id=crasher))
    assert len(letters) == 1 and letters[0].deliveries == 3, [(d.reason, d.deliveries) for d in letters]
    cluster.wait_pool(qc, 2)
    # The cluster is healthy and the crash loop is over: later work runs, the crasher does not.
    after = async_task("tests.tasks.record_run")
    cluster.wait_final([after], alive=[qc])
    stop(cluster, qc)
    assert Job.objects.get(pk=after).state == "SUCCEEDED"
    assert starts(cluster.log(), crasher)[crasher] == 3
    assert Job.objects.get(pk=crasher).state == "DEAD"
    assert Cluster.objects.get(pid=qc.pid).counts["crashes"] == 3


def test_a_task_past_its_timeout_is_killed_retried_then_dead(cluster):
    sleeper = async_task(f"{TASKS}.sleeper", 30, timeout=1, max_deliveries=2)
    qc = cluster.start("-w", "2")
    cluster.wait_final([sleeper], alive=[qc])

    job = Job.objects.get(pk=sleeper)
    assert (job.state, job.deliveries) == ("DEAD", 2), (job.state, job.deliveries, job.error)
    assert "TaskTimeout" in job.error and "timeout" in job.error
    letter = DeadLetter.objects.get(job_id=sleeper)
    assert letter.deliveries == 2 and "TaskTimeout" in letter.error
    log = cluster.log()
    ran_in = [int(tag.split()[1]) for j, tag in log if j == sleeper and tag.startswith("start:")]
    assert len(ran_in) == 2 and not any(tag.startswith("end:") for _, tag in log), log
    # The killed workers are gone and the pool is back to full size.
    pool = cluster.wait_pool(qc, 2)
    assert not set(ran_in) & set(pool) and not any(is_alive(p) for p in ran_in)
    stop(cluster, qc)
    assert Cluster.objects.get(pid=qc.pid).counts["timeouts"] == 2


def test_workers_killed_at_random_instants_never_stall_the_cluster(cluster):
    ids = enqueue_many(f"{TASKS}.slow", [("r", 0.01) for _ in range(1000)])
    qc = cluster.start("-w", "2")
    cluster.wait_pool(qc, 2)
    killed: list[int] = []
    rng = random.Random(1234)
    while len(killed) < 8:
        cluster.wait_until(lambda: len(cluster.log()) >= 150 * (len(killed) + 1),
                           lambda: f"progress after {len(killed)} kills; {dict(job_states(ids))}", alive=[qc])
        # A worker is a pid that logged a task run and is still a child of the sentinel.
        workers = sorted({int(tag.split()[1]) for _, tag in cluster.log()[-20:] if tag.startswith("start:")}
                         & set(qc.children()))
        if workers:
            victim = rng.choice(workers)
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
        time.sleep(rng.random() * 0.05)

    cluster.wait_final(ids, alive=[qc])
    cluster.wait_pool(qc, 2)
    stop(cluster, qc)

    assert job_states(ids) == {"SUCCEEDED": 1000}
    runs = starts(cluster.log())
    assert set(runs) == set(ids)
    deliveries = {j: job.deliveries for j, job in jobs(ids).items()}
    # Only a killed worker's task is delivered again (once per kill), and a task runs at most
    # once per delivery (the same task may be hit by two kills in a row).
    assert sum(d - 1 for d in deliveries.values()) <= len(killed), collections.Counter(deliveries.values())
    assert [j for j in ids if runs[j] > deliveries[j]] == []
    assert Cluster.objects.get(pid=qc.pid).counts["crashes"] <= len(killed)


def started_at(pid: int) -> int:
    """The start time of ``pid`` in clock ticks since boot (/proc/<pid>/stat, field 22)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[19])


def test_a_killed_pusher_and_monitor_are_replaced_and_work_goes_on(cluster):
    """SIGKILL of the pusher, the monitor and the scheduler process of an idle cluster (the
    sentinel spawns the pusher first, then the workers, then the monitor and the scheduler
    process): new ones are spawned, the workers are left alone, and the jobs enqueued afterwards
    each run once."""
    qc = cluster.start("-w", "2")
    children = sorted(cluster.wait_pool(qc, 2), key=lambda pid: (started_at(pid), pid))
    helpers, workers = [children[0], *children[-2:]], children[1:-2]
    for pid in helpers:
        os.kill(pid, signal.SIGKILL)
    cluster.wait_until(lambda: len(qc.children()) == 5 and not set(helpers) & set(qc.children()),
                       lambda: f"5 children, none of {helpers}; now {qc.children()}", alive=[qc])
    assert set(workers) <= set(qc.children())
    ids = enqueue_many(f"{TASKS}.slow", [(f"a{i}", 0) for i in range(50)])
    cluster.wait_final(ids, alive=[qc])
    output = qc.output()
    stop(cluster, qc)

    assert job_states(ids) == {"SUCCEEDED": 50}
    assert collections.Counter(j for j, tag in cluster.log() if tag.startswith("start:")) == dict.fromkeys(ids, 1)
    assert "pusher died" in output and "monitor died" in output and "scheduler process died" in output


def test_a_cluster_killed_whole_comes_back_at_once_on_its_host(cluster):
    """SIGKILL of a cluster's whole process group while two jobs run, then a new cluster on the
    same host: the dead cluster's heartbeat row names this host and a pid that is gone, so the new
    one gives its reservations back at once (not a lease later); each job runs again once."""
    gate = cluster.gate("rerun")
    ids = [async_task(f"{TASKS}.gated", f"held{i}", gate) for i in range(2)]
    first = cluster.start("-w", "2")
    cluster.wait_until(lambda: sum(1 for _, t in cluster.log() if t.startswith("start:held")) == 2,
                       "both jobs to start", alive=[first])
    cluster.wait_until(lambda: Cluster.objects.filter(pid=first.pid).exists(), "its first heartbeat", alive=[first])
    tree = first.tree()
    first.kill_all()
    assert not any(is_alive(p) for p in tree)
    held = jobs(ids)
    assert {job.state for job in held.values()} == {"RUNNING"}
    leases_end = min(job.lease_until for job in held.values())
    cluster.open(gate)  # the second runs end at once

    second = cluster.start("-w", "2")
    cluster.wait_final(ids, alive=[second])

    after = jobs(ids)
    assert {job.state for job in after.values()} == {"SUCCEEDED"}
    assert {job.deliveries for job in after.values()} == {2}, "the killed run counts as a delivery"
    # Taken back before the dead cluster's leases ran out: they did not wait for them.
    assert max(job.finished_at.timestamp() for job in after.values()) < leases_end, second.output()
    assert starts(cluster.log()) == dict.fromkeys(ids, 2), cluster.log()
    assert f"held by dead cluster(s) {Cluster.objects.get(pid=first.pid).id} (gone from this host" in second.output()
    stop(cluster, second)


def test_a_cluster_killed_before_its_first_heartbeat_is_found_dead_at_once(cluster):
    """The cluster's row is written before anything is claimed: a cluster killed (its whole process
    group) the moment its jobs are claimed, before the first timed heartbeat, is found dead by its
    successor on the same host, and its jobs come back at once, not a lease later."""
    gate = cluster.gate("early")
    ids = [async_task(f"{TASKS}.gated", f"early{i}", gate) for i in range(2)]
    first = cluster.start("-w", "2")
    deadline = time.monotonic() + 60
    while job_states(ids) != {"RUNNING": 2} and time.monotonic() < deadline and first.running():
        time.sleep(0.01)  # the kill lands within milliseconds of the claim, before the first timed heartbeat
    first.kill_all()
    assert job_states(ids) == {"RUNNING": 2}, first.output()
    assert Cluster.objects.filter(pid=first.pid).count() == 1, "no row: its successor cannot tell it is dead"
    leases_end = min(job.lease_until for job in jobs(ids).values())
    cluster.open(gate)

    second = cluster.start("-w", "2")
    cluster.wait_final(ids, alive=[second])
    after = jobs(ids)
    assert {job.state for job in after.values()} == {"SUCCEEDED"}
    assert max(job.finished_at.timestamp() for job in after.values()) < leases_end, second.output()
    assert f"held by dead cluster(s) {Cluster.objects.get(pid=first.pid).id} (gone from this host" in second.output()
    stop(cluster, second)


def test_a_wedged_monitor_is_noticed_and_replaced_and_every_job_recorded_once(cluster):
    """A monitor that takes no turn while outcomes wait for it (stopped: SIGSTOP, as one waiting for
    ever on a connection would be): after a sixth of the lease the cluster starts no waiting task,
    after a third it replaces the monitor, and the new one records what the old one held; every job
    runs once and is recorded once."""
    cluster.configure(lease=12)  # no new starts after 2 s without a turn, replaced after 4 s
    qc = cluster.start("-w", "2")
    children = sorted(cluster.wait_pool(qc, 2), key=lambda pid: (started_at(pid), pid))
    monitor = children[-2]  # pusher, workers, monitor, scheduler process
    os.kill(monitor, signal.SIGSTOP)
    ids = enqueue_many(f"{TASKS}.slow", [(f"w{i}", 0.05) for i in range(30)])
    cluster.wait_until(lambda: f"the monitor (pid {monitor}) is wedged" in qc.output(),
                       lambda: f"the cluster to notice the wedged monitor:\n{qc.output()}", alive=[qc])
    cluster.wait_final(ids, alive=[qc])

    assert job_states(ids) == {"SUCCEEDED": 30}
    assert starts(cluster.log()) == dict.fromkeys(ids, 1), "a job ran twice"
    assert {job.deliveries for job in jobs(ids).values()} == {1}
    output = qc.output()
    assert output.index(f"the monitor (pid {monitor}) has taken no turn for") < output.index("is wedged")
    assert not is_alive(monitor)
    stop(cluster, qc)
