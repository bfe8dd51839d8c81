"""``async_task``: options are stored on the job, every bad argument raises ConfigError at the
call (nothing is stored), ``q_options`` carries options whose names collide with the task's own
keyword arguments, and the job row belongs to the caller's transaction.
"""

from __future__ import annotations

import datetime
import time

import pytest
from django.db import transaction

from django_taskmq import ConfigError, Priority, Retry, async_task, enqueue_many, result
from django_taskmq.api import run_sync
from django_taskmq.models import Job, State
from tests import tasks

pytestmark = pytest.mark.django_db


def test_returns_the_id_of_a_stored_queued_job(broker):
    """async_task returns the id of a QUEUED job for the task's dotted path, on the default queue."""
    job_id = async_task(tasks.add, 1, 2)
    j = Job.objects.get(pk=job_id)
    assert (j.func, j.state, j.queue, j.priority, j.deliveries) == ("tests.tasks.add", State.QUEUED, "default", 0, 0)


def test_dotted_path_and_callable_make_the_same_task(broker):
    """A dotted path and the function itself name the same task."""
    a = Job.objects.get(pk=async_task("tests.tasks.add", 1, 2))
    b = Job.objects.get(pk=async_task(tasks.add, 1, 2))
    assert a.func == b.func == "tests.tasks.add"


def test_options_are_stored_on_the_job(broker):
    """queue, priority, group, task_name, max_deliveries and expires_at land on the job row."""
    expires = time.time() + 3600
    job_id = async_task(tasks.noop, queue="emails", priority=Priority.HIGH, group="g1", task_name="welcome",
                        max_deliveries=2, expires_at=expires)
    j = Job.objects.get(pk=job_id)
    assert (j.queue, j.priority, j.group, j.task_name, j.max_deliveries) == ("emails", 5, "g1", "welcome", 2)
    assert j.expires_at == pytest.approx(expires)


def test_ids_sort_in_enqueue_order(broker):
    """Job ids made one after the other sort in the order they were made."""
    ids = [async_task(tasks.noop) for _ in range(50)]
    assert sorted(ids) == ids


@pytest.mark.parametrize("priority", [10, -10, True, False, 1.5, 5.0, "5"], ids=repr)
def test_bad_priority_raises_config_error_and_stores_nothing(broker, priority):
    """A priority outside -9..9, a bool or a non-integer is refused at the call, never clamped."""
    with pytest.raises(ConfigError, match="priority"):
        async_task(tasks.noop, priority=priority)
    assert not Job.objects.exists()


@pytest.mark.parametrize("priority", [-9, 9, Priority.LOW, Priority.CRITICAL, 0])
def test_priorities_at_the_edges_are_accepted_unchanged(broker, priority):
    """-9, 9 and the named priorities are stored as given."""
    assert Job.objects.get(pk=async_task(tasks.noop, priority=priority)).priority == int(priority)


def naive_eta():
    return datetime.datetime.now() + datetime.timedelta(minutes=5)


BAD_CALLS = {
    "unknown queue": (dict(queue="nope"), "queue"),
    "queue not a string": (dict(queue=3), "queue"),
    "naive eta": (dict(eta=naive_eta()), "eta"),
    "eta of a wrong type": (dict(eta="tomorrow"), "eta"),
    "delay and eta": (dict(delay=5, eta=time.time() + 60), "delay or eta"),
    "negative delay": (dict(delay=-1), "delay"),
    "bool delay": (dict(delay=True), "delay"),
    "naive expires_at": (dict(expires_at=naive_eta()), "expires_at"),
    "zero timeout": (dict(timeout=0), "timeout"),
    "max_deliveries zero": (dict(max_deliveries=0), "max_deliveries"),
    "max_deliveries float": (dict(max_deliveries=2.5), "max_deliveries"),
    "ack_failure not bool": (dict(ack_failure="yes"), "ack_failure"),
    "sync not bool": (dict(sync=1), "sync"),
    "retry of a wrong type": (dict(retry="fast"), "retry"),
    "retry with a bad backoff": (dict(retry={"backoff": "sideways"}), "backoff"),
    "retry with an unknown key": (dict(retry={"tries": 3}), "tries"),
    "empty key": (dict(key=""), "key"),
    "key too long": (dict(key="k" * 256), "key"),
    "lambda hook": (dict(hook=lambda job: None), "hook"),
    "group too long": (dict(group="g" * 101), "group"),
}


