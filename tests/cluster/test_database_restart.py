"""A PostgreSQL restart under a running cluster loses no job (real server restart, PostgreSQL only)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest
from django.db import connections

from django_taskmq import enqueue_many

from .conftest import engine_is_postgresql, job_states

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not engine_is_postgresql(), reason="restarts the PostgreSQL server"),
]


def restart_postgresql() -> None:
    """Restart the local PostgreSQL server (pg_ctlcluster, as on these machines)."""
    versions = sorted(os.path.basename(p) for p in glob.glob("/etc/postgresql/*"))
    if not versions or not shutil.which("pg_ctlcluster"):
        if os.environ.get("CI") == "true":
            pytest.fail("pg_ctlcluster is missing: cannot restart PostgreSQL in CI")
        pytest.skip("no local PostgreSQL cluster to restart")
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"],
                   check=True, timeout=120)


def test_every_job_succeeds_across_a_postgresql_restart(cluster):
    """Jobs queued before and during a server restart all end SUCCEEDED; the cluster survives it."""
    cluster.configure(lease=5)
    ids = enqueue_many("tests.cluster.tasks_cluster.sleeper", [(0.005,)] * 600)
    qc = cluster.start("-w", "2")
    cluster.wait_until(lambda: job_states(ids).get("SUCCEEDED", 0) >= 50, "some jobs to succeed", alive=[qc])

    restart_postgresql()
    for conn in connections.all():
        conn.close()  # this test's own connection died with the server too

    later = enqueue_many("tests.cluster.tasks_cluster.sleeper", [(0.005,)] * 100)
    cluster.wait_final(ids + later, alive=[qc])
    assert job_states(ids + later) == {"SUCCEEDED": 700}
    assert qc.running(), "the cluster must survive the restart"
