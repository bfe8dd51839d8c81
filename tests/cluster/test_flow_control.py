"""Flow control with real clusters: keys and limits hold across clusters, a held job is never
delivered, and a key held by a killed cluster frees with its lease (orders and counts, not timings)."""

from __future__ import annotations

import collections
import signal

import pytest

from django_taskmq import Priority, async_task, enqueue_many
from django_taskmq.models import Job

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"


def most_at_once(log, prefix: str) -> int:
    """The largest number of ``prefix`` tasks between their start and end, from the log's order."""
    running, most = 0, 0
    for _, tag in log:
        if tag.startswith(f"start:{prefix}"):
            running += 1
            most = max(most, running)
        elif tag.startswith(f"end:{prefix}"):
            running -= 1
    return most


def test_one_key_never_overlaps_across_two_clusters_while_distinct_keys_run_in_parallel(cluster):
    one = [async_task(f"{TASKS}.slow", f"one-{i}", 0.05, concurrency_key="one") for i in range(20)]
    many = [async_task(f"{TASKS}.slow", f"many-{i}", 0.05, concurrency_key=f"key-{i}") for i in range(20)]
    first = cluster.start("-w", "2", "-n", "left")
    second = cluster.start("-w", "2", "-n", "right")
    cluster.wait_final(one + many, alive=[first, second])
    log = cluster.log()
    assert most_at_once(log, "one-") == 1
    assert most_at_once(log, "many-") > 1
    assert set(Job.objects.filter(pk__in=one + many).values_list("state", "deliveries")) == {("SUCCEEDED", 1)}


@pytest.mark.parametrize("pool", [("-w", "4"), ("-w", "1", "--threads", "8")], ids=["processes", "threads"])
def test_a_limit_of_three_runs_three_at_once_and_never_more(cluster, pool):
    ids = [async_task(f"{TASKS}.slow", f"three-{i}", 0.1, concurrency_key="reports", concurrency_limit=3)
           for i in range(12)]
    cluster.burst(*pool)
    assert most_at_once(cluster.log(), "three-") == 3
    assert set(Job.objects.filter(pk__in=ids).values_list("state", "deliveries")) == {("SUCCEEDED", 1)}


def test_a_rate_limit_holds_over_two_clusters(cluster):
    """5/s: no closed 1-second window of starts holds more than the documented maximum (6: the
    limit, plus one whose dispatch lagged its claim)."""
    ids = enqueue_many(f"{TASKS}.stamped", [(f"r{i}",) for i in range(16)], rate_limit="5/s")
    first = cluster.start("-w", "2", "-n", "left")
    second = cluster.start("-w", "2", "-n", "right")
    cluster.wait_final(ids, alive=[first, second])
    starts = sorted(float(tag.split()[1]) for _, tag in cluster.log() if tag.startswith("start:r"))
    assert len(starts) == 16
    assert max(sum(1 for t in starts if s <= t <= s + 1.0) for s in starts) <= 6
    assert set(Job.objects.filter(pk__in=ids).values_list("state", "deliveries")) == {("SUCCEEDED", 1)}


def test_urgent_work_on_a_free_key_passes_held_work_and_other_queues_go_on(cluster):
    gate = cluster.gate("holder")
    holder = async_task(f"{TASKS}.gated", "holder", gate, concurrency_key="busy")
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: any(t.startswith("start:holder") for _, t in cluster.log()), "the holder to start",
                       alive=[qc])
    normal = [async_task(f"{TASKS}.slow", f"normal-{i}", 0.01, concurrency_key="busy") for i in range(3)]
    critical = async_task(f"{TASKS}.slow", "critical", 0.01, concurrency_key="free", priority=Priority.CRITICAL)
    other = [async_task(f"{TASKS}.slow", f"other-{i}", 0.01, queue="b", concurrency_key="busy-b") for i in range(1)]
    cluster.wait_final([critical] + other, alive=[qc])
    assert Job.objects.filter(pk__in=normal, state="QUEUED", deliveries=0).count() == 3  # held, not delivered
    cluster.open(gate)
    cluster.wait_final([holder] + normal, alive=[qc])
    tags = [t.split()[0] for _, t in cluster.log() if t.startswith("start:")]
    assert tags.index("start:critical") < min(tags.index(f"start:normal-{i}") for i in range(3))
    assert set(Job.objects.filter(pk__in=normal).values_list("deliveries", flat=True)) == {1}


def test_a_key_held_by_a_killed_cluster_frees_when_its_lease_runs_out(cluster):
    cluster.configure(lease=3)
    gate = cluster.gate("never")
    victim = async_task(f"{TASKS}.gated", "victim", gate, 30, concurrency_key="k")
    waiting = async_task(f"{TASKS}.slow", "waiting", 0.01, concurrency_key="k")
    doomed = cluster.start("-w", "1", "-n", "doomed")
    cluster.wait_until(lambda: any(t.startswith("start:victim") for _, t in cluster.log()), "the victim to start",
                       alive=[doomed])
    doomed.kill_all()
    cluster.open(gate)  # its next delivery ends at once
    survivor = cluster.start("-w", "2", "-n", "survivor")
    cluster.wait_final([victim, waiting], alive=[survivor])
    runs = collections.Counter(t.split()[0] for _, t in cluster.log() if t.startswith("start:"))
    assert runs == {"start:victim": 2, "start:waiting": 1}
    assert Job.objects.get(pk=victim).deliveries == 2 and Job.objects.get(pk=waiting).deliveries == 1
    # After the kill, the victim's second run and the waiting job never held the key together.
    log = cluster.log()
    after_kill = log[[t.startswith("start:victim") for _, t in log].index(True) + 1:]
    assert most_at_once(after_kill, "") == 1
