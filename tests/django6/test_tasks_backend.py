"""The django.tasks backend: Django's task API enqueues django_taskmq jobs (Django 6.0+ only)."""

import pytest

pytest.importorskip("django.tasks", reason="django.tasks exists from Django 6.0")

from django.tasks import TaskResultStatus  # noqa: E402
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist  # noqa: E402

from django_taskmq.api import run_sync  # noqa: E402
from django_taskmq.models import Job, State  # noqa: E402

pytestmark = pytest.mark.django_db


def test_the_test_settings_use_the_taskmq_backend():
    from django.tasks import task_backends

    from django_taskmq.backends.tasks import TaskMQBackend

    assert isinstance(task_backends["default"], TaskMQBackend)


def test_enqueue_creates_a_queued_job_with_the_task_priority_and_queue():
    from tests.django6 import tasks_django

    result = tasks_django.multiply.enqueue(6, 7)
    job = Job.objects.get(pk=result.id)
    assert (job.state, job.priority, job.queue, job.func) == (State.QUEUED, 5, "default", "tests.django6.tasks_django.multiply")
    assert result.status == TaskResultStatus.READY


def test_a_run_job_reports_its_return_value_through_get_result():
    from tests.django6 import tasks_django

    result = tasks_django.multiply.using(priority=-3, queue_name="a").enqueue(6, 7)
    run_sync(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert tasks_django.multiply.get_result(result.id).task.queue_name == "a"


def test_a_failing_task_reports_its_exception_class():
    from tests.django6 import tasks_django

    result = tasks_django.explode.enqueue()
    run_sync(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # failed delivery, waiting for its retry
    assert result.errors[0].exception_class is ValueError


def test_priority_outside_taskmq_range_and_unknown_queue_are_refused():
    from tests.django6 import tasks_django

    with pytest.raises(InvalidTask, match="-9..9"):
        tasks_django.multiply.using(priority=50)
    with pytest.raises(InvalidTask, match="not in TASKMQ"):
        tasks_django.multiply.using(queue_name="nope")


def test_context_tasks_are_refused_and_unknown_ids_do_not_exist():
    from tests.django6 import tasks_django

    from django.tasks import task

    with pytest.raises(InvalidTask, match="TaskContext"):
        task(takes_context=True)(tasks_django.with_context)
    from django.tasks import default_task_backend

    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("nope")


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
