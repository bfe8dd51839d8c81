"""A package tampered with in the database is dead-lettered as "bad signature" and never runs."""

from __future__ import annotations

import pytest

from django_taskmq import async_task, enqueue_many
from django_taskmq.conf import get_settings
from django_taskmq.envelope import BAD_SIGNATURE, Envelope, sign
from django_taskmq.models import DeadLetter, Job

from .conftest import job_states

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def test_tampered_payload_is_dead_lettered_and_never_executed(cluster):
    good = enqueue_many("tests.tasks.record_run", [() for _ in range(10)])
    tampered = async_task("tests.tasks.record_run", "tampered")
    foreign = async_task("tests.tasks.record_run", "foreign")
    # Change the signed body of one package (the signature no longer matches) ...
    payload = Job.objects.get(pk=tampered).payload
    body, signature = payload.rsplit(":", 1)
    salt = get_settings().name
    evil = sign(Envelope(func="tests.cluster.tasks_cluster.crash_logged"), salt).rsplit(":", 1)[0]
    assert evil != body
    Job.objects.filter(pk=tampered).update(payload=f"{evil}:{signature}")
    # ... and sign another with the wrong salt (another cluster name): both must fail to verify.
    Job.objects.filter(pk=foreign).update(
        payload=sign(Envelope(func="tests.tasks.record_run", args=("foreign",)), "another-cluster"))

    cluster.burst("-w", "2")

    assert job_states(good) == {"SUCCEEDED": 10}
    for job_id in (tampered, foreign):
        job = Job.objects.get(pk=job_id)
        assert job.state == "DEAD", (job.state, job.error)
        assert [d.reason for d in DeadLetter.objects.filter(job_id=job_id)] == [BAD_SIGNATURE]
    ran = [j for j, _ in cluster.log()]
    assert tampered not in ran and foreign not in ran
    assert sorted(ran) == sorted(good)
