"""Signed packages: the envelope is pickled, optionally compressed and signed (``SECRET_KEY``,
salt = cluster name). A package that fails to verify or to unpickle is never executed and is
dead-lettered with the reason; ``SECRET_KEY_FALLBACKS`` keep queued packages valid across a key
rotation; arguments that cannot be pickled are refused at enqueue.

The tests taking ``broker`` run on each broker (see conftest.py): jobs are stored through
``broker.enqueue`` and run here as sync mode runs them (``helpers.run``). The ``orm_broker`` ones go
through the public API (``result()``) on the configured broker.
"""

from __future__ import annotations

import threading

import pytest

from django_taskmq import ConfigError
from django_taskmq.envelope import BAD_SIGNATURE, Envelope, sign
from django_taskmq.policy.states import JobState
from tests.contract import helpers
from tests.contract.helpers import forged, garbage, job, letters, put, run
from tests.tasks import read_run_log


class Vanishing:
    """An argument type that a later deploy removes (so its pickle no longer loads)."""

    def __init__(self, value):
        self.value = value


def reason_of(broker, job_id: str) -> str:
    """The reason of the job's one pending dead letter; the job is DEAD."""
    assert job(broker, job_id).state == JobState.DEAD
    (letter,) = [x for x in letters(broker) if x.job_id == job_id]
    return letter.reason


def test_valid_package_runs(broker, run_log):
    """An untouched package verifies and runs (the control for the tests below)."""
    job_id = put(broker, "ran", func="tests.tasks.record_run")
    run(broker, job_id)
    assert job(broker, job_id).state == JobState.SUCCEEDED
    assert read_run_log(run_log) == [(job_id, "ran")]


def test_tampered_payload_is_never_executed_and_dead_lettered_as_bad_signature(broker, run_log):
    """Arguments swapped in the stored package (signature kept) fail verification: DEAD, not run."""
    name = broker.settings.name
    original = sign(Envelope(func="tests.tasks.record_run", args=("original",)), name)
    injected = sign(Envelope(func="tests.tasks.record_run", args=("injected",)), name)
    job_id = put(broker, payload=injected.rsplit(":", 1)[0] + ":" + original.rsplit(":", 1)[1])

    run(broker, job_id)

    assert reason_of(broker, job_id) == BAD_SIGNATURE
    assert read_run_log(run_log) == []


def test_package_signed_with_another_key_is_not_unpickled(broker):
    """A forged package is rejected before anything is unpickled: its pickle never runs."""
    job_id = put(broker, payload=forged(broker))

    run(broker, job_id)

    assert reason_of(broker, job_id) == BAD_SIGNATURE
    assert helpers.UNPICKLED == []


def test_package_signed_for_another_cluster_name_fails_verification(reconfigure):
    """The cluster name is the salt: a package signed under another name does not verify."""
    job_id = put(reconfigure(name="other-cluster"))
    broker = reconfigure(name="tests")
    run(broker, job_id)
    assert reason_of(broker, job_id) == BAD_SIGNATURE


def test_validly_signed_garbage_is_dead_lettered_as_cannot_unpickle(broker):
    """A package with a good signature over bytes that do not unpickle: 'cannot unpickle: ...'."""
    job_id = put(broker, payload=garbage(broker))

    run(broker, job_id)

    assert reason_of(broker, job_id).startswith("cannot unpickle")


def test_argument_whose_class_is_gone_is_dead_lettered_as_cannot_unpickle(broker, monkeypatch):
    """An argument whose class no longer exists (a deploy removed it) cannot unpickle: DEAD, reason kept."""
    job_id = put(broker, Vanishing(1), func="tests.tasks.echo")
    monkeypatch.delattr(__import__(__name__, fromlist=["x"]), "Vanishing")

    run(broker, job_id)

    reason = reason_of(broker, job_id)
    assert reason.startswith("cannot unpickle") and "Vanishing" in reason


def test_secret_key_rotation_keeps_queued_packages_valid(broker, settings):
    """After rotating SECRET_KEY with the old key in SECRET_KEY_FALLBACKS, queued jobs still run."""
    old = settings.SECRET_KEY
    job_id = put(broker, 2, 3, func="tests.tasks.add")
    settings.SECRET_KEY = "a-brand-new-secret-key-for-the-rotation-test"
    settings.SECRET_KEY_FALLBACKS = [old]

    run(broker, job_id)

    j = job(broker, job_id)
    assert (j.state, j.result) == (JobState.SUCCEEDED, 5)
    # New packages are signed with the new key and verify without the fallback.
    new_id = put(broker, 4, 5, func="tests.tasks.add")
    settings.SECRET_KEY_FALLBACKS = []
    run(broker, new_id)
    assert job(broker, new_id).result == 9


