"""Coalescing keys (``unique_key``): while the key's job is in one of the key's states, a second
enqueue returns its id and stores nothing; with ``unique_replace`` the waiting job takes the new
arguments and time (a debounce). Once it left those states, the next enqueue makes a new job.

The tests taking ``broker`` run on each broker (see conftest.py); the one with several processes
is the ORM broker's own.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from django_taskmq.models import Job, UniqueKey
from django_taskmq.policy.states import JobState
from tests.conftest import finish, start_script
from tests.contract.helpers import ack, job, put, run, states

ADD = "tests.tasks.add"


def waiting(broker) -> int:
    """How many jobs wait (ready now or later)."""
    return sum(s["ready"] + s["delayed"] for s in broker.stats())


def claim(broker):
    (reservation,) = broker.reserve(["default"], 1, 60, "t")
    return reservation


def test_second_enqueue_while_queued_returns_the_first_job(broker):
    first = put(broker, 1, 2, func=ADD, unique_key="reindex:42")
    assert put(broker, 5, 5, func=ADD, unique_key="reindex:42") == first
    assert waiting(broker) == 1
    run(broker, first)
    assert job(broker, first).result == 3  # the first call's arguments: nothing was replaced


def test_a_delayed_job_holds_its_key(broker):
    first = put(broker, unique_key="k", delay=3600)
    assert put(broker, unique_key="k") == first
    assert waiting(broker) == 1


def test_different_keys_are_independent(broker):
    ids = {put(broker, unique_key="a"), put(broker, unique_key="b"), put(broker), put(broker, unique_key="a")}
    assert len(ids) == 3 == waiting(broker)


def test_by_default_a_running_job_does_not_hold_its_key(broker):
    """The default states are those before running: once it started, a new job is made."""
    first = put(broker, unique_key="k")
    assert claim(broker).job_id == first
    second = put(broker, unique_key="k")
    assert second != first
    assert states(broker, [first, second]) == {first: JobState.RUNNING, second: JobState.QUEUED}
    # The new job holds the key now.
    assert put(broker, unique_key="k") == second


def test_unique_for_running_holds_the_key_while_it_runs(broker):
    first = put(broker, unique_key="k", unique_for=("queued", "running"))
    r = claim(broker)
    assert put(broker, unique_key="k", unique_for=("queued", "running")) == first
    assert waiting(broker) == 0
    ack(broker, r)
    second = put(broker, unique_key="k", unique_for=("queued", "running"))
    assert second != first and waiting(broker) == 1


def test_the_states_of_the_holder_decide(broker):
    """The key holds for the states its job was enqueued with, whatever a later call asks."""
    first = put(broker, unique_key="k", unique_for=("QUEUED",))
    assert put(broker, unique_key="k", unique_for=("queued", "retrying", "running")) == first
    claim(broker)
    assert put(broker, unique_key="k") != first


def test_a_retrying_job_holds_its_key_by_default_not_with_queued_only(broker):
    first = put(broker, unique_key="k")
    broker.settle(claim(broker), delay=3600)
    assert job(broker, first).state == JobState.RETRYING
    assert put(broker, unique_key="k") == first
    other = put(broker, unique_key="q", unique_for=("queued",))
    broker.settle(claim(broker), delay=3600)
    assert put(broker, unique_key="q", unique_for=("queued",)) != other


@pytest.mark.parametrize("end", ["ack", "fail", "cancel"])
def test_after_the_job_ended_a_new_job_is_made(broker, end):
    first = put(broker, unique_key="k")
    if end == "cancel":
        assert broker.cancel([first]) == 1
    else:
        r = claim(broker)
        ack(broker, r) if end == "ack" else broker.fail(r, "boom")
    second = put(broker, unique_key="k")
    assert second != first
    assert job(broker, second).state == JobState.QUEUED
    assert put(broker, unique_key="k") == second


def test_prune_keys_forgets_the_keys_whose_job_ended_and_keeps_those_that_hold(broker):
    """One row per distinct key would grow for ever: pruning deletes the keys of ended jobs
    (at most ``batch``), never one whose job still waits or runs."""
    ended = [put(broker, unique_key=f"done:{n}") for n in range(3)]
    assert broker.cancel(ended) == 3
    running_id = put(broker, unique_key="runs", unique_for=("running",))
    assert claim(broker).job_id == running_id
    waiting_id = put(broker, unique_key="waits")
    assert broker.prune_keys(batch=2) == 2
    assert broker.prune_keys() == 1
    assert broker.prune_keys() == 0
    # The keys that still hold still return their job.
    assert put(broker, unique_key="waits") == waiting_id
    assert put(broker, unique_key="runs", unique_for=("running",)) == running_id


def test_a_job_past_its_expiry_holds_nothing(broker):
    """A waiting job whose expiry passed will never run (a claim marks it EXPIRED): the next call
    makes a new job instead of returning it."""
    first = put(broker, unique_key="k", expires_at=time.time() + 0.3)
    assert put(broker, unique_key="k", unique_replace=True) == first
    time.sleep(0.5)
    second = put(broker, unique_key="k", unique_replace=True)
    assert second != first
    assert put(broker, unique_key="k") == second


def test_replace_gives_the_waiting_job_the_new_arguments(broker):
    first = put(broker, 1, 2, func=ADD, unique_key="k", delay=3600)
    assert not broker.has_ready(["default"])
    assert put(broker, 10, 20, func=ADD, unique_key="k", unique_replace=True) == first
    assert waiting(broker) == 1
    assert broker.has_ready(["default"])  # no delay given: visible now
    run(broker, first)
    assert job(broker, first).result == 30


def test_replace_moves_the_eta_and_the_expiry(broker):
    first = put(broker, unique_key="k")
    eta = time.time() + 7200
    assert put(broker, unique_key="k", unique_replace=True, eta=eta, expires_at=eta + 60) == first
    j = job(broker, first)
    assert abs(j.visible_at - eta) < 1 and abs(j.expires_at - eta - 60) < 1
    assert broker.reserve(["default"], 1, 60, "t") == []  # not visible before the new eta
    # A delay counts from now.
    assert put(broker, unique_key="k", unique_replace=True, delay=0) == first
    assert claim(broker).job_id == first


def test_replace_never_touches_a_running_job(broker):
    first = put(broker, 1, 2, func=ADD, unique_key="k", unique_for=("queued", "running"))
    r = claim(broker)
    assert put(broker, 10, 20, func=ADD, unique_key="k", unique_for=("queued", "running"),
               unique_replace=True, delay=3600) == first
    broker.defer(r)  # back unstarted: it kept its arguments and its time
    assert broker.has_ready(["default"])
    run(broker, first)
    assert job(broker, first).result == 3


def test_idempotency_keys_are_unchanged(broker):
    """``key=`` still holds for the TTL whatever the state, and does not meet a unique_key of the same text."""
    first = put(broker, key="k")
    ack(broker, claim(broker))
    assert put(broker, key="k") == first
    assert put(broker, unique_key="k") != first


ENQUEUERS = 4
CALLS = 25
ATTEMPTS = """
    import sys, os, time
    from django_taskmq import async_task
    ready, go, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(calls):
        print(async_task('tests.tasks.add', i, i, unique_key='debounce', unique_replace=bool(i % 2)), flush=True)
