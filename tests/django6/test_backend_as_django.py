"""TaskMQBackend where Django's own tests/tasks suite found it differing from Django's API: an
enqueue that raises stores nothing, results keep ``run_after``, sync mode sends Django's signals
in Django's order (``task_finished`` where the exception is current) and lets a
``KeyboardInterrupt`` through, an unstorable return value is recorded with its class and
traceback, and ``check()`` reports a missing app."""

import datetime
import logging
import sys

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone

from tests.django6.djtasks import (TaskResultStatus, default_task_backend, task_enqueued, task_finished,
                                   task_started)

from django_taskmq.api import run_sync  # noqa: E402
from django_taskmq.models import Job, State  # noqa: E402

pytestmark = pytest.mark.django_db


@pytest.fixture
def sync_mode(taskmq_settings):
    """TASKMQ['sync']: every enqueue runs where the test is."""
    taskmq_settings(sync=True)


@pytest.fixture
def received():
    """The (signal, status, exception current in the receiver) of each of Django's task signals sent."""
    seen: list[tuple[str, str, BaseException | None]] = []

    def receiver(name):
        def receive(sender, task_result, **kwargs):
            seen.append((name, str(task_result.status), sys.exc_info()[1]))
        return receive

    receivers = [(signal, receiver(name)) for signal, name in
                 ((task_enqueued, "enqueued"), (task_started, "started"), (task_finished, "finished"))]
    for signal, receive in receivers:
        signal.connect(receive, weak=False)
    yield seen
    for signal, receive in receivers:
        signal.disconnect(receive)


def test_an_enqueue_that_django_refuses_stores_nothing():
    """Django refuses an argument JSON cannot hold (TypeError: Unsupported type): no job is left behind."""
    from tests.django6 import tasks_django

    with pytest.raises(TypeError, match="Unsupported type"):
        tasks_django.echo.enqueue(datetime.datetime.now())
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks_django.multiply.enqueue(2, b=object())
    with pytest.raises(TypeError, match="Unsupported type"):
        async_to_sync(tasks_django.multiply.aenqueue)({1, 2}, 3)
    assert Job.objects.count() == 0
    # The arguments Django accepts are stored as Django normalises them (a tuple is a list).
    result = tasks_django.multiply.enqueue((1, 2), 2)
    assert result.args == [[1, 2], 2]
    assert Job.objects.count() == 1


def test_the_result_keeps_run_after():
    from tests.django6 import tasks_django

    when = timezone.now() + datetime.timedelta(hours=1, microseconds=7)
    task = tasks_django.multiply.using(run_after=when)
    result = task.enqueue(2, 3)
    assert result.task.run_after == when and result.task == task
    assert default_task_backend.get_result(result.id).task == task
    assert tasks_django.multiply.enqueue(1, 1).task.run_after is None


def test_sync_mode_sends_djangos_signals_in_djangos_order(sync_mode, received):
    from tests.django6 import tasks_django

    result = tasks_django.multiply.enqueue(6, 7)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    assert received == [("enqueued", "READY", None), ("started", "RUNNING", None),
                        ("finished", "SUCCESSFUL", None)]


def test_sync_mode_sends_task_finished_where_the_exception_is_current(sync_mode, taskmq_settings, received,
                                                                      caplog):
    """Django's receiver logs a failure with logger.exception: its line carries the task's exception."""
    from tests.django6 import tasks_django

    taskmq_settings(sync=True, ack_failures=True)
    with caplog.at_level(logging.DEBUG, logger="django.tasks" if "django.tasks" in sys.modules else "django_tasks"):
        result = tasks_django.explode.enqueue()
    assert result.status == TaskResultStatus.FAILED
    assert [(name, status) for name, status, _ in received] == [("enqueued", "READY"), ("started", "RUNNING"),
                                                               ("finished", "FAILED")]
    current = received[-1][2]
    assert isinstance(current, ValueError) and str(current) == "django task failed"
    finished = [r for r in caplog.records if r.name in ("django.tasks", "django_tasks") and r.levelno == logging.ERROR]
    assert len(finished) == 1 and "state=FAILED" in finished[0].getMessage()
    assert finished[0].exc_info and finished[0].exc_info[1] is current


def test_sync_mode_lets_a_keyboard_interrupt_through_once_it_is_recorded(sync_mode):
    from tests.django6 import tasks_django

    with pytest.raises(KeyboardInterrupt, match="Ctrl-C"):
        tasks_django.interrupted.enqueue()
    job = Job.objects.get()
    assert job.state != State.RUNNING and "KeyboardInterrupt" in job.error


def test_our_sync_mode_lets_a_keyboard_interrupt_through(sync_mode):
    from django_taskmq import async_task

    with pytest.raises(KeyboardInterrupt):
        async_task("tests.django6.tasks_django.interrupted.func")
    assert Job.objects.get().state == State.RETRYING


def test_an_unstorable_return_value_is_recorded_with_its_class_and_traceback():
    """A Django task's value is normalised as Django does: a lambda fails with Django's TypeError."""
    from tests.django6 import tasks_django

    result = tasks_django.returns_a_lambda.enqueue()
    run_sync(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert "Unsupported type" in error.traceback and error.traceback.startswith("Traceback")
    # A tuple comes back as the list Django's own backends return.
    value = tasks_django.returns_a_tuple.enqueue()
    run_sync(value.id)
    value.refresh()
    assert value.return_value == [1, "two", {"three": [3]}]


def test_our_unpicklable_result_names_the_picklers_error_and_its_traceback():
    from django_taskmq import async_task

    job_id = async_task("tests.tasks.unpicklable_result")
    run_sync(job_id)
    job = Job.objects.get(pk=job_id)
    assert job.state == State.DEAD  # not retried: a re-run would return it again
    assert job.error.startswith("TypeError: result cannot be pickled: cannot pickle '_thread.lock' object")
    assert job.traceback.startswith("Traceback") and "TypeError: cannot pickle" in job.traceback


def test_check_reports_a_missing_app():
    from django.conf import settings

    from django_taskmq.backends.tasks import TaskMQBackend

    backend = TaskMQBackend("default", {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend"})
    assert list(backend.check()) == []
    others = [app for app in settings.INSTALLED_APPS if app != "django_taskmq"]
    with override_settings(INSTALLED_APPS=others):
        messages = list(backend.check())
    assert [m.id for m in messages] == ["taskmq.E051"]
    assert "'django_taskmq' is not in INSTALLED_APPS" in messages[0].msg
