"""Concurrency: several real processes reserving from one database never receive the same job
twice while leases hold, and together they receive every job.

ORM only (``orm_broker``): processes share one database; the in-memory broker has no processes.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from django_taskmq import enqueue_many
from django_taskmq.models import Job, State
from tests.conftest import finish, start_script

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RESERVER = """
    import os, sys, time
    from django_taskmq.brokers import get_broker
    ready, go, owner, limit, queues = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(",")
    broker = get_broker()
    broker.reserve(queues, 0, 600, owner)  # connect before the start line
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.002)
    empty = 0
    while empty < 3:
        got = broker.reserve(queues, limit, 600, owner)
        for r in got:
            print(r.job_id)
        empty = 0 if got else empty + 1
        if not got:
            time.sleep(0.02)
"""


def run_reservers(tmp_path: Path, processes: int, limit: int, queues: list[str]) -> list[list[str]]:
    """Start ``processes`` reservers at once; return the job ids each received."""
    go = tmp_path / "go"
    procs = [
        start_script(RESERVER, str(tmp_path / f"ready{i}"), str(go), f"p{i}", str(limit), ",".join(queues))
        for i in range(processes)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready{i}").exists() for i in range(processes)):
        assert time.monotonic() < deadline, "reservers did not start"
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"reserver exited early: {p.communicate()[1]}")
        time.sleep(0.01)
    go.touch()
    return [finish(p).split() for p in procs]


def assert_each_job_received_once(received: list[list[str]], ids: list[str]) -> None:
    counts = Counter(job_id for got in received for job_id in got)
    duplicates = {job_id: n for job_id, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} job(s) received more than once"
    assert set(counts) == set(ids)
    assert Job.objects.filter(state=State.RUNNING).count() == len(ids)
    # Each holder's lease is its own: the owner recorded on the row is the process that got it.
    owners = dict(Job.objects.values_list("id", "lease_owner"))
    for i, got in enumerate(received):
        assert all(owners[job_id] == f"p{i}" for job_id in got)


def test_four_processes_never_receive_the_same_job_twice(orm_broker, tmp_path):
    """4 processes reserve batches of 20 from 2000 jobs: every job received exactly once."""
    ids = enqueue_many("tests.tasks.noop", [(i,) for i in range(2000)])
    received = run_reservers(tmp_path, processes=4, limit=20, queues=["default"])
    assert_each_job_received_once(received, ids)


def test_four_processes_on_weighted_queues_and_priorities(orm_broker, tmp_path):
    """The same guarantee across two weighted queues and several priority bands."""
    ids = []
    for queue in ("a", "b"):
        for priority in (0, 5):
            ids += enqueue_many("tests.tasks.noop", [(i,) for i in range(500)], queue=queue, priority=priority)
    received = run_reservers(tmp_path, processes=4, limit=20, queues=["a", "b"])
    assert_each_job_received_once(received, ids)
