"""Signed packages: the envelope is pickled, optionally compressed and signed (``SECRET_KEY``,
salt = cluster name). A package that fails to verify or to unpickle is never executed and is
dead-lettered with the reason; ``SECRET_KEY_FALLBACKS`` keep queued packages valid across a key
rotation; arguments that cannot be pickled are refused at enqueue.
"""

from __future__ import annotations

import pickle
import threading

import pytest
from django.core import signing as django_signing

from django_taskmq import ConfigError, async_task, result
from django_taskmq.api import run_sync
from django_taskmq.conf import get_settings
from django_taskmq.models import DeadLetter, Job, State
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db


class Vanishing:
    """An argument type that a later deploy removes (so its pickle no longer loads)."""

    def __init__(self, value):
        self.value = value


class RunsOnUnpickle:
    """Unpickling this calls tests.tasks.record_run("unpickled"): proof that a package was loaded."""

    def __reduce__(self):
        from tests.tasks import record_run

        return record_run, ("unpickled",)


def dead_letter_of(job_id: str) -> DeadLetter:
    return DeadLetter.objects.get(job_id=job_id)


def test_valid_package_runs(broker, run_log):
    """An untouched package verifies and runs (the control for the tests below)."""
    job_id = async_task("tests.tasks.record_run", "ran")
    run_sync(job_id)
    assert Job.objects.get(pk=job_id).state == State.SUCCEEDED
    assert read_run_log(run_log) == [(job_id, "ran")]


def test_tampered_payload_is_never_executed_and_dead_lettered_as_bad_signature(broker, run_log):
    """Arguments swapped in the stored package (signature kept) fail verification: DEAD, not run."""
    job_id = async_task("tests.tasks.record_run", "original")
    other = async_task("tests.tasks.record_run", "injected")
    victim = Job.objects.get(pk=job_id)
    body = Job.objects.get(pk=other).payload.rsplit(":", 1)[0]
    victim.payload = body + ":" + victim.payload.rsplit(":", 1)[1]
    victim.save(update_fields=["payload"])

    run_sync(job_id)

    j = Job.objects.get(pk=job_id)
    assert j.state == State.DEAD
    assert dead_letter_of(job_id).reason == "bad signature"
    assert read_run_log(run_log) == []


def test_package_signed_with_another_key_is_not_unpickled(broker, run_log):
    """A forged package is rejected before anything is unpickled: its pickle never runs."""
    job_id = async_task("tests.tasks.noop")
    body = django_signing.b64_encode(b"p" + pickle.dumps(RunsOnUnpickle())).decode()
    forged = django_signing.Signer(key="attacker-key", salt=f"django_taskmq.{get_settings().name}").sign(body)
    Job.objects.filter(pk=job_id).update(payload=forged)

    run_sync(job_id)

    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert dead_letter_of(job_id).reason == "bad signature"
    assert read_run_log(run_log) == []


def test_package_signed_for_another_cluster_name_fails_verification(broker, taskmq_settings):
    """The cluster name is the salt: a package signed under another name does not verify."""
    taskmq_settings(name="other-cluster")
    job_id = async_task("tests.tasks.noop")
    taskmq_settings(name="tests")
    run_sync(job_id)
    assert dead_letter_of(job_id).reason == "bad signature"


def test_validly_signed_garbage_is_dead_lettered_as_cannot_unpickle(broker):
    """A package with a good signature over bytes that do not unpickle: 'cannot unpickle: ...'."""
    from django_taskmq.signing import _signer

    job_id = async_task("tests.tasks.noop")
    body = django_signing.b64_encode(b"p" + b"this is not a pickle").decode()
    Job.objects.filter(pk=job_id).update(payload=_signer(get_settings().name).sign(body))

    run_sync(job_id)

    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert dead_letter_of(job_id).reason.startswith("cannot unpickle")


