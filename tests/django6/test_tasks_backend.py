"""The tasks-framework backend in one process (``run_sync`` runs a job where the test is): Django's
task API enqueues django_taskmq jobs, on Django 6.0+ (``django.tasks``) and on Django 5.2 with the
``django-tasks`` backport. ``test_conformance.py`` runs the same tasks on a real ``qcluster``."""

import asyncio

import pytest

from tests.django6.djtasks import (InvalidTask, TaskResultDoesNotExist, TaskResultStatus, default_task_backend,
                                   task, task_backends, task_enqueued)

from django_taskmq import Priority, async_task  # noqa: E402
from django_taskmq import task as taskmq_task  # noqa: E402
from django_taskmq.api import run_sync  # noqa: E402
from django_taskmq.backends.tasks import to_django, to_taskmq  # noqa: E402
from django_taskmq.models import Job, State  # noqa: E402

pytestmark = pytest.mark.django_db


def test_the_test_settings_use_the_taskmq_backend():
    from django_taskmq.backends.tasks import TaskMQBackend

    assert isinstance(task_backends["default"], TaskMQBackend)


def test_the_priority_mapping_is_monotonic_covers_both_ranges_and_keeps_zero():
    mapped = [to_taskmq(p) for p in range(-100, 101)]
    assert mapped == sorted(mapped)
    assert (mapped[0], mapped[100], mapped[-1]) == (-9, 0, 9)
    assert set(mapped) == set(range(-9, 10))
    assert [to_taskmq(p) for p in (-100, -1, 0, 1, 100)] == [-9, -1, 0, 1, 9]
    assert all(to_taskmq(to_django(q)) == q for q in range(-9, 10))


def test_enqueue_creates_a_queued_job_with_the_mapped_priority_and_reports_the_django_one():
    from tests.django6 import tasks_django

    result = tasks_django.multiply.using(priority=50).enqueue(6, 7)
    job = Job.objects.get(pk=result.id)
    assert (job.state, job.priority, job.queue, job.func) == (State.QUEUED, 5, "default",
                                                              "tests.django6.tasks_django.multiply")
    assert result.status == TaskResultStatus.READY
    assert result.task.priority == 50
    assert default_task_backend.get_result(result.id).task.priority == 50
    assert (result.attempts, result.worker_ids, result.errors) == (0, [], [])
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    with pytest.raises(ValueError, match="not finished"):
        result.return_value


@pytest.mark.parametrize("priority", [-100, -1, 0, 1, 100])
def test_every_edge_priority_is_valid(priority):
    from tests.django6 import tasks_django

    result = tasks_django.echo.using(priority=priority).enqueue(priority)
    assert Job.objects.get(pk=result.id).priority == to_taskmq(priority)
    assert result.task.priority == priority


def test_priorities_outside_djangos_range_and_unknown_queues_are_refused():
    from tests.django6 import tasks_django

    for bad in (-101, 101):
        with pytest.raises(InvalidTask, match="priority"):
            tasks_django.multiply.using(priority=bad)
    with pytest.raises(InvalidTask, match="not in TASKMQ"):
        tasks_django.multiply.using(queue_name="nope")


def test_our_priority_constants_work_through_our_api():
    from tests.django6 import tasks_django

    job_id = async_task("tests.django6.tasks_django.multiply", 2, 3, q_options={"priority": Priority.HIGH})
    assert Job.objects.get(pk=job_id).priority == Priority.HIGH
    result = tasks_django.multiply.get_result(job_id)
    assert to_taskmq(result.task.priority) == Priority.HIGH  # the task's own 5 is in another band
    run_sync(job_id)
    result.refresh()
    assert result.return_value == 6


