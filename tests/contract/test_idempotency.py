"""Idempotency keys: the same key within ``idempotency_ttl`` returns the same job id and enqueues
nothing, also when several processes call at once; after the TTL a new job is created.

The tests taking ``broker`` run on each broker (see conftest.py); the one with several processes
is the ORM broker's own.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq.models import Job
from django_taskmq.policy.states import JobState
from tests.conftest import finish, start_script
from tests.contract.helpers import ack, job, put

ATTEMPTS = """
    import sys
    from django_taskmq import async_task
    ready, go, keys = sys.argv[1], sys.argv[2], int(sys.argv[3])
    import os, time
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(keys):
        print(f"k{i} {async_task('tests.tasks.noop', i, key=f'k{i}')}", flush=True)
"""


def ready(broker) -> int:
    """How many jobs wait, ready now (what a second enqueue would have added to)."""
    return sum(s["ready"] for s in broker.stats())


def test_same_key_returns_the_same_id_and_one_job(broker):
    """A second call with the same key returns the first id and adds no job."""
    first = put(broker, 1, 2, func="tests.tasks.add", key="order-42")
    second = put(broker, 1, 2, func="tests.tasks.add", key="order-42")
    assert second == first
    assert ready(broker) == 1


def test_different_keys_make_different_jobs(broker):
    """Distinct keys (and calls without a key) each make a job."""
    ids = {put(broker, key="a"), put(broker, key="b"), put(broker), put(broker)}
    assert len(ids) == 4 == ready(broker)


def test_same_key_after_the_job_finished_still_returns_it_within_the_ttl(broker):
    """The key holds for the TTL, not only while the job is queued."""
    first = put(broker, key="k")
    (r,) = broker.reserve(["default"], 1, 60, "t")
    ack(broker, r)
    assert put(broker, key="k") == first
    assert ready(broker) == 0
    assert job(broker, first).state == JobState.SUCCEEDED


def test_after_the_ttl_a_new_job_is_created(broker, reconfigure):
    """Once idempotency_ttl passed, the same key enqueues a new job with a new id."""
    broker = reconfigure(idempotency_ttl=0.2)
    first = put(broker, key="k")
    time.sleep(0.35)
    broker = reconfigure(idempotency_ttl=86400)  # the key the next call takes holds for a day
    second = put(broker, key="k")
    assert second != first
    assert ready(broker) == 2
    # The new job now owns the key for a fresh TTL.
    assert put(broker, key="k") == second
    assert ready(broker) == 2


def test_prune_keys_deletes_only_keys_past_their_ttl(broker, reconfigure):
    """prune_keys forgets the keys whose TTL ran out (at most ``batch``); the others keep their job."""
    broker = reconfigure(idempotency_ttl=0.2)
    for i in range(3):
        put(broker, key=f"old{i}")
    time.sleep(0.35)
    broker = reconfigure(idempotency_ttl=86400)
    young = put(broker, key="young")
    assert broker.prune_keys(batch=2) == 2
    assert broker.prune_keys() == 1
    assert broker.prune_keys() == 0
    assert put(broker, key="young") == young


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_callers_from_several_processes_get_one_job_per_key(orm_broker, tmp_path):
    """ORM only (processes on one database): 4 processes enqueue the same 40 keys at once: each key yields exactly one job and one id."""
    processes, keys = 4, 40
    go = tmp_path / "go"
    procs = [start_script(ATTEMPTS, str(tmp_path / f"ready{i}"), str(go), str(keys)) for i in range(processes)]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready{i}").exists() for i in range(processes)):
        assert time.monotonic() < deadline, "subprocesses did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()
    seen: dict[str, set[str]] = {}
    for proc in procs:
        lines = finish(proc).split()
        for key, job_id in zip(lines[::2], lines[1::2]):
            seen.setdefault(key, set()).add(job_id)
    assert sorted(seen) == sorted(f"k{i}" for i in range(keys))
    assert all(len(ids) == 1 for ids in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    assert Job.objects.count() == keys
    assert set(Job.objects.values_list("id", flat=True)) == {next(iter(v)) for v in seen.values()}
