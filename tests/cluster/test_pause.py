"""Pausing a queue with real clusters: nothing of it starts while paused (what a cluster had reserved
of it goes back, uncounted), other queues carry on, everything runs after the resume with one
delivery each, and enqueues succeed while paused."""

from __future__ import annotations

import signal
import time

import pytest

from django_taskmq import enqueue_many, pause_queue, resume_queue
from django_taskmq.models import Job

from .conftest import engine_is_server, job_states  # noqa: F401 (engine_is_server: in skipif)

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def started(cluster, ids: list[str]) -> set[str]:
    wanted = set(ids)
    return {job_id for job_id, tag in cluster.log() if job_id in wanted and tag.startswith("start:")}


@pytest.mark.skipif("not engine_is_server()", reason="several clusters share one database on a server engine")
def test_two_clusters_start_nothing_of_a_paused_queue_until_it_resumes(cluster):
    pause_queue("a")
    a_ids = enqueue_many("tests.cluster.tasks_cluster.slow", [("a", 0.01) for _ in range(60)], queue="a")
    b_ids = enqueue_many("tests.cluster.tasks_cluster.slow", [("b", 0.01) for _ in range(60)], queue="b")
    one, two = cluster.start("-w", "2"), cluster.start("-w", "2")
    cluster.wait_final(b_ids, alive=[one, two])
    time.sleep(2)  # two more reads of the pauses by each pusher
    assert started(cluster, a_ids) == set()
    assert job_states(a_ids) == {"QUEUED": 60}
    assert set(Job.objects.filter(pk__in=a_ids).values_list("deliveries", flat=True)) == {0}

    resume_queue("a")
    cluster.wait_final(a_ids, alive=[one, two])
    for qc in (one, two):
        qc.send(signal.SIGTERM)
    for qc in (one, two):
        assert qc.wait() == 0, qc.output()
    assert job_states(a_ids + b_ids) == {"SUCCEEDED": 120}
    assert set(Job.objects.filter(pk__in=a_ids).values_list("deliveries", flat=True)) == {1}
    assert started(cluster, a_ids) == set(a_ids)


def test_a_pause_stops_starts_within_a_second_and_gives_back_what_waits(cluster):
    """Paused while a cluster works through the queue (its buffer full of the queue's jobs): starts
    stop within about a second, the reserved ones go back uncounted, and all run after the resume."""
    ids = enqueue_many("tests.cluster.tasks_cluster.slow", [("a", 0.05) for _ in range(400)], queue="a")
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: len(started(cluster, ids)) >= 10, "the first jobs to start", alive=[qc])
    pause_queue("a")
    time.sleep(3)  # a read of the pauses (1 s), what workers hold already ends (prefetch x 0.05 s)
    before = started(cluster, ids)
    time.sleep(2)
    assert started(cluster, ids) == before, "jobs of the paused queue started"
    waiting = Job.objects.filter(pk__in=ids, state="QUEUED")
    assert waiting.count() == 400 - len(before) > 0
    assert set(waiting.values_list("deliveries", flat=True)) == {0}  # given back, not counted
    assert not Job.objects.filter(pk__in=ids, state="RUNNING").exists()

    resume_queue("a")
    cluster.wait_final(ids, alive=[qc])
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
    assert job_states(ids) == {"SUCCEEDED": 400}
    assert set(Job.objects.filter(pk__in=ids).values_list("deliveries", flat=True)) == {1}
    assert "paused queue(s): a" in qc.output(tail=100_000)