def test_a_run_job_reports_its_return_value_and_timestamps():
    from tests.django6 import tasks_django

    result = tasks_django.multiply.using(priority=-3, queue_name="a").enqueue(6, 7)
    run_sync(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert tasks_django.multiply.get_result(result.id).task.queue_name == "a"


def test_a_failing_task_is_ready_for_its_retry_then_failed_with_its_errors(taskmq_settings):
    from tests.django6 import tasks_django

    result = tasks_django.explode.enqueue()
    run_sync(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # failed delivery, waiting for its retry
    assert result.errors[0].exception_class is ValueError
    assert "django task failed" in result.errors[0].traceback
    with pytest.raises(ValueError, match="not finished"):
        result.return_value
    Job.objects.filter(pk=result.id).update(state=State.DEAD)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="failed"):
        result.return_value


def test_a_context_task_gets_the_execution_number_and_its_live_result():
    from tests.django6 import tasks_django

    result = tasks_django.with_context.enqueue(7)
    run_sync(result.id)
    result.refresh()
    assert result.return_value == {"attempt": 1, "id": result.id, "status": "RUNNING", "attempts": 1, "value": 7,
                                   "started": True}


def no_context(value):
    return value


def test_a_context_task_without_a_context_argument_is_refused():
    with pytest.raises(InvalidTask, match="context"):
        task(takes_context=True)(no_context)


def test_async_tasks_run_with_and_without_context():
    from tests.django6 import tasks_django

    added = tasks_django.async_add.enqueue(2, 3)
    context = tasks_django.async_with_context.enqueue()
    for r in (added, context):
        run_sync(r.id)
        r.refresh()
    assert (added.return_value, context.return_value) == (5, 1)


def test_our_own_async_functions_run():
    job_id = async_task("tests.django6.test_tasks_backend.our_async", 4)
    run_sync(job_id)
    assert Job.objects.get(pk=job_id).result == 8


async def our_async(x):
    await asyncio.sleep(0)
    return x * 2


@taskmq_task(queue="a")
async def our_async_task(x):
    await asyncio.sleep(0)
    return x * 3


def test_our_own_async_at_task_runs():
    job_id = our_async_task.delay(4)
    run_sync(job_id)
    assert Job.objects.get(pk=job_id).result == 12


def test_aenqueue_aget_result_and_arefresh():
    from asgiref.sync import async_to_sync

    from tests.django6 import tasks_django

    async def scenario():
        result = await tasks_django.multiply.aenqueue(3, 3)
        fetched = await tasks_django.multiply.aget_result(result.id)
        await result.arefresh()
        return result, fetched

    result, fetched = async_to_sync(scenario)()
    assert fetched.id == result.id and result.status == TaskResultStatus.READY


def test_task_enqueued_is_sent_with_the_ready_result():
    from tests.django6 import tasks_django

    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.id, task_result.status))

    task_enqueued.connect(receiver)
    try:
        result = tasks_django.echo.enqueue(1)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(result.id, TaskResultStatus.READY)]


def test_unknown_ids_and_jobs_of_plain_functions_do_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("nope")
    job_id = async_task("tests.tasks.noop")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(job_id)


def test_backend_options_set_the_retry_policy_per_task(settings):
    from tests.django6 import tasks_django

    settings.TASKS = {"default": {
        "BACKEND": "django_taskmq.backends.tasks.TaskMQBackend",
        "OPTIONS": {"max_deliveries": 3, "tasks": {"tests.django6.tasks_django.explode": {"max_deliveries": 1}}},
    }}
    explode = tasks_django.explode.enqueue()
    echo = tasks_django.echo.enqueue(1)
    assert Job.objects.get(pk=explode.id).max_deliveries == 1
    assert Job.objects.get(pk=echo.id).max_deliveries == 3
    run_sync(explode.id)
    explode.refresh()
    assert explode.status == TaskResultStatus.FAILED  # one delivery: dead at once
    assert explode.finished_at is not None and explode.errors[0].exception_class is ValueError


def test_unknown_backend_options_are_refused(settings):
    from tests.django6.djtasks import task_backends

    settings.TASKS = {"default": {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend",
                                  "OPTIONS": {"bogus": 1}}}
    with pytest.raises(InvalidTask, match="bogus"):
        task_backends["default"]


