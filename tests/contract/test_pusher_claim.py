"""The pusher's claim, without a cluster: ``Pusher.claim()`` called in this process on the real broker.

It reserves what the sentinel's ``Want`` asks for and returns verified tickets in pick order. A
package that fails to verify or to unpickle never becomes a ticket: it is dead-lettered with the
reason at once (never unpickled when its signature is bad), and the good ones of the same claim
still go through. With a full buffer (``Want(0, floor)``) it claims only work above the floor.
"""

from __future__ import annotations

import pickle

import pytest
from django.core import signing as django_signing

from django_taskmq import async_task
from django_taskmq.cluster import pusher
from django_taskmq.cluster.messages import Ticket, Want
from django_taskmq.conf import get_settings
from django_taskmq.models import DeadLetter, Job, State
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db


class RunsOnUnpickle:
    """Unpickling this calls tests.tasks.record_run("unpickled"): proof that a package was loaded."""

    def __reduce__(self):
        from tests.tasks import record_run

        return record_run, ("unpickled",)


def claim(broker, want: Want, workers: int | None = None) -> list[Ticket]:
    return pusher.Pusher(broker, get_settings(), ["default"], "test-cluster", workers=workers).claim(want, False)


def forge_with_another_key(job_id: str) -> None:
    """Replace the job's package by one whose pickle runs code, signed with a key the cluster does not know."""
    body = django_signing.b64_encode(b"p" + pickle.dumps(RunsOnUnpickle())).decode()
    forged = django_signing.Signer(key="attacker-key", salt=f"django_taskmq.{get_settings().name}").sign(body)
    Job.objects.filter(pk=job_id).update(payload=forged)


def sign_garbage(job_id: str) -> None:
    """Replace the job's package by validly signed bytes that are not a pickle."""
    from django_taskmq.signing import _signer

    body = django_signing.b64_encode(b"p" + b"this is not a pickle").decode()
    Job.objects.filter(pk=job_id).update(payload=_signer(get_settings().name).sign(body))


def test_bad_packages_are_dead_lettered_and_the_good_ones_of_the_claim_go_through(broker, run_log):
    """One claim meets a forged and a garbage package between good ones: two tickets, two dead letters."""
    first = async_task("tests.tasks.add", 1, 2)
    forged = async_task("tests.tasks.noop")
    garbage = async_task("tests.tasks.noop")
    last = async_task("tests.tasks.add", 3, 4)
    forge_with_another_key(forged)
    sign_garbage(garbage)

    tickets = claim(broker, Want(10, None))

    assert [t.reservation.job_id for t in tickets] == [first, last]
    assert [t.message().envelope.args for t in tickets] == [(1, 2), (3, 4)]
    states = dict(Job.objects.values_list("id", "state"))
    assert states == {first: State.RUNNING, last: State.RUNNING, forged: State.DEAD, garbage: State.DEAD}
    reasons = dict(DeadLetter.objects.values_list("job_id", "reason"))
    assert reasons.keys() == {forged, garbage}
    assert reasons[forged] == "bad signature"
    assert reasons[garbage].startswith("cannot unpickle")
    assert read_run_log(run_log) == []  # the forged pickle was never loaded


def test_a_claim_of_only_bad_packages_returns_nothing_and_leaves_nothing_running(broker):
    """Nothing is handed to the sentinel and no reservation is left to run out."""
    job_id = async_task("tests.tasks.noop")
    forge_with_another_key(job_id)

    assert claim(broker, Want(5, None)) == []
    j = Job.objects.get(pk=job_id)
    assert (j.state, j.lease_until) == (State.DEAD, None)
    assert DeadLetter.objects.get(job_id=job_id).deliveries == 1
    assert claim(broker, Want(5, None)) == []  # buried, not redelivered


def test_a_full_buffer_claims_only_work_above_its_lowest_priority(broker):
    """Want(0, floor=3): only priorities above 3 are claimed, most urgent first, at most ``workers``."""
    ids = {p: async_task("tests.tasks.noop", p, priority=p) for p in (0, 3, 5, 9, 4)}

    tickets = claim(broker, Want(0, 3), workers=2)

    assert [t.reservation.priority for t in tickets] == [9, 5]
    left = dict(Job.objects.values_list("id", "state"))
    assert {p: left[i] for p, i in ids.items()} == {
        0: State.QUEUED, 3: State.QUEUED, 4: State.QUEUED, 5: State.RUNNING, 9: State.RUNNING,
    }
    assert [t.reservation.priority for t in claim(broker, Want(0, 3), workers=2)] == [4]
    assert claim(broker, Want(0, 3), workers=2) == []


def test_a_full_buffer_without_a_floor_claims_nothing(broker):
    """Want(0, None): no room and nothing to compare with: no claim."""
    async_task("tests.tasks.noop", priority=9)
    assert claim(broker, Want(0, None)) == []
    assert Job.objects.get().state == State.QUEUED