@pytest.mark.parametrize("options,named", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_option_raises_config_error_naming_it(broker, options, named):
    """Each bad option raises ConfigError at the call, the message names it, and no job is stored."""
    with pytest.raises(ConfigError, match=named):
        async_task(tasks.noop, **options)
    with pytest.raises(ConfigError, match=named):
        async_task(tasks.noop, q_options=options)
    assert not Job.objects.exists()


def test_unknown_q_options_key_raises_config_error(broker):
    """q_options with a key that is not an option raises ConfigError naming it."""
    with pytest.raises(ConfigError, match="colour"):
        async_task(tasks.noop, q_options={"colour": "red"})
    with pytest.raises(ConfigError, match="q_options"):
        async_task(tasks.noop, q_options=[("queue", "a")])
    assert not Job.objects.exists()


@pytest.mark.parametrize("func", [lambda: None, "no_dots", "tests.tasks .add", 42],
                         ids=["lambda", "no dots", "space", "int"])
def test_func_that_a_worker_cannot_import_raises_config_error(broker, func):
    """A lambda, a name without a module or a non-callable raises ConfigError at the call."""
    with pytest.raises(ConfigError):
        async_task(func)
    assert not Job.objects.exists()


def test_nested_function_raises_config_error(broker):
    """A function defined inside another cannot be imported by a worker: ConfigError."""
    def local():
        return None

    with pytest.raises(ConfigError, match="module-level"):
        async_task(local)


def test_q_options_pass_options_named_like_the_functions_kwargs(broker):
    """Options given in q_options leave same-named keyword arguments to the function."""
    job_id = async_task(tasks.takes_options, queue="q-arg", priority="p-arg", delay="d-arg",
                        q_options={"queue": "b", "priority": 5, "delay": 0})
    j = Job.objects.get(pk=job_id)
    assert (j.queue, j.priority) == ("b", 5)
    run_sync(job_id)
    assert result(job_id) == {"queue": "q-arg", "priority": "p-arg", "delay": "d-arg", "hook": None}


def test_options_outside_q_options_are_still_options(broker):
    """With q_options, keyword options not named in it still act as options (as in django-q2)."""
    job_id = async_task(tasks.echo, 1, group="g", q_options={"queue": "a"}, x=2)
    j = Job.objects.get(pk=job_id)
    assert (j.queue, j.group) == ("a", "g")
    run_sync(job_id)
    assert result(job_id) == ((1,), {"x": 2})


def test_q_options_win_over_keyword_options(broker):
    """An option in q_options takes precedence; the keyword of the same name goes to the function."""
    job_id = async_task(tasks.echo, priority=3, q_options={"priority": 7})
    assert Job.objects.get(pk=job_id).priority == 7
    run_sync(job_id)
    assert result(job_id) == ((), {"priority": 3})


def test_job_exists_only_if_the_callers_transaction_commits(broker):
    """Inside transaction.atomic(), a rolled-back transaction leaves no job (and no idempotency key)."""
    with pytest.raises(RuntimeError), transaction.atomic():
        async_task(tasks.noop)
        async_task(tasks.noop, key="rolled-back")
        raise RuntimeError("roll back")
    assert not Job.objects.exists()
    job_id = async_task(tasks.noop, key="rolled-back")
    assert Job.objects.filter(pk=job_id).exists()


def test_job_committed_with_the_callers_transaction_exists(broker):
    """A job enqueued inside a transaction that commits is stored."""
    with transaction.atomic():
        job_id = async_task(tasks.noop)
    assert Job.objects.filter(pk=job_id).exists()


def test_retry_policy_as_object_or_dict_caps_deliveries(broker):
    """retry=Retry(...) or its dict form is accepted; max_attempts caps the job's deliveries."""
    a = Job.objects.get(pk=async_task(tasks.noop, retry=Retry(max_attempts=2)))
    b = Job.objects.get(pk=async_task(tasks.noop, retry={"max_attempts": 3, "backoff": "fixed"}))
    assert (a.max_deliveries, b.max_deliveries) == (2, 3)


def test_enqueue_many_refuses_a_key_and_bad_options(broker):
    """enqueue_many takes no idempotency key and validates its options like async_task."""
    with pytest.raises(ConfigError, match="key"):
        enqueue_many(tasks.noop, [(1,)], key="k")
    with pytest.raises(ConfigError, match="priority"):
        enqueue_many(tasks.noop, [(1,), (2,)], priority=12)
    assert not Job.objects.exists()