def test_queues_that_differ_from_taskmq_queues_are_a_warning(settings):
    from django_taskmq.backends.tasks import check_queues

    settings.TASKS = {"default": {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend",
                                  "QUEUES": ["default", "ghost"]}}
    (message,) = check_queues()
    assert message.id == "taskmq.W050" and "ghost" in message.msg and "emails" in message.msg
    settings.TASKS = {"default": {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend",
                                  "QUEUES": ["default", "a", "b", "emails", "reports"]}}
    assert check_queues() == []


def test_a_forged_result_is_not_loaded_by_get_result(run_log):
    """A pickle written into the result column with raw SQL: get_result raises, nothing runs."""
    import base64
    import pickle

    from django.db import connection

    from django_taskmq.exceptions import UnreadableResult
    from tests.django6 import tasks_django
    from tests.tasks import read_run_log, record_run

    class Evil:
        def __reduce__(self):
            return record_run, ("unpickled",)

    result = tasks_django.multiply.enqueue(6, 7)
    run_sync(result.id)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Job._meta.db_table} SET result_package = %s WHERE id = %s",
                       [base64.b64encode(pickle.dumps(Evil())).decode(), result.id])
    with pytest.raises(UnreadableResult, match="bad signature"):
        tasks_django.multiply.get_result(result.id)
    assert read_run_log(run_log) == []


def test_a_django_task_in_an_allowed_module_may_be_scheduled():
    from django_taskmq import schedule

    assert schedule("tests.django6.tasks_django.multiply", 2, 3).func == "tests.django6.tasks_django.multiply"


def test_get_result_imports_nothing_named_by_plain_columns():
    """``func`` and ``error`` are unsigned columns: a row rewritten with raw values must not make
    get_result import a module; the task comes from the signed package."""
    import sys

    from tests.django6 import tasks_django

    result = tasks_django.multiply.enqueue(6, 7)
    run_sync(result.id)
    Job.objects.filter(pk=result.id).update(func="taskmq_never_imported_a.f", state=State.FAILED,
                                            error="taskmq_never_imported_b.Boom: forged")
    got = default_task_backend.get_result(result.id)
    assert got.task.module_path == "tests.django6.tasks_django.multiply"
    assert got.errors[0].exception_class_path == "builtins.Exception"
    assert "taskmq_never_imported_a" not in sys.modules and "taskmq_never_imported_b" not in sys.modules


@pytest.mark.django_db(transaction=True)  # the progress writer writes on its own connection
def test_a_django_task_reports_progress_through_current_job():
    from django_taskmq import fetch
    from tests.django6 import tasks_django

    result = tasks_django.reports_progress.enqueue(3)
    run_sync(result.id)
    result.refresh()
    assert result.return_value == result.id
    progress = fetch(result.id).progress
    assert (progress["done"], progress["total"], progress["message"]) == (3, 3, "django task")


def test_backend_options_encrypt_a_tasks_arguments_and_result(settings):
    from django_taskmq.encryption import Sealed, generate_key
    from django_taskmq.envelope import verify, verify_result
    from tests.django6 import tasks_django

    settings.TASKMQ = {**settings.TASKMQ, "encryption_keys": [generate_key()]}
    settings.TASKS = {"default": {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend",
                                  "OPTIONS": {"tasks": {"tests.django6.tasks_django.echo": {"encrypt": True}}}}}
    result = tasks_django.echo.enqueue("marker-d6")
    job = Job.objects.get(pk=result.id)
    assert "marker-d6" not in job.payload and verify(job.payload, "tests", decrypt=False).secret is not None
    run_sync(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "marker-d6"
    assert result.args == ["marker-d6"]
    assert isinstance(verify_result(Job.objects.get(pk=result.id).result_package, "tests", decrypt=False), Sealed)
