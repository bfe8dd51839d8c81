"""Signed results: a result is loaded only after its signature verifies; 0.1.0's results migrate.

A row written straight into the job table (raw SQL, as an attacker with database access or a
compromised backup would) must never run code in whatever process reads it.

ORM only (``orm_broker``): rows written with raw SQL, migrations, and the public readers
(``result``, ``fetch``, ``qdead``) on the configured broker.
"""

from __future__ import annotations

import base64
import binascii
import pickle

import pytest
from django.core import signing as django_signing
from django.db import connection
from django.utils import timezone

from django_taskmq import async_task, fetch, result, result_group
from django_taskmq.api import run_sync
from django_taskmq.conf import get_settings
from django_taskmq.exceptions import UnreadableResult
from django_taskmq.models import Job, State
from django_taskmq.envelope import BAD_RESULT_SIGNATURE, result_salt
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db

JOB = Job._meta.db_table


class RunsOnUnpickle:
    """Unpickling this calls tests.tasks.record_run("unpickled"): proof that a result was loaded."""

    def __reduce__(self):
        from tests.tasks import record_run

        return record_run, ("unpickled",)


def write_raw_result(job_id: str, value: str) -> None:
    """Store ``value`` in the job's result column with raw SQL, bypassing every Python check."""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {JOB} SET result_package = %s, state = 'SUCCEEDED' WHERE id = %s", [value, job_id])


def unsigned_pickle() -> str:
    """What 0.1.0 stored: a base64 pickle (here one that runs code when loaded)."""
    return base64.b64encode(pickle.dumps(RunsOnUnpickle())).decode()


def forged_with(key: str, salt: str) -> str:
    body = django_signing.b64_encode(b"p" + pickle.dumps(RunsOnUnpickle())).decode()
    return django_signing.Signer(key=key, salt=f"django_taskmq.{salt}").sign(body)


@pytest.mark.parametrize("forgery", ["unsigned pickle", "another key", "package salt"])
def test_forged_result_is_never_unpickled_by_any_reader(orm_broker, run_log, settings, forgery):
    """result(), fetch(), result_group and Job.result raise or answer; the forged pickle never runs."""
    job_id = async_task("tests.tasks.add", 1, 2, group="g")
    run_sync(job_id)
    name = get_settings().name
    value = {
        "unsigned pickle": unsigned_pickle(),
        "another key": forged_with("attacker-key", result_salt(name)),
        # Signed with the right key but as a task package: one kind must never pass for the other.
        "package salt": forged_with(settings.SECRET_KEY, name),
    }[forgery]
    write_raw_result(job_id, value)

    with pytest.raises(UnreadableResult, match="bad signature"):
        result(job_id)
    job = fetch(job_id)  # loading the row reads no pickle
    assert job.state == State.SUCCEEDED
    assert job.result_error == f"unreadable result: {BAD_RESULT_SIGNATURE}"
    with pytest.raises(UnreadableResult):
        result_group("g")
    assert read_run_log(run_log) == []


def test_genuine_results_read_back_and_survive_key_rotation(orm_broker, settings):
    """A result the queue stored reads back; after rotating SECRET_KEY (old key as fallback) too."""
    job_id = async_task("tests.tasks.echo", [1, "two"], k={"x": 3})
    run_sync(job_id)
    assert result(job_id) == (([1, "two"],), {"k": {"x": 3}})
    stored = Job.objects.get(pk=job_id).result_package
    with pytest.raises(binascii.Error):
        base64.b64decode(stored, validate=True)  # a signed package, not a bare base64 pickle

    old = settings.SECRET_KEY
    settings.SECRET_KEY = "a-rotated-secret-key-for-the-result-test"
    settings.SECRET_KEY_FALLBACKS = [old]
    assert result(job_id) == (([1, "two"],), {"k": {"x": 3}})
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(UnreadableResult, match="bad signature"):
        Job.objects.get(pk=job_id).result


def test_none_result_stores_nothing(orm_broker):
    job_id = async_task("tests.tasks.noop")
    run_sync(job_id)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result_package, job.result, job.result_error) == (State.SUCCEEDED, None, None, "")


@pytest.mark.django_db(transaction=True)
def test_results_stored_by_0_1_0_are_signed_by_the_migration(run_log):
    """0.1.0 stored base64 pickles in ``result``; migration 0003 re-signs them without loading them."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate([("django_taskmq", "0002_notify_trigger")])
    try:
        old_value = base64.b64encode(pickle.dumps({"answer": 42})).decode()
        with connection.cursor() as cursor:
            for job_id, value in [("a" * 24, old_value), ("b" * 24, unsigned_pickle()), ("c" * 24, "not base64!")]:
                cursor.execute(
                    f"INSERT INTO {JOB} (id, func, task_name, payload, queue, priority, state, attempt, deliveries, "
                    f"yields, max_deliveries, visible_at, enqueued_at, result, error, traceback) VALUES "
                    f"(%s, 'm.f', 'm.f', '', 'default', 0, 'SUCCEEDED', 1, 1, 0, 5, 0, %s, %s, '', '')",
                    [job_id, connection.ops.adapt_datetimefield_value(timezone.now()), value],
                )
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
        assert read_run_log(run_log) == []  # the migration loaded none of them
        assert Job.objects.get(pk="a" * 24).result == {"answer": 42}
        assert Job.objects.get(pk="c" * 24).result_package is None  # nothing loadable: dropped
        # A pickle that was in the table before the upgrade was trusted by 0.1.0 and is kept
        # readable; the migration signs what is there, it cannot tell who wrote it.
        assert Job.objects.get(pk="b" * 24).result_package is not None
    finally:
        Job.objects.all().delete()
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_qdead_list_and_the_job_dead_path_never_load_a_forged_result(orm_broker, run_log):
    """``manage.py qdead list`` reads dead letters with their jobs: a forged result stays unread."""
    from io import StringIO

    from django.core.management import call_command

    job_id = async_task("tests.tasks.fail", max_deliveries=1)
    run_sync(job_id)
    write_raw_result(job_id, unsigned_pickle())
    Job.objects.filter(pk=job_id).update(state=State.DEAD)
    out = StringIO()
    call_command("qdead", "list", stdout=out)
    assert job_id in out.getvalue()
    assert read_run_log(run_log) == []
