"""The examples of django-q2's documentation (tasks, groups, chains, iterables, schedules, hooks,
cached results) run unchanged on ``django_taskmq.compat.django_q`` apart from their import lines,
and give the results the documentation shows. Like the docs' own tests, they run in sync mode.

Where the examples cannot run here, the test shows the documented difference: schedules may name
only the project's functions (``math.*`` is refused), a function that does not import is refused
at the call, and a cached record cannot be ``save()``-d (see docs/django_q2.rst).
"""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path

import pytest
from django.db import IntegrityError
from django.utils import timezone

from django_taskmq.exceptions import ConfigError
from django_taskmq.models import Job, State

DOCS = Path(__file__).resolve().parent.parent / "django_q_docs"


@pytest.fixture
def docs(db, taskmq_settings, monkeypatch):
    """Sync mode, an empty cache, and the examples' ``hooks`` module importable as ``hooks``."""
    from django.core.cache import cache

    monkeypatch.syspath_prepend(str(DOCS))
    taskmq_settings(sync=True)
    cache.clear()


# -- tasks.rst --------------------------------------------------------------------------------------
def test_async_task_result_and_hook(docs, capsys):
    from django_taskmq.compat.django_q import async_task, result

    # create the task
    async_task('math.copysign', 2, -2)

    # or with import and storing the id
    from math import copysign  # (the docs write "import math.copysign", which Python refuses)

    task_id = async_task(copysign, 2, -2)

    # get the result
    task_result = result(task_id)
    assert task_result == -2.0

    # result returns None if the task has not been executed yet
    # you can wait for it
    task_result = result(task_id, 200)
    assert task_result == -2.0

    # but in most cases you will want to use a hook:
    async_task('math.modf', 2.5, hook='hooks.print_result')
    assert capsys.readouterr().out == "(0.5, 2.0)\n"

    # Async options in a dict
    opts = {'hook': 'hooks.print_result',
            'group': 'math',
            'timeout': 30}

    task_id = async_task('math.modf', 2.5, q_options=opts)
    assert capsys.readouterr().out == "(0.5, 2.0)\n"
    assert isinstance(task_id, str) and Job.objects.get(pk=task_id).group == "math"


def test_async_task_class(docs):
    from django_taskmq.compat.django_q import AsyncTask

    # instantiate an async task
    a = AsyncTask('math.floor', 1.5, group='math')

    # you can set or change keywords afterwards
    a.cached = True

    # run it
    a.run()

    # wait indefinitely for the result and print it
    assert a.result(wait=-1) == 1

    # change the args
    a.args = (2.5,)

    # run it again
    a.run()

    # wait max 10 seconds for the result and print it
    assert a.result(wait=10) == 2


def test_cached_operations(docs):
    from django_taskmq.compat.django_q import async_task, fetch, result

    # cache the result for 10 seconds
    id = async_task('math.floor', 100, cached=10)

    # wait max 50ms for the result to appear in the cache
    assert result(id, wait=50, cached=True) == 100

    # or fetch the task object
    task = fetch(id, cached=True)
    assert (task.success, task.result, task.func) == (True, 100, "math.floor")

    # and then save it to the database: refused here, the job is a row of the table already
    with pytest.raises(ConfigError, match="cannot be saved"):
        task.save()
    assert Job.objects.get(pk=id).result == 100


def test_cached_group(docs):
    from django_taskmq.compat.django_q import async_task, get_broker, result_group

    # set up a broker instance for better performance
    broker = get_broker()

    # Async a hundred functions under a group label
    with pytest.warns(UserWarning, match="broker argument is ignored"):
        for i in range(100):
            async_task('math.frexp',
                       i,
                       group='frexp',
                       cached=True,
                       broker=broker)

    # wait max 50ms for one hundred results to return
    results = result_group('frexp', wait=50, count=100, cached=True)
    assert results == [__import__("math").frexp(i) for i in range(100)]


