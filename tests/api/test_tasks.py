"""``@task`` and the ``Task`` class form: calling runs the function here; ``.delay`` and
``.apply_async`` enqueue with the task's defaults, overridable per call.
"""

from __future__ import annotations

import pytest

from django_taskmq import ConfigError, Task, async_task, result, task
from django_taskmq.api import run_sync
from django_taskmq.models import Job, State
from tests import tasks

pytestmark = pytest.mark.django_db


def test_calling_a_task_runs_the_function_without_enqueuing(broker):
    """Calling a @task runs it inline and returns its value; nothing is stored."""
    assert tasks.multiply(6, 7) == 42
    assert tasks.power(2, 10) == 1024
    assert not Job.objects.exists()


def test_task_keeps_the_functions_name_and_doc():
    """A @task is named by the function's dotted path and keeps its docstring."""
    assert tasks.multiply.name == "tests.tasks.multiply"
    assert "x * y" in tasks.multiply.__doc__
    assert tasks.power.name == "tests.tasks.Power"


def test_delay_enqueues_with_the_decorator_defaults(broker):
    """.delay() stores a job with the @task's queue and priority and runs with its arguments."""
    job_id = tasks.multiply.delay(3, y=4)
    j = Job.objects.get(pk=job_id)
    assert (j.func, j.queue, j.priority, j.state) == ("tests.tasks.multiply", "b", 5, State.QUEUED)
    run_sync(job_id)
    assert result(job_id) == 12


def test_apply_async_overrides_the_defaults(broker):
    """.apply_async(args, kwargs, **options): options win over the task's defaults."""
    job_id = tasks.multiply.apply_async((2,), {"y": 5}, queue="a", priority=-2, group="g")
    j = Job.objects.get(pk=job_id)
    assert (j.queue, j.priority, j.group) == ("a", -2, "g")
    run_sync(job_id)
    assert result(job_id) == 10


def test_bare_task_uses_the_global_defaults(broker):
    """A bare @task enqueues on the default queue at priority 0."""
    job_id = tasks.plain_task.delay(1, k="v")
    j = Job.objects.get(pk=job_id)
    assert (j.queue, j.priority) == ("default", 0)
    run_sync(job_id)
    assert result(job_id) == ((1,), {"k": "v"})


def test_delay_passes_kwargs_named_like_options_to_the_function(broker):
    """.delay(queue=..., priority=...) are the function's arguments, not options."""
    job_id = tasks.task_with_option_names.delay(queue="its-queue", priority="its-priority")
    j = Job.objects.get(pk=job_id)
    assert (j.queue, j.priority) == ("default", 0)
    run_sync(job_id)
    assert result(job_id) == {"queue": "its-queue", "priority": "its-priority"}


def test_apply_async_with_kwargs_and_options_of_the_same_name(broker):
    """apply_async keeps kwargs for the function and options for the job, even with equal names."""
    job_id = tasks.task_with_option_names.apply_async(kwargs={"queue": "arg"}, queue="b", priority=1)
    j = Job.objects.get(pk=job_id)
    assert (j.queue, j.priority) == ("b", 1)
    run_sync(job_id)
    assert result(job_id) == {"queue": "arg", "priority": None}


def test_class_form_enqueues_with_class_defaults_and_runs_run(broker):
    """A Task subclass: class attributes are the defaults, run() is what the worker calls."""
    job_id = tasks.power.delay(3, 4)
    j = Job.objects.get(pk=job_id)
    assert (j.func, j.queue, j.priority) == ("tests.tasks.Power", "a", 3)
    run_sync(job_id)
    assert result(job_id) == 81


def test_class_form_apply_async_overrides(broker):
    """The class form accepts per-call options too."""
    job_id = tasks.power.apply_async((2, 3), priority=9)
    assert Job.objects.get(pk=job_id).priority == 9
    run_sync(job_id)
    assert result(job_id) == 8


def test_task_without_run_refuses_to_run():
    """A Task subclass that does not define run() raises NotImplementedError when called."""
    class Empty(Task):
        pass

    with pytest.raises(NotImplementedError):
        Empty()()


@pytest.mark.parametrize("options,named", [
    (dict(priority=10), "priority"),
    (dict(priority=True), "priority"),
    (dict(max_deliveries=0), "max_deliveries"),
    (dict(retry="often"), "retry"),
    (dict(colour="red"), "colour"),
], ids=["priority 10", "bool priority", "max_deliveries 0", "bad retry", "unknown option"])
def test_bad_decorator_options_raise_config_error_at_decoration(options, named):
    """@task(...) validates its options when the function is decorated."""
    with pytest.raises(ConfigError, match=named):
        task(**options)(tasks.noop)


def test_bad_call_options_raise_config_error_at_the_call(broker):
    """A bad option to apply_async raises ConfigError; nothing is stored."""
    with pytest.raises(ConfigError, match="priority"):
        tasks.multiply.apply_async((1, 2), priority=1.5)
    with pytest.raises(ConfigError, match="queue"):
        tasks.multiply.apply_async((1, 2), queue="nope")
    assert not Job.objects.exists()


def test_async_task_with_a_task_object_uses_its_defaults(broker):
    """async_task(task_obj, ...) enqueues with the task's defaults unless the call overrides them."""
    default = Job.objects.get(pk=async_task(tasks.multiply, 2, 3))
    overridden = Job.objects.get(pk=async_task(tasks.multiply, 2, 3, priority=1))
    assert (default.queue, default.priority, default.func) == ("b", 5, "tests.tasks.multiply")
    assert (overridden.queue, overridden.priority) == ("b", 1)


def test_a_chain_link_with_an_unknown_queue_fails_at_the_call():
    """Every link's options are checked against TASKMQ at append time, not when the link is due."""
    from django_taskmq import ConfigError
    from django_taskmq import Chain

    chain = Chain().append("tests.tasks.noop")
    with pytest.raises(ConfigError, match="unknown queue"):
        chain.append("tests.tasks.noop", q_options={"queue": "nope"})


custom_named = task(name="billing.send-invoice")(tasks.add)


def test_a_custom_task_name_labels_the_job_and_the_worker_imports_the_real_path(broker):
    """@task(name=...) is a label: the job's task_name; the package names the importable function."""
    job_id = custom_named.delay(2, 3)
    job = Job.objects.get(pk=job_id)
    assert (job.task_name, job.func) == ("billing.send-invoice", "tests.tasks.add")
    run_sync(job_id)
    assert result(job_id) == 5
