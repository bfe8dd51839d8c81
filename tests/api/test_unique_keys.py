"""Coalescing keys through the public API: every bad argument is a ConfigError at the call (and
nothing is stored); ``async_task``, ``@task.apply_async`` and ``q_options`` take the options;
``enqueue_many`` refuses them. The broker's semantics are tested in tests/contract/test_unique_keys.py.
"""

from __future__ import annotations

import time

import pytest

from django_taskmq import ConfigError, async_task, enqueue_many, result
from django_taskmq.models import Job, State, UniqueKey
from tests import tasks

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("options, match", [
    ({"unique_key": ""}, "unique_key must be a string of 1..255"),
    ({"unique_key": "x" * 256}, "unique_key must be a string of 1..255"),
    ({"unique_key": 42}, "unique_key must be a string"),
    ({"unique_for": ("queued",)}, "need a unique_key"),
    ({"unique_replace": True}, "need a unique_key"),
    ({"unique_key": "k", "unique_for": ()}, "at least one"),
    ({"unique_key": "k", "unique_for": "queued"}, "must be a tuple of state names"),
    ({"unique_key": "k", "unique_for": 3}, "must be a tuple of state names"),
    ({"unique_key": "k", "unique_for": ("queued", "succeeded")}, "may name only"),
    ({"unique_key": "k", "unique_for": ("cancelled",)}, "may name only"),
    ({"unique_key": "k", "unique_for": ("waiting",)}, "may name only"),
    ({"unique_key": "k", "unique_for": (None,)}, "may name only"),
    ({"unique_key": "k", "unique_replace": 1}, "unique_replace must be True or False"),
    ({"unique_key": "k", "unique_replace": "yes"}, "unique_replace must be True or False"),
    ({"unique_key": "k", "key": "k"}, "either key .* or unique_key"),
])
def test_bad_coalescing_option_is_a_config_error_and_stores_nothing(options, match):
    with pytest.raises(ConfigError, match=match):
        async_task("tests.tasks.noop", **options)
    with pytest.raises(ConfigError, match=match):
        async_task("tests.tasks.noop", q_options=options)
    assert not Job.objects.exists() and not UniqueKey.objects.exists()


@pytest.mark.parametrize("options", [{"unique_key": "k"}, {"unique_replace": False}, {"unique_for": ["queued"]}])
def test_enqueue_many_refuses_coalescing_keys(options):
    with pytest.raises(ConfigError, match="enqueue_many does not take unique_"):
        enqueue_many("tests.tasks.noop", [(1,), (2,)], **options)
    assert not Job.objects.exists()


def test_state_names_are_case_insensitive():
    first = async_task("tests.tasks.noop", unique_key="k", unique_for=["Queued", "RUNNING"])
    assert async_task("tests.tasks.noop", unique_key="k") == first
    assert UniqueKey.objects.get().states == "QUEUED,RUNNING"


def test_async_task_coalesces_and_replaces():
    first = async_task("tests.tasks.add", 1, 2, unique_key="sum", delay=3600)
    assert async_task("tests.tasks.add", 3, 4, unique_key="sum") == first
    assert async_task("tests.tasks.add", 5, 6, unique_key="sum", unique_replace=True, delay=7200) == first
    job = Job.objects.get()
    assert job.id == first and job.state == State.QUEUED
    assert job._envelope().args == (5, 6)
    assert job.visible_at > time.time() + 3600  # the new delay


def test_task_apply_async_and_q_options_take_the_options():
    first = tasks.multiply.apply_async((2, 3), unique_key="m")
    assert tasks.multiply.apply_async((4, 5), unique_key="m") == first
    assert async_task(tasks.multiply, 6, 7, q_options={"unique_key": "m"}) == first
    assert Job.objects.count() == 1


def test_sync_mode_runs_the_new_job_only(taskmq_settings):
    """In sync mode a coalesced call runs nothing more: the holder already ran (and ended), so
    each call makes and runs its own job; a held key returns the holder without running it."""
    taskmq_settings(sync=True)
    first = async_task("tests.tasks.add", 1, 2, unique_key="s")
    assert result(first) == 3
    second = async_task("tests.tasks.add", 2, 2, unique_key="s")
    assert second != first and result(second) == 4
    held = async_task("tests.tasks.add", 1, 1, unique_key="t", sync=False, delay=3600)
    assert async_task("tests.tasks.add", 5, 5, unique_key="t") == held
    assert Job.objects.get(pk=held).state == State.QUEUED
