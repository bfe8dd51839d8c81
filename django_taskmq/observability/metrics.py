"""Prometheus metrics of the queues and the clusters, in the text exposition format.

Gauges, read from the database at each scrape (:mod:`.statistics`):

``taskmq_jobs{queue, state}``
    jobs per queue and state, every state but ``succeeded`` (successes are pruned by
    ``save_limit``, and counting them reads the whole table: use the counter below). The stored
    state ``RUNNING`` is two label values: ``running``, the jobs a worker executes (its cluster's
    heartbeat says so), and ``reserved``, the ones a cluster holds (prefetched) and has not started;
    their sum is the ``RUNNING`` rows
``taskmq_ready_jobs{queue}``, ``taskmq_delayed_jobs{queue}``
    ready jobs (queued or retrying, visible now); queued jobs not visible yet
``taskmq_dead_letters_waiting{queue}``
    dead letters not replayed
``taskmq_oldest_ready_age_seconds{queue}``
    how long the oldest ready job has been waiting (0 when none is)
``taskmq_clusters_alive``, ``taskmq_workers_alive``
    clusters with a fresh heartbeat, and their worker processes
``taskmq_clock_skew_seconds{cluster, host}``
    each cluster's host clock minus the database's at its last heartbeat (server engines only;
    the queue uses the database's clock, so this is for alerting on hosts that drift)

Histograms of the jobs that finished in the last hour, per task and queue (:mod:`.histograms`, read
from the timing rollup, so pruning takes nothing from them; gauge histograms: a window, not
counters since start, so cumulative ``_bucket``, ``_gcount`` and ``_gsum``):

``taskmq_job_wait_seconds{task, queue, le}``
    from enqueue to the first execution's start
``taskmq_job_run_seconds{task, queue, le}``
    the latest execution's run time

Counters, summed over the clusters' heartbeats (``counts["queues"]``):

``taskmq_jobs_finished_total{queue, outcome}``
    tasks finished by the workers per queue and outcome: ``succeeded``, ``failed``, ``timeout``,
    ``crash``

Counter, from the pruning chore's row (:class:`~.models.Chore`):

``taskmq_pruned_jobs_total``
    finished jobs deleted by retention and ``save_limit`` (by the clusters and ``qprune``)
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import histograms, statistics
from ..brokers import get_broker
from ..conf import get_settings
from ..policy.distribution import BUCKETS
from ..policy.states import JobState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The heartbeat's outcome names -> the ``outcome`` label.
OUTCOME_LABELS = {"succeeded": "succeeded", "failed": "failed", "timeouts": "timeout", "crashes": "crash",
                  "suspended": "suspended"}
GAUGED_STATES = [state for state in JobState if state is not JobState.SUCCEEDED]


class TaskMQCollector(Collector):
    """Collects every metric of this module on each scrape, from ``TASKMQ['database']``."""

    def __init__(self, alias: str | None = None) -> None:
        self.alias = alias

    def collect(self) -> Iterator[Metric]:
        clusters = statistics.clusters_alive(self.alias, with_task_names=False)
        queues = statistics.queue_stats(self.alias, clusters=clusters)
        names = [q.name for q in queues]
        split = {q.name: (q.running, q.reserved) for q in queues}  # RUNNING: started, and only reserved

        jobs = GaugeMetricFamily("taskmq_jobs", "Jobs per queue and state (every state but succeeded; "
                                 "RUNNING as running, started on a worker, and reserved, not started).",
                                 labels=["queue", "state"])
        counts = statistics.jobs_by_queue_and_state(self.alias, states=[s.value for s in GAUGED_STATES])
        for queue in sorted(set(names) | {q for q, _ in counts}):
            for state in GAUGED_STATES:
                if state is JobState.RUNNING:
                    running, reserved = split.get(queue, (counts.get((queue, state.value), 0), 0))
                    jobs.add_metric([queue, "running"], running)
                    jobs.add_metric([queue, "reserved"], reserved)
                else:
                    jobs.add_metric([queue, state.value.lower()], counts.get((queue, state.value), 0))
        yield jobs

        ready = GaugeMetricFamily("taskmq_ready_jobs", "Ready jobs (queued or retrying, visible now).",
                                  labels=["queue"])
        delayed = GaugeMetricFamily("taskmq_delayed_jobs", "Queued jobs not visible yet (delay, eta).",
                                    labels=["queue"])
        dead = GaugeMetricFamily("taskmq_dead_letters_waiting", "Dead letters not replayed.", labels=["queue"])
        oldest = GaugeMetricFamily("taskmq_oldest_ready_age_seconds",
                                   "Seconds the oldest ready job has waited since it became visible (0: none waits).",
                                   labels=["queue"])
        for q in queues:
            ready.add_metric([q.name], q.ready_total)
            delayed.add_metric([q.name], q.delayed)
            dead.add_metric([q.name], q.dead_letters)
            oldest.add_metric([q.name], round(q.oldest_ready_age or 0.0, 3))
        yield from (ready, delayed, dead, oldest)
        suspended = GaugeMetricFamily("taskmq_suspended_jobs", "Durable jobs that sleep or wait for a signal "
                                      "(queued, holding no worker).", labels=["kind"])
        for kind, count in sorted(get_broker(self.alias).suspended().items()):
            suspended.add_metric([kind], count)
        yield suspended

        yield GaugeMetricFamily("taskmq_clusters_alive", "Clusters with a fresh heartbeat that have not stopped.",
                                value=len(clusters))
        yield GaugeMetricFamily("taskmq_workers_alive", "Worker processes of the clusters alive.",
                                value=sum(c.workers for c in clusters))
        skew = GaugeMetricFamily("taskmq_clock_skew_seconds", "Each cluster's host clock minus the database's "
                                 "at its last heartbeat (positive: the host is ahead).", labels=["cluster", "host"])
        for c in clusters:
            if c.clock_skew is not None:
                skew.add_metric([c.id, c.host], c.clock_skew)
        yield skew

        yield from timing_histograms(self.alias)

        finished = CounterMetricFamily("taskmq_jobs_finished", "Tasks finished by the workers, per queue and "
                                       "outcome, from the clusters' heartbeats.", labels=["queue", "outcome"])
        for (queue, outcome), value in sorted(statistics.finished_counters(self.alias).items()):
            finished.add_metric([queue, OUTCOME_LABELS.get(outcome, outcome)], value)
        yield finished

        yield CounterMetricFamily("taskmq_pruned_jobs", "Finished jobs deleted by retention and save_limit.",
                                  value=statistics.pruning(self.alias)["deleted"])


def timing_histograms(alias: str | None = None) -> Iterator[Metric]:
    """The wait and run time histograms of the last hour, per task and queue."""
    timings = histograms.last_hour(alias)
    wait = GaugeHistogramMetricFamily("taskmq_job_wait_seconds", "Seconds from enqueue to the first execution's "
                                      "start, of the jobs that finished in the last hour.", labels=["task", "queue"])
    run = GaugeHistogramMetricFamily("taskmq_job_run_seconds", "Seconds the latest execution ran, of the jobs "
                                     "that finished in the last hour.", labels=["task", "queue"])
    for (task, queue), timing in sorted(timings.items()):
        for family, histogram in ((wait, timing.wait), (run, timing.run)):
            buckets = [(f"{bound:g}", count) for bound, count in zip(BUCKETS, histogram.buckets)]
            family.add_metric([task, queue], buckets + [("+Inf", histogram.count)], histogram.total)
    yield from (wait, run)


def exposition(alias: str | None = None) -> bytes:
    """Return every metric in the Prometheus text format (one fresh registry per scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TaskMQCollector(alias))
    return generate_latest(registry)


# The view scrapers read (was django_taskmq.views.metrics), mounted by django_taskmq.urls.


def allowed(request: HttpRequest) -> bool:
    """A staff session, or ``Authorization: Bearer <TASKMQ['metrics_token']>`` when a token is set."""
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token = get_settings().metrics_token
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


@never_cache
@require_GET
def view(request: HttpRequest) -> HttpResponse:
    """The metrics in the Prometheus text format; 403 for anyone else."""
    if not allowed(request):
        raise PermissionDenied("a staff session or the metrics bearer token is needed")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