def test_secret_key_change_without_fallback_invalidates_queued_packages(broker, settings):
    """Changing SECRET_KEY without keeping the old one as a fallback: the package fails to verify,
    and the reason names both causes and the fix, which works: the old key among the fallbacks,
    then replaying every dead letter."""
    old = settings.SECRET_KEY
    job_id = put(broker, 2, 3, func="tests.tasks.add")
    settings.SECRET_KEY = "a-brand-new-secret-key-for-the-rotation-test"
    settings.SECRET_KEY_FALLBACKS = []
    run(broker, job_id)
    reason = reason_of(broker, job_id)
    assert reason == BAD_SIGNATURE
    for words in ("another SECRET_KEY or TASKMQ['name']", "SECRET_KEY_FALLBACKS", "qdead replay --all"):
        assert words in reason, words

    settings.SECRET_KEY_FALLBACKS = [old]
    assert broker.replay_all() == 1
    run(broker, job_id)
    assert (job(broker, job_id).state, job(broker, job_id).result) == (JobState.SUCCEEDED, 5)


def test_compressed_packages_are_smaller_and_round_trip(orm_broker, taskmq_settings):
    """ORM only (the public API): compress=True shrinks a repetitive package and the task still
    gets its exact arguments."""
    from django_taskmq import async_task, result
    from django_taskmq.api import run_sync
    from django_taskmq.models import Job

    big = {"text": "spam and eggs " * 2000, "numbers": list(range(500))}
    plain_id = async_task("tests.tasks.echo", big, flag=True)
    taskmq_settings(compress=True)
    packed_id = async_task("tests.tasks.echo", big, flag=True)
    plain, packed = (Job.objects.get(pk=i).payload for i in (plain_id, packed_id))
    assert len(packed) < len(plain) / 4
    run_sync(packed_id)
    assert result(packed_id) == ((big,), {"flag": True})


def test_compressed_and_plain_packages_both_verify_with_either_setting(reconfigure):
    """A package written with compress on runs after compress was switched off, and the reverse."""
    packed_id = put(reconfigure(compress=True), "x" * 5000, func="tests.tasks.echo")
    broker = reconfigure(compress=False)
    plain_id = put(broker, "y" * 5000, func="tests.tasks.echo")
    run(broker, packed_id)
    broker = reconfigure(compress=True)
    run(broker, plain_id)
    assert job(broker, packed_id).result == (("x" * 5000,), {})
    assert job(broker, plain_id).result == (("y" * 5000,), {})


@pytest.mark.parametrize("bad", [lambda: (lambda x: x), threading.Lock, lambda: (i for i in range(3))],
                         ids=["lambda", "lock", "generator"])
def test_unpicklable_arguments_raise_config_error_at_enqueue(orm_broker, bad):
    """ORM only (the public API): an argument that cannot be pickled raises ConfigError at the
    call; no job is stored."""
    from django_taskmq import async_task
    from django_taskmq.models import Job

    with pytest.raises(ConfigError, match="pickle"):
        async_task("tests.tasks.echo", bad())
    with pytest.raises(ConfigError, match="pickle"):
        async_task("tests.tasks.echo", value=bad())
    assert not Job.objects.exists()


def test_signatures_are_djangos_byte_for_byte(settings):
    """The signer that derives its HMAC key once signs exactly as django.core.signing.Signer, so
    packages written before it (and by any other process) verify, and the other way round."""
    from django.core import signing as django_signing

    from django_taskmq.envelope import _signer

    for secret in ("a-first-secret", b"a-bytes-secret"):
        settings.SECRET_KEY = secret
        settings.SECRET_KEY_FALLBACKS = []
        ours = _signer("cluster-x")
        django = django_signing.Signer(salt="django_taskmq.cluster-x")
        for value in ("", "payload", "ü" * 300):
            assert ours.sign(value) == django.sign(value)
            assert ours.unsign(django.sign(value)) == value
    # A fallback key verifies through the cached derivation too; a wrong one does not.
    settings.SECRET_KEY_FALLBACKS = ["the-old-secret"]
    old = django_signing.Signer(key="the-old-secret", salt="django_taskmq.cluster-x").sign("queued")
    assert _signer("cluster-x").unsign(old) == "queued"
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(django_signing.BadSignature):
        _signer("cluster-x").unsign(old)
