"""Idempotency keys: the same key within ``idempotency_ttl`` returns the same job id and enqueues
nothing, also when several processes call at once; after the TTL a new job is created.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import async_task
from django_taskmq.models import Job
from tests.conftest import finish, start_script

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


@pytest.mark.django_db
def test_same_key_returns_the_same_id_and_one_job(broker):
    """A second call with the same key returns the first id and adds no job."""
    first = async_task("tests.tasks.add", 1, 2, key="order-42")
    second = async_task("tests.tasks.add", 1, 2, key="order-42")
    assert second == first
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_different_keys_make_different_jobs(broker):
    """Distinct keys (and calls without a key) each make a job."""
    ids = {async_task("tests.tasks.noop", key="a"), async_task("tests.tasks.noop", key="b"),
           async_task("tests.tasks.noop"), async_task("tests.tasks.noop")}
    assert len(ids) == 4 == Job.objects.count()


@pytest.mark.django_db
def test_same_key_after_the_job_finished_still_returns_it_within_the_ttl(broker):
    """The key holds for the TTL, not only while the job is queued."""
    first = async_task("tests.tasks.noop", key="k")
    (r,) = broker.reserve(["default"], 1, 60, "t")
    broker.ack(r)
    assert async_task("tests.tasks.noop", key="k") == first
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_after_the_ttl_a_new_job_is_created(broker, taskmq_settings):
    """Once idempotency_ttl passed, the same key enqueues a new job with a new id."""
    taskmq_settings(idempotency_ttl=0.2)
    first = async_task("tests.tasks.noop", key="k")
    time.sleep(0.35)
    taskmq_settings(idempotency_ttl=86400)  # the key the next call takes holds for a day
    second = async_task("tests.tasks.noop", key="k")
    assert second != first
    assert Job.objects.count() == 2
    # The new job now owns the key for a fresh TTL.
    assert async_task("tests.tasks.noop", key="k") == second
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_callers_from_several_processes_get_one_job_per_key(broker, tmp_path):
    """4 processes enqueue the same 40 keys at once: each key yields exactly one job and one id."""
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
