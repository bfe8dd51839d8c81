"""A cluster whose database goes silent (its connections go through a TCP relay that stops passing
bytes: nothing answers, nothing is refused) while another cluster reaches the database: the silent
one stops what it runs a third of the lease after its last heartbeat, the other takes those jobs
back once the silence lasts ``dead_after`` (well under the lease), and no job runs in two clusters
at the same time. PostgreSQL (the relay is TCP); the namespace test (test_host_cut_off.py) cuts a
real link where the machine allows it.
"""

from __future__ import annotations

import collections
import signal

import pytest
from django.db import connections

from django_taskmq import enqueue_many
from django_taskmq.models import Cluster
from django_taskmq.policy.lease import dead_after, halt_after

from .conftest import engine_is_postgresql, is_alive, job_states, jobs
from .relay import Relay

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(not engine_is_postgresql(), reason="a TCP relay to the server")]

LEASE = 30.0  # halt after 10 s of silence, dead after 15 s: both well before the lease


def started(cluster, tag: str) -> list[tuple[str, int]]:
    """(job id, worker pid) of each ``start:<tag> <pid>`` line, in order."""
    return [(j, int(t.split()[1])) for j, t in cluster.log() if t.startswith(f"start:{tag} ")]


def test_a_silent_cluster_stops_its_tasks_before_another_takes_them(cluster, tmp_path):
    cluster.configure(lease=LEASE)
    db = connections["default"].settings_dict
    relay = Relay((db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)))
    hold = tmp_path / "hold"  # the silent cluster's tasks run until this file exists (or they are stopped)
    try:
        silent = cluster.start("-w", "2", "-n", "silent",
                               env={"PGHOST": "127.0.0.1", "PGPORT": str(relay.port), "TASKMQ_TEST_HOLD": str(hold)})
        ids = enqueue_many("tests.cluster.tasks_cluster.held_in", [("first",)] * 2)
        cluster.wait_until(lambda: len(started(cluster, "first")) == 2, "the silent cluster to start both jobs",
                           alive=[silent])
        # (a cluster silenced before its first heartbeat has no row to fall silent: its leases run out)
        cluster.wait_until(lambda: Cluster.objects.filter(pid=silent.pid).exists(), "its first heartbeat",
                           alive=[silent])
        first_runs = dict(started(cluster, "first"))  # job id -> the silent cluster's worker
        relay.silence()
        leases_end = min(job.lease_until for job in jobs(ids).values())
        rescuer = cluster.start("-w", "2", "-n", "rescuer")

        # Until the rescuer has started both jobs: whenever it has started one, the silent
        # cluster's worker that ran it is gone (no job runs in two clusters at once).
        overlaps: list[tuple[str, int]] = []

        def rescued() -> bool:
            runs = started(cluster, "first")[2:]
            overlaps.extend((job_id, first_runs[job_id]) for job_id, _ in runs if is_alive(first_runs[job_id]))
            return len(runs) >= 2

        cluster.wait_until(lambda: rescued() or overlaps, "the rescuer to start both jobs", alive=[silent, rescuer])
        assert not overlaps, f"a job ran in both clusters at once: {overlaps}\n{silent.output()}"
        cluster.wait_final(ids, alive=[silent, rescuer])
        assert job_states(ids) == {"SUCCEEDED": 2}
        assert {job.cluster for job in jobs(ids).values()} == {"rescuer"}
        # Taken back before the silent cluster's leases ran out: the rescuer did not wait for them.
        assert max(job.finished_at.timestamp() for job in jobs(ids).values()) < leases_end, cluster.outputs()
        output = silent.output(tail=10**7)
        assert "): stopped its 2 running task(s) before other clusters may take them over" in output, output
        assert "held by dead cluster(s)" in rescuer.output(), rescuer.output()

        relay.resume()
        hold.touch()
        # The silent cluster serves again; what it stopped was taken over, so it records nothing of it.
        later = enqueue_many("tests.cluster.tasks_cluster.held_in", [("later",)] * 2)
        cluster.wait_final(later, alive=[silent, rescuer])
        executions = collections.Counter(j for j, _ in started(cluster, "first"))
        assert executions == dict.fromkeys(ids, 2), executions
        for qc in (silent, rescuer):
            qc.send(signal.SIGTERM)
            assert qc.wait() == 0, qc.output()
    finally:
        relay.close()


def test_the_bounds_are_well_under_the_lease():
    """The documented figures (docs/architecture.rst): with the default 60 s lease a silent cluster
    stops its tasks after 20 s and the others take them back after 25 s."""
    assert (halt_after(60, 2.0), dead_after(60, 2.0)) == (20.0, 25.0)
    assert halt_after(LEASE, 2.0) < dead_after(LEASE, 2.0) < LEASE
    # A short lease: a heartbeat that is merely slow (more than one interval late) stops nothing.
    assert (halt_after(4, 2.0), dead_after(4, 2.0)) == (6.0, 11.0)