def test_synchronous_testing(docs):
    from django_taskmq.compat.django_q import async_task, fetch

    # a function that does not import is refused at the call, not in a worker
    with pytest.raises(ConfigError, match="'my.buggy.code' cannot be imported"):
        async_task('my.buggy.code', sync=True)

    # create a synchronous task
    task_id = async_task('tests.tasks.fail', 'buggy', sync=True, ack_failure=True)

    # the task will then be available immediately
    task = fetch(task_id)

    # and can be examined
    assert not task.success
    assert 'An error occurred: {}'.format(task.error) == "An error occurred: tests.tasks.TaskFailed: buggy"


def test_connection_pooling_warns_once_per_call_site(docs):
    from django_taskmq.compat.django_q import async_task, get_broker

    broker = get_broker()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for i in range(50):
            async_task('math.modf', 2.5, broker=broker)
    assert len(caught) == 1 and "ignored" in str(caught[0].message)
    assert Job.objects.filter(state=State.SUCCEEDED).count() == 50


# -- group.rst ----------------------------------------------------------------------------------------
def test_groups(docs):
    from django_taskmq.compat.django_q import async_task, count_group, fetch, fetch_group, result_group

    for i in range(4):
        async_task('math.modf', i, group='modf')

    # wait until the group has 4 results
    result = result_group('modf', count=4)
    assert result == [(0.0, 0.0), (0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]

    # count the number of failures
    failure_count = count_group('modf', failures=True)
    assert failure_count == 0

    # only use the successes
    results = fetch_group('modf')
    if failure_count:
        results = results.exclude(success=False)
    results = [task.result for task in results]  # (the docs write "successes" here, a name never set)
    assert results == [(0.0, 0.0), (0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]

    # this is the same as
    results = fetch_group('modf', failures=False)
    assert [task.result for task in results] == result

    # and the same as
    assert result_group('modf') == result  # filters failures by default

    async_task('math.modf', 9, group='modf', task_name='winter-speaker-alpha-ceiling')
    task = fetch('winter-speaker-alpha-ceiling')
    assert task.group_count() == 5
    assert task.group_result()[-1] == (0.0, 9.0)


def test_async_task_group_functions(docs):
    from django_taskmq.compat.django_q import AsyncTask

    # add a task to the math group and run it cached
    for i in range(9):
        AsyncTask('math.floor', i + 0.5, group='math', cached=True).run()
    a = AsyncTask('math.floor', 2.5, group='math', cached=True)
    a.run()

    # wait until this tasks group has 10 results
    result = a.result_group(count=10)
    assert result == [0, 1, 2, 3, 4, 5, 6, 7, 8, 2]


# -- chain.rst ------------------------------------------------------------------------------------------
def test_chains(docs):
    from django_taskmq.compat.django_q import Chain, async_chain, result_group

    # the chain must be in the format
    # [(func,(args),{kwargs}),(func,(args),{kwargs}),..]
    group_id = async_chain([('math.copysign', (1, -1)),
                            ('math.floor', (1,))])

    # get group result
    assert result_group(group_id, count=2) == [-1.0, 1]

    # create a chain that uses the cache backend
    chain = Chain(cached=True)

    # add some tasks
    chain.append('math.copysign', 1, -1)
    chain.append('math.floor', 1)

    # run it
    chain.run()

    assert chain.result() == [-1.0, 1]
    assert (chain.current(), chain.length()) == (2, 2)


# -- iterable.rst ---------------------------------------------------------------------------------------
def test_iterables(docs):
    from django_taskmq.compat.django_q import Iter, async_iter, fetch, result

    # set up a list of arguments for math.floor
    iter = [i for i in range(100)]

    # async_task iter them
    id = async_iter('math.floor', iter)

    # wait for the collated result for 1 second
    result_list = result(id, wait=1000)
    assert result_list == list(range(100))
    assert fetch(id).success and fetch(id).time_taken() >= 0

    i = Iter('math.copysign')

    # add some arguments
    i.append(1, -1)
    i.append(2, -1)
    i.append(3, -1)

    # run it
    i.run()

    # get the results
    assert i.result() == [-1.0, -2.0, -3.0]


# -- schedules.rst --------------------------------------------------------------------------------------
def test_the_schedule_examples_name_functions_schedules_may_not_run(docs):
    from django_taskmq.compat.django_q import schedule

    with pytest.raises(ConfigError, match="not in an allowed task module"):
        schedule('math.copysign',
                 2, -2,
                 hook='hooks.print_result',
                 schedule_type='D')
    with pytest.raises(ConfigError, match="not in an allowed task module"):
        # run `manage.py clearsession` every hour
        schedule('django.core.management.call_command',
                 'clearsessions',
                 schedule_type='H')


@pytest.mark.filterwarnings("ignore:datetime.datetime.utcnow:DeprecationWarning")  # the docs' own example
def test_schedules_with_the_projects_functions(docs, taskmq_settings):
    from django_taskmq.compat.django_q import Schedule, schedule

    taskmq_settings(task_modules=["tests", "hooks"], sync=True, queues={"default": None, "my_cluster": None})
    # Use the schedule wrapper
    daily = schedule('tests.tasks.add',
                     2, -2,
                     hook='hooks.print_result',
                     schedule_type='D')
    assert (daily.schedule_type, daily.args, daily.hook, daily.repeats) == ("D", [2, -2], "hooks.print_result", -1)

    # In case you want to use q_options
    # Specify the broker by using the property broker_name in q_options
    with pytest.warns(UserWarning, match="broker_name"):
        hourly = schedule('tests.tasks.add',
                          9, 0,
                          hook='hooks.print_result',
                          q_options={'timeout': 30, 'broker_name': 'broker_1'},
                          schedule_type=Schedule.HOURLY)
    assert hourly.options == {"timeout": 30, "group": hourly.name}

    # Run a schedule every 5 minutes, starting at 6 today
    # for 2 hours
    from datetime import datetime

    with pytest.warns(UserWarning, match="naive"):
        every_5 = schedule('tests.tasks.add',
                           3, 4,
                           schedule_type=Schedule.MINUTES,
                           minutes=5,
                           repeats=24,
                           next_run=datetime.utcnow().replace(hour=18, minute=0))
    assert (every_5.minutes, every_5.repeats, every_5.next_run.hour) == (5, 24, 18)

    # Use a cron expression
    cron = schedule('tests.tasks.add',
                    3, 4,
                    schedule_type=Schedule.CRON,
                    cron='0 22 * * 1-5')
    assert cron.next_run > timezone.now() and timezone.localtime(cron.next_run).hour == 22

    # Restrain a schedule to a specific cluster
    mine = schedule('tests.tasks.add',
                    3, 4,
                    schedule_type=Schedule.DAILY,
                    cluster='my_cluster')
    assert mine.queue == "my_cluster"

    with pytest.raises(IntegrityError):
        schedule('tests.tasks.add', 1, 2, name=daily.name)


def test_scheduled_runs_pass_the_intended_date_and_carry_the_hook(docs, capsys, taskmq_settings):
    from django_taskmq import scheduler
    from django_taskmq.compat.django_q import Schedule, fetch, schedule

    taskmq_settings(task_modules=["tests", "hooks"], sync=True)
    due = timezone.now() - datetime.timedelta(minutes=1)
    made = schedule('tests.tasks.echo', 1, name="echo", hook='hooks.print_result', schedule_type=Schedule.ONCE,
                    next_run=due, intended_date_kwarg="intended")
    (job_id,) = scheduler.tick()
    assert fetch(job_id).result == ((1,), {"intended": due.isoformat()})
    assert capsys.readouterr().out == f"((1,), {{'intended': '{due.isoformat()}'}})\n"
    made.refresh_from_db()
    assert (made.repeats, made.last_job, fetch(job_id).group) == (0, job_id, "echo")


# -- the results django-q2 callers rely on ----------------------------------------------------------------
def test_a_task_reads_like_django_q2s(docs):
    from django_taskmq.compat.django_q import async_task, fetch, result

    task_id = async_task('tests.tasks.add', 1, 2, group='g', task_name='adding')
    task = fetch(task_id)
    assert isinstance(task_id, str)
    assert (task.id, task.name, task.func, task.success, task.result) == (task_id, 'adding', 'tests.tasks.add', True, 3)
    assert (task.args, task.kwargs, task.attempt_count) == ((1, 2), {}, 1)
    assert task.started <= task.stopped and task.time_taken() >= 0
    assert task.group_result() == [3] and task.group_count() == 1
    assert fetch('adding') == task  # by name, as django-q2
    failed = async_task('tests.tasks.fail', 'no', ack_failure=True)
    assert result(failed) == "tests.tasks.TaskFailed: no"
    assert fetch(failed).success is False and fetch(failed).result is None
    assert result('no-such-task') is None and fetch('no-such-task', wait=20) is None


def test_keyword_arguments_named_like_our_options_reach_the_function(docs):
    from django_taskmq.compat.django_q import async_task, result

    # queue, priority and delay are options of django_taskmq, not of django-q2: the function gets them
    task_id = async_task('tests.tasks.takes_options', queue='x', priority='high', delay=3)
    assert result(task_id) == {"queue": "x", "priority": "high", "delay": 3, "hook": None}
    # as in django-q2, q_options frees an option name for the function
    task_id = async_task('tests.tasks.takes_options', hook='mine', q_options={'hook': 'hooks.print_result'})
    assert result(task_id)["hook"] == "mine"


def test_save_false_keeps_no_result_in_the_database(docs):
    from django_taskmq.compat.django_q import async_task, fetch, result

    task_id = async_task('math.floor', 7.5, save=False)
    assert fetch(task_id).success and result(task_id) is None
    cached = async_task('math.floor', 7.5, save=False, cached=True)
    assert result(cached, cached=True) == 7 and Job.objects.get(pk=cached).result_package is None


def test_queue_size_and_delete_group(db, taskmq_settings):
    from django_taskmq.compat.django_q import async_task, count_group, delete_group, queue_size

    for i in range(3):
        async_task('tests.tasks.add', i, 1, group='later')
    assert queue_size() == 3
    assert delete_group('later') == 0  # nothing finished yet: queued jobs keep their group
    taskmq_settings(sync=True)
    async_task('tests.tasks.add', 1, 1, group='now')
    assert count_group('now') == 1
    assert delete_group('now', tasks=True) == 1 and count_group('now') == 0


def test_cluster_is_a_queue(docs, taskmq_settings):
    from django_taskmq.compat.django_q import async_task

    assert Job.objects.get(pk=async_task('math.floor', 1, cluster='emails')).queue == "emails"
    assert Job.objects.get(pk=async_task('math.floor', 1, cluster='tests')).queue == "default"  # TASKMQ['name']
    with pytest.raises(ConfigError, match="cluster 'nowhere' is a queue here"):
        async_task('math.floor', 1, cluster='nowhere')


def test_async_task_with_a_chain_queues_one_chain_in_the_tasks_queue(docs, taskmq_settings):
    """django-q2 queues the chain after the task through the same broker: here all of it is one
    chain (a workflow) at once, its links in the task's queue unless they name their own (these
    docs' settings run it inline, link after link)."""
    from django_taskmq.compat.django_q import async_task
    from django_taskmq.models import WorkflowStep

    first = async_task('math.floor', 1.5, cluster='emails', group='g',
                       chain=[('math.floor', (2.5,)), ('math.floor', (3.5,), {'cluster': 'reports'})])
    workflow_id = WorkflowStep.objects.get(job_id=first).workflow_id
    links = Job.objects.filter(workflow_step__workflow_id=workflow_id).order_by("workflow_step__name")
    assert [(j.queue, j.group, j.state, j.result) for j in links] == [
        ("emails", "g", State.SUCCEEDED, 1), ("emails", "g", State.SUCCEEDED, 2), ("reports", "g", State.SUCCEEDED, 3)]
    assert links[0].pk == first
