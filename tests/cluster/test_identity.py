"""One identity per cluster process: two clusters of one long name on one host are two heartbeat
rows, and stopping one changes only its own; a name the heartbeat cannot hold is refused at start."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from django_taskmq import async_task
from django_taskmq.models import Cluster, Job

from ..conftest import ROOT, db_env
from .test_health import qhealth

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

LONG_NAME = "billing-reports-priority-eu-west-1-nightly-reconciliation"


def test_two_clusters_of_one_long_name_on_one_host_have_a_row_each(cluster):
    assert len(LONG_NAME) == 57
    a = cluster.start("-w", "1", "-n", LONG_NAME)
    b = cluster.start("-w", "1", "-n", LONG_NAME)

    def rows() -> dict[int, Cluster]:
        return {row.pid: row for row in Cluster.objects.filter(name=LONG_NAME, state="running")}

    cluster.wait_until(lambda: rows().keys() == {a.pid, b.pid}, lambda: f"a running row for each of {a.pid} "
                       f"and {b.pid}; rows now {[(r.pk, r.pid, r.state) for r in Cluster.objects.all()]}",
                       alive=[a, b])
    assert len({row.pk for row in rows().values()}) == 2
    job_id = async_task("tests.tasks.record_run", "claimed")
    cluster.wait_final([job_id], alive=[a, b])
    assert Job.objects.get(pk=job_id).cluster == LONG_NAME  # the name itself, not a piece of an id

    a.send(signal.SIGTERM)
    assert a.wait() == 0, a.output()
    assert Cluster.objects.get(pid=a.pid).state == "stopped"
    assert Cluster.objects.get(pid=b.pid).state == "running"
    code, line = qhealth("-n", LONG_NAME)
    assert code == 0 and f"pid {b.pid}" in line, line
    b.send(signal.SIGTERM)
    assert b.wait() == 0, b.output()


def test_a_name_too_long_for_the_heartbeat_is_refused_at_start(transactional_db):
    """Refused before the checks and the database: the run's timeout bounds how long that takes."""
    done = subprocess.run([sys.executable, "manage.py", "qcluster", "-n", "x" * 300], cwd=str(ROOT), env=db_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--name" in done.stderr and "at most 100 characters, got 300" in done.stderr, done.stderr
    assert not Cluster.objects.exists()
