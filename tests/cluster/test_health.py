"""Health for probes: ``manage.py qhealth`` and ``qcluster --health-port`` against real clusters,
one running, one stopped by SIGTERM, one killed, one whose heartbeat went stale, and none."""

from __future__ import annotations

import datetime
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from django.utils import timezone

from django_taskmq.models import Cluster

from ..conftest import ROOT, db_env, unreachable_database_env

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def qhealth(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "manage.py", "qhealth", *args], cwd=str(ROOT), env=db_env(),
                          capture_output=True, text=True, timeout=60)
    return done.returncode, (done.stdout + done.stderr).strip()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not listening (yet)
        return 0, str(exc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_cluster_is_unhealthy(cluster):
    code, line = qhealth()
    assert code == 1 and "no cluster on" in line, line


def test_a_running_cluster_is_healthy_until_it_stops(cluster):
    port = free_port()
    qc = cluster.start("-w", "1", "-n", "probe", "--health-port", str(port))
    cluster.wait_until(lambda: qhealth()[0] == 0, "qhealth to say the cluster is healthy", alive=[qc])
    code, line = qhealth("-n", "probe")
    assert code == 0 and line.startswith("ok: cluster 'probe'"), line
    assert qhealth("-n", "another")[0] == 1
    cluster.wait_until(lambda: get(port, "/health/ready")[0] == 200, "/health/ready to answer 200", alive=[qc])
    assert get(port, "/health/live")[0] == 200
    assert get(port, "/nothing")[0] == 404

    qc.send(signal.SIGTERM)
    assert qc.wait() == 0, qc.output()
    code, line = qhealth("-n", "probe")
    assert code == 1 and "no cluster 'probe'" in line, line
    assert get(port, "/health/live")[0] == 0  # nothing listens any more


def test_a_killed_cluster_is_unhealthy(cluster):
    qc = cluster.start("-w", "1")
    cluster.wait_until(lambda: qhealth()[0] == 0, "qhealth to say the cluster is healthy", alive=[qc])
    qc.kill_all()  # SIGKILL to the whole tree: the heartbeat row stays "running", fresh for a while
    code, line = qhealth()
    assert code == 1 and "no longer runs" in line, line


def test_a_stale_heartbeat_fails_ready_but_not_live(cluster):
    """A sentinel that stopped beating (stopped here with SIGSTOP, its heartbeat made old) fails
    /health/ready and qhealth while /health/live still answers; it recovers once it beats again."""
    port = free_port()
    qc = cluster.start("-w", "1", "--health-port", str(port))
    cluster.wait_until(lambda: get(port, "/health/ready")[0] == 200, "/health/ready to answer 200", alive=[qc])
    os.kill(qc.pid, signal.SIGSTOP)
    try:
        Cluster.objects.filter(pid=qc.pid).update(beat_at=timezone.now() - datetime.timedelta(minutes=1))
        code, line = qhealth()
        # (60 s, and the second qhealth may take to start on a busy machine)
        assert code == 1 and re.search(r"last beat 6[0-9] s ago", line), line
        status, body = get(port, "/health/ready")
        assert status == 503 and "last beat" in body, body
        assert get(port, "/health/live")[0] == 200
    finally:
        os.kill(qc.pid, signal.SIGCONT)
    cluster.wait_until(lambda: qhealth()[0] == 0, "qhealth to recover", alive=[qc])


def test_the_database_away_is_one_line(cluster):
    env = unreachable_database_env()
    done = subprocess.run([sys.executable, "manage.py", "qhealth"], cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().startswith("unhealthy: the database 'default' ("), done.stderr
    assert "does not answer" in done.stderr and "answers but" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
