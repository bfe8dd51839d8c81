"""Calls are checked where they are made: a misspelled option raises ConfigError naming the nearest
option, a call its function cannot take raises TypeError as the function would, and nothing is
stored, whichever entry point took it. A worker dead-letters a stored call that does not fit."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from django_taskmq import ConfigError, Workflow, async_task, enqueue_many, schedule, task
from django_taskmq.api import run_sync
from django_taskmq.brokers import get_broker
from django_taskmq.conf import get_settings
from django_taskmq.models import DeadLetter, Job, Schedule, State
from django_taskmq.options import JobTemplate

pytestmark = pytest.mark.django_db


def stored() -> tuple[int, int]:
    return Job.objects.count(), Schedule.objects.count()


def test_a_missing_argument_raises_at_the_call_and_stores_nothing():
    with pytest.raises(TypeError, match=r"tests\.tasks\.add\(\) missing a required argument: 'b'"):
        async_task("tests.tasks.add", 1)
    with pytest.raises(TypeError, match="too many positional arguments"):
        async_task("tests.tasks.add", 1, 2, 3)
    assert stored() == (0, 0)
    assert Job.objects.get(pk=async_task("tests.tasks.add", 1, b=2)).func == "tests.tasks.add"


def test_a_misspelled_option_names_the_nearest_one():
    # As a keyword it is the function's, which does not take it: TypeError, saying which option was meant.
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'timout' "
                                        r"\(did you mean the option 'timeout'\?\)"):
        async_task("tests.tasks.add", 1, 2, timout=5)
    # Where only options go, it is a ConfigError naming the option and the nearest valid one.
    with pytest.raises(ConfigError, match=r"unknown option\(s\) 'timout' \(did you mean 'timeout'\?\)"):
        async_task("tests.tasks.add", 1, 2, q_options={"timout": 5})
    with pytest.raises(ConfigError, match=r"'prority' \(did you mean 'priority'\?\)"):
        task(prority=3)
    with pytest.raises(ConfigError, match=r"unknown option\(s\) 'zzz'; known"):
        async_task("tests.tasks.add", 1, 2, q_options={"zzz": 5})
    assert stored() == (0, 0)


def test_delay_binds_the_call_to_the_function():
    """``send_welcome.delay("x", priority=12)``: every keyword of delay() is the function's."""
    from tests.tasks import multiply

    with pytest.raises(TypeError, match="unexpected keyword argument 'priority'"):
        multiply.delay(2, 3, priority=12)
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        multiply.apply_async((2,))
    assert stored() == (0, 0)
    assert multiply.delay(2, 3)


def test_enqueue_many_stores_none_when_one_call_does_not_fit():
    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        enqueue_many("tests.tasks.add", [(1, 2), (3, 4), (5,)])
    assert stored() == (0, 0)


def test_schedule_binds_each_runs_call():
    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        schedule("tests.tasks.add", 1, name="half")
    with pytest.raises(TypeError, match="unexpected keyword argument 'due'"):
        schedule("tests.tasks.add", 1, 2, name="due", intended_date_kwarg="due")
    assert stored() == (0, 0)
    schedule("tests.tasks.echo", name="echo", intended_date_kwarg="due")


def test_a_workflow_step_is_bound_at_add():
    flow = Workflow("w")
    flow.add("tests.tasks.add", 1, 2, name="good")
    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        flow.add("tests.tasks.add", 1, name="bad", after=["good"])
    flow.enqueue()
    assert Job.objects.count() == 1


def test_a_task_class_and_a_django_task_bind_without_self_and_context():
    from tests.tasks import Power

    with pytest.raises(TypeError, match="missing a required argument: 'exp'"):
        async_task(Power, 2)
    assert Job.objects.get(pk=async_task(Power, 2, 3)).func == "tests.tasks.Power"


def test_a_function_the_caller_cannot_import_is_not_bound():
    """A callable handed in whose module only the workers have: its call is not bound (documented)."""
    def elsewhere(a, b):
        return a + b

    elsewhere.__module__, elsewhere.__qualname__ = "worker_only.tasks", "elsewhere"
    template = JobTemplate(elsewhere, {}, get_settings())
    assert template.signature is None
    template.bind((1, 2, 3, 4), {"no": 1})  # not bound: nothing to bind to


def test_the_worker_dead_letters_a_stored_call_that_does_not_fit():
    """A job stored without the check (imported, or the function changed since): no retry, DEAD at once."""
    values = JobTemplate("tests.tasks.add", {"max_deliveries": 5}, get_settings(), check_calls=False).values((1,), {})
    job_id = get_broker().enqueue(values, key=None)
    run_sync(job_id)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.deliveries) == (State.DEAD, 1)
    assert job.error == "TypeError: tests.tasks.add() missing a required argument: 'b'"
    assert DeadLetter.objects.get(job_id=job_id).reason.startswith("TypeError: tests.tasks.add() missing")


def test_the_django_backend_binds_too():
    djtasks = pytest.importorskip("tests.django6.djtasks")
    from tests.django6 import tasks_django

    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        tasks_django.multiply.enqueue(1)
    with pytest.raises(TypeError, match="multiple values for argument 'value'"):
        tasks_django.with_context.enqueue(1, value=2)  # the context is the worker's to pass: 1 is value
    assert stored() == (0, 0)
    assert tasks_django.with_context.enqueue(1).status == djtasks.TaskResultStatus.READY


def test_a_schedule_due_time_stand_in_is_not_stored():
    when = timezone.now() + datetime.timedelta(hours=1)
    item = schedule("tests.tasks.echo", name="e", next_run=when, intended_date_kwarg="due")
    assert item.kwargs == {}


def test_a_durable_tasks_call_is_bound_without_its_context():
    """The context is the worker's first argument, never the caller's: the call is bound to the rest."""
    from tests.cluster.tasks_durable import three_steps

    with pytest.raises(TypeError, match="missing a required argument: 'marker'"):
        three_steps.delay(1)
    with pytest.raises(TypeError, match="too many positional arguments"):
        async_task("tests.cluster.tasks_durable.three_steps", "ctx", 1, "m")
    assert stored() == (0, 0)
    assert Job.objects.filter(pk=three_steps.delay(1, "m")).exists()
