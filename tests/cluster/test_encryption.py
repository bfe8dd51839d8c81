"""Encryption at rest with a real cluster: no table of the app holds a marker given in a job's
arguments and returned in its result, the cluster runs it and ``result()`` returns it; keys rotate
without a flag day; a package whose key is gone is dead-lettered naming the key id, never run."""

from __future__ import annotations

import datetime
import zlib

import pytest
from django.apps import apps
from django.core import signing as django_signing
from django.db import connection
from django.utils import timezone

from django_taskmq import async_task, enqueue_many, result, schedule
from django_taskmq.encryption import decode_key, generate_key, key_id
from django_taskmq.models import DeadLetter, Job

from .conftest import job_states

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

MARKER = "marker-8d1e44c2"
KEY_A, KEY_B = generate_key(), generate_key()


def _plain(value: str) -> list[bytes]:
    """``value`` and what each ``:``-separated part of it decodes to (a signed package's body)."""
    found = [value.encode()]
    for part in value.split(":"):
        try:
            data = django_signing.b64_decode(part.encode())
        except Exception:
            continue
        found.append(data)
        if data[:1] == b"z":
            try:
                found.append(zlib.decompress(data[1:]))
            except zlib.error:
                pass
    return found


def rows_holding(marker: str) -> list[str]:
    """Every ``table.column`` of the app's tables whose value holds ``marker``'s bytes, plainly
    or inside a signed package (base64, compressed or not)."""
    hits = []
    with connection.cursor() as cursor:
        for model in apps.get_app_config("django_taskmq").get_models():
            table = model._meta.db_table
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            names = [c[0] for c in cursor.description]
            for row in cursor.fetchall():
                for name, value in zip(names, row):
                    if isinstance(value, bytes | memoryview):
                        value = bytes(value).decode("latin-1")
                    if isinstance(value, str) and any(marker.encode() in data for data in _plain(value)):
                        hits.append(f"{table}.{name}")
    return hits


def later(name: str, **options) -> None:
    """A schedule of the marker, not due during the test."""
    schedule("tests.tasks.record_secret", MARKER, name=name, next_run=timezone.now() + datetime.timedelta(days=1),
             q_options=options)


def test_the_scan_finds_the_marker_of_a_job_not_encrypted(cluster):
    job_id = async_task("tests.tasks.record_secret", MARKER)
    later("plain")
    cluster.burst("-w", "1")
    assert job_states([job_id]) == {"SUCCEEDED": 1}
    assert sorted(set(rows_holding(MARKER))) == ["django_taskmq_job.payload", "django_taskmq_job.result_package",
                                                 "django_taskmq_schedule.args"]


def test_no_row_holds_an_encrypted_marker_while_the_cluster_runs_it(cluster):
    cluster.configure(encryption_keys=[KEY_A], compress=True)
    whole = async_task("tests.tasks.record_secret", MARKER, encrypt=True)
    named = async_task("tests.tasks.record_secret", "visible", token=MARKER, encrypt=["token"])
    failing = async_task("tests.tasks.fail", MARKER, encrypt=True, max_deliveries=1)
    later("sealed", encrypt=True)
    assert rows_holding(MARKER) == []

    cluster.burst("-w", "2")

    assert job_states([whole, named]) == {"SUCCEEDED": 2}
    assert result(whole) == {"secret": MARKER, "token": ""}
    assert result(named) == {"secret": "visible", "token": MARKER}
    assert sorted(tag for _, tag in cluster.log()) == [MARKER, f"visible{MARKER}"]
    # The failing one's error message is the task's own text: what it raises is stored as it is.
    assert Job.objects.get(pk=failing).state == "DEAD"
    assert set(rows_holding(MARKER)) <= {"django_taskmq_job.error", "django_taskmq_job.traceback",
                                         "django_taskmq_deadletter.error", "django_taskmq_job.attempt_log"}
    Job.objects.filter(pk=failing).delete()
    DeadLetter.objects.filter(job_id=failing).delete()
    assert rows_holding(MARKER) == []


def test_keys_rotate_and_a_package_whose_key_is_gone_is_dead_lettered_never_run(cluster):
    cluster.configure(encryption_keys=[KEY_A])
    under_a = enqueue_many("tests.tasks.record_secret", [(f"a{i}",) for i in range(3)], encrypt=True)
    # A new key first, the old one after it: new jobs are encrypted with B, the old ones still open.
    cluster.configure(encryption_keys=[KEY_B, KEY_A])
    under_b = enqueue_many("tests.tasks.record_secret", [(f"b{i}",) for i in range(3)], encrypt=True)
    cluster.burst("-w", "2")
    assert job_states(under_a + under_b) == {"SUCCEEDED": 6}
    assert sorted(tag for _, tag in cluster.log()) == ["a0", "a1", "a2", "b0", "b1", "b2"]

    orphan = async_task("tests.tasks.record_secret", MARKER, encrypt=True)  # under B
    cluster.configure(encryption_keys=[KEY_A])  # B dropped: nothing can open it
    kept = async_task("tests.tasks.record_secret", "kept", encrypt=True)
    cluster.burst("-w", "2")

    assert Job.objects.get(pk=kept).state == "SUCCEEDED"
    job = Job.objects.get(pk=orphan)
    assert job.state == "DEAD", (job.state, job.error)
    b_id = key_id(decode_key(KEY_B))
    assert [d.reason for d in DeadLetter.objects.filter(job_id=orphan)] == [
        f"encrypted with key id {b_id}, which TASKMQ['encryption_keys'] does not list"]
    assert MARKER not in [tag for _, tag in cluster.log()]
    assert orphan not in [job_id for job_id, _ in cluster.log()]