"""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueuers_make_one_job(orm_broker, tmp_path):
    """Several processes enqueue one key at once, over and over: one job exists, and every call
    returned its id."""
    go = tmp_path / "go"
    procs, readies = [], []
    for n in range(ENQUEUERS):
        ready = tmp_path / f"ready{n}"
        readies.append(ready)
        procs.append(start_script(ATTEMPTS, str(ready), str(go), str(CALLS)))
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in readies) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    returned = set()
    for proc in procs:
        out = finish(proc)
        returned.update(out.split())
    jobs = list(Job.objects.values_list("id", "state"))
    assert len(jobs) == 1 and jobs[0][1] == JobState.QUEUED
    assert returned == {jobs[0][0]}
    assert list(UniqueKey.objects.values_list("key", "job_id")) == [("debounce", jobs[0][0])]


CLAIMER = """
    import sys, os, time, hashlib
    from django_taskmq.brokers import get_broker
    ready, go, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    broker = get_broker()
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    while not os.path.exists(stop):
        for r in broker.reserve(["default"], 1, 600, "claimer"):
            print(r.job_id, hashlib.sha256(r.payload.encode()).hexdigest(), flush=True)
        time.sleep(0.002)
"""
REPLACERS = """
    import sys, os, time
    from django_taskmq import async_task
    ready, go, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(calls):
        async_task('tests.tasks.add', os.getpid(), i, unique_key='debounce', unique_replace=True)
"""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_claimed_job_is_never_replaced_and_one_waits_at_most(orm_broker, tmp_path):
    """Enqueuers replace the waiting job while a claimer takes jobs: every job the claimer took
    keeps the package it was claimed with (a replacement lands before the claim or not at all),
    and at most one job waits at the end."""
    go, stop = tmp_path / "go", tmp_path / "stop"
    readies = [tmp_path / f"ready{n}" for n in range(ENQUEUERS + 1)]
    claimer = start_script(CLAIMER, str(readies[0]), str(go), str(stop))
    procs = [start_script(REPLACERS, str(ready), str(go), str(CALLS)) for ready in readies[1:]]
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in readies) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    for proc in procs:
        finish(proc)
    stop.touch()
    claimed = dict(line.split() for line in finish(claimer).splitlines())
    stored = dict(Job.objects.values_list("id", "payload"))
    assert claimed, "the claimer took no job: the test proved nothing"
    assert {i: hashlib.sha256(stored[i].encode()).hexdigest() for i in claimed} == claimed
    waiting_ids = set(Job.objects.filter(state=JobState.QUEUED).values_list("id", flat=True))
    assert len(waiting_ids) <= 1 and not waiting_ids & set(claimed)
    assert len(stored) == len(claimed) + len(waiting_ids)
