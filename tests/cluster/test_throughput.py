"""Many jobs through real clusters: each runs exactly once and ends SUCCEEDED."""

from __future__ import annotations

import collections
import signal

import pytest

from django_taskmq import enqueue_many
from django_taskmq.observability import histograms, statistics
from django_taskmq.models import Cluster, Job

from .conftest import job_states

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_1000_tasks_through_2_workers_each_run_once(cluster):
    ids = enqueue_many("tests.tasks.record_run", [() for _ in range(1000)])

    qc = cluster.burst("-w", "2")

    assert job_states(ids) == {"SUCCEEDED": 1000}
    runs = collections.Counter(job_id for job_id, _ in cluster.log())
    assert set(runs) == set(ids), "every job ran, and nothing else did"
    assert max(runs.values()) == 1, f"jobs that ran more than once: {[j for j, n in runs.items() if n > 1][:10]}"
    assert set(Job.objects.filter(pk__in=ids[:500]).values_list("deliveries", flat=True)) == {1}
    beat = Cluster.objects.get(pid=qc.pid)
    assert beat.state == "stopped" and beat.workers == 0
    assert beat.counts["succeeded"] == 1000 and beat.counts["crashes"] == 0


def test_the_dashboard_s_last_minute_survives_save_limit(cluster):
    """With ``save_limit=10`` and 1,000 successes in a minute, the clusters delete nearly every
    success row as they go; the dashboard's last-minute figure (the rollup) and the wait and run
    time histograms' counts (the timing rollup) stay within 5 % of 1,000, where counting job rows
    would show what is left."""
    cluster.configure(save_limit=10)
    qc = cluster.start("-w", "2")
    enqueue_many("tests.tasks.noop", [() for _ in range(1000)])

    def succeeded() -> int:  # the cluster's own counters, from its heartbeat
        return sum(int((c.counts or {}).get("succeeded", 0)) for c in Cluster.objects.all())

    cluster.wait_until(lambda: succeeded() >= 1000, lambda: f"1,000 successes; {succeeded()} so far", alive=[qc])
    cluster.wait_until(lambda: Job.objects.filter(state="SUCCEEDED").count() <= 100,
                       lambda: f"save_limit to prune; {Job.objects.filter(state='SUCCEEDED').count()} rows left",
                       alive=[qc])
    figures = statistics.throughput()
    timing = histograms.last_hour()[("tests.tasks.noop", "default")]
    rows = Job.objects.filter(state="SUCCEEDED").count()
    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
    print(f"last minute: {figures.succeeded_minute} from the rollup; {rows} success rows left")
    assert 950 <= figures.succeeded_minute <= 1050, figures
    assert figures.succeeded_hour == figures.succeeded_minute == sum(ok for _, ok, _f in figures.per_minute)
    # The histograms too (the timing rollup): every outcome timed once, in both, whatever was pruned.
    assert 950 <= timing.wait.count <= 1050 and timing.run.count == timing.wait.count, timing
    assert timing.wait.buckets[-1] <= timing.wait.count and timing.run.buckets == sorted(timing.run.buckets)