def test_argument_whose_class_is_gone_is_dead_lettered_as_cannot_unpickle(broker, monkeypatch):
    """An argument whose class no longer exists (a deploy removed it) cannot unpickle: DEAD, reason kept."""
    job_id = async_task("tests.tasks.echo", Vanishing(1))
    monkeypatch.delattr(__import__(__name__, fromlist=["x"]), "Vanishing")

    run_sync(job_id)

    j = Job.objects.get(pk=job_id)
    assert j.state == State.DEAD
    reason = dead_letter_of(job_id).reason
    assert reason.startswith("cannot unpickle") and "Vanishing" in reason


def test_secret_key_rotation_keeps_queued_packages_valid(broker, settings):
    """After rotating SECRET_KEY with the old key in SECRET_KEY_FALLBACKS, queued jobs still run."""
    old = settings.SECRET_KEY
    job_id = async_task("tests.tasks.add", 2, 3)
    settings.SECRET_KEY = "a-brand-new-secret-key-for-the-rotation-test"
    settings.SECRET_KEY_FALLBACKS = [old]

    run_sync(job_id)

    assert Job.objects.get(pk=job_id).state == State.SUCCEEDED
    assert result(job_id) == 5
    # New packages are signed with the new key and verify without the fallback.
    new_id = async_task("tests.tasks.add", 4, 5)
    settings.SECRET_KEY_FALLBACKS = []
    run_sync(new_id)
    assert result(new_id) == 9


def test_secret_key_change_without_fallback_invalidates_queued_packages(broker, settings):
    """Changing SECRET_KEY without keeping the old one as a fallback: the package fails to verify."""
    job_id = async_task("tests.tasks.add", 2, 3)
    settings.SECRET_KEY = "a-brand-new-secret-key-for-the-rotation-test"
    settings.SECRET_KEY_FALLBACKS = []
    run_sync(job_id)
    assert Job.objects.get(pk=job_id).state == State.DEAD
    assert dead_letter_of(job_id).reason == "bad signature"


def test_compressed_packages_are_smaller_and_round_trip(broker, taskmq_settings):
    """compress=True shrinks a repetitive package and the task still gets its exact arguments."""
    big = {"text": "spam and eggs " * 2000, "numbers": list(range(500))}
    plain_id = async_task("tests.tasks.echo", big, flag=True)
    taskmq_settings(compress=True)
    packed_id = async_task("tests.tasks.echo", big, flag=True)
    plain, packed = (Job.objects.get(pk=i).payload for i in (plain_id, packed_id))
    assert len(packed) < len(plain) / 4
    run_sync(packed_id)
    assert result(packed_id) == ((big,), {"flag": True})


def test_compressed_and_plain_packages_both_verify_with_either_setting(broker, taskmq_settings):
    """A package written with compress on runs after compress was switched off, and the reverse."""
    taskmq_settings(compress=True)
    packed_id = async_task("tests.tasks.echo", "x" * 5000)
    taskmq_settings(compress=False)
    plain_id = async_task("tests.tasks.echo", "y" * 5000)
    run_sync(packed_id)
    taskmq_settings(compress=True)
    run_sync(plain_id)
    assert result(packed_id) == (("x" * 5000,), {})
    assert result(plain_id) == (("y" * 5000,), {})


@pytest.mark.parametrize("bad", [lambda: (lambda x: x), threading.Lock, lambda: (i for i in range(3))],
                         ids=["lambda", "lock", "generator"])
def test_unpicklable_arguments_raise_config_error_at_enqueue(broker, bad):
    """An argument that cannot be pickled raises ConfigError at the call; no job is stored."""
    with pytest.raises(ConfigError, match="pickle"):
        async_task("tests.tasks.echo", bad())
    with pytest.raises(ConfigError, match="pickle"):
        async_task("tests.tasks.echo", value=bad())
    assert not Job.objects.exists()


def test_signatures_are_djangos_byte_for_byte(settings):
    """The signer that derives its HMAC key once signs exactly as django.core.signing.Signer, so
    packages written before it (and by any other process) verify, and the other way round."""
    from django.core import signing as django_signing

    from django_taskmq.signing import _signer

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
