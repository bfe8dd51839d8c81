"""Every bad argument is a ConfigError at the call, and nothing is stored."""

from __future__ import annotations

import datetime
import math
import time

import pytest

from django_taskmq import ConfigError, async_task, enqueue_many
from django_taskmq.api import run_sync
from django_taskmq.conf import from_mapping
from django_taskmq.models import DeadLetter, Job, State

pytestmark = pytest.mark.django_db

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("options, match", [
    ({"delay": NAN}, "delay must be a finite number"),
    ({"delay": INF}, "delay must be a finite number"),
    ({"delay": -INF}, "delay must be a finite number"),
    ({"delay": 1e12}, "delay must be at most"),
    ({"eta": NAN}, "eta must be a finite number"),
    ({"eta": INF}, "eta must be a finite number"),
    ({"timeout": NAN}, "timeout must be a finite number"),
    ({"timeout": INF}, "timeout must be a finite number"),
    ({"expires_at": NAN}, "expires_at must be a finite number"),
    ({"expires_at": INF}, "expires_at must be a finite number"),
    ({"max_deliveries": 10**12}, "max_deliveries must be at most"),
    ({"eta": 2e9, "expires_at": 2e9 - 1}, "expire before it could run"),
    ({"eta": 2e9, "expires_at": 2e9}, "expire before it could run"),
    ({"expires_at": datetime.timedelta(0)}, "duration must be positive"),
    ({"delay": 60, "expires_at": datetime.timedelta(seconds=60)}, "expire before it could run"),
])
def test_bad_option_is_a_config_error_and_stores_nothing(options, match):
    with pytest.raises(ConfigError, match=match):
        async_task("tests.tasks.noop", **options)
    with pytest.raises(ConfigError, match=match):
        enqueue_many("tests.tasks.noop", [(1,), (2,)], **options)
    assert not Job.objects.exists()


@pytest.mark.parametrize("path, match", [
    ("tests.tasks." + "x" * 300, "at most 255 fit"),
    ("nonexistent.func", "cannot be imported: ModuleNotFoundError"),
    ("tests.tasks.no_such_function", "cannot be imported"),
    ("tests.tasks.RUN_LOG_ENV", "not a callable"),
    ("tests. tasks.noop", "not a dotted path"),
    ("noop", "not a dotted path"),
])
def test_function_path_must_import_here_as_a_callable(path, match):
    with pytest.raises(ConfigError, match=match):
        async_task(path)
    assert not Job.objects.exists()


def test_hook_path_is_checked_too():
    with pytest.raises(ConfigError, match="hook 'tests.tasks.missing_hook' cannot be imported"):
        async_task("tests.tasks.noop", hook="tests.tasks.missing_hook")


def test_package_above_max_package_size_is_refused(taskmq_settings):
    """A 5 MB argument with a 1 MiB limit: ConfigError naming the size and the setting."""
    taskmq_settings(max_package_size=1024 * 1024)
    with pytest.raises(ConfigError, match=r"is \d+ bytes, above TASKMQ\['max_package_size'\] = 1048576"):
        async_task("tests.tasks.noop", "x" * 5_000_000)
    assert not Job.objects.exists()
    taskmq_settings(max_package_size=None)
    assert async_task("tests.tasks.noop", "x" * 5_000_000)


def test_result_above_max_result_size_fails_its_job(broker, taskmq_settings):
    """A 5 MB result with a 1 MiB limit: the job fails at once naming the limit; nothing is stored."""
    taskmq_settings(max_result_size=1024 * 1024, max_package_size=None)
    job_id = async_task("tests.tasks.echo", "y" * 5_000_000)
    run_sync(job_id)
    job = Job.objects.get(pk=job_id)
    assert job.state == State.DEAD and job.result_package is None
    assert "above TASKMQ['max_result_size'] = 1048576" in job.error
    assert job.deliveries == 1  # not retried: a re-run would return it again
    assert "max_result_size" in DeadLetter.objects.get(job_id=job_id).error


@pytest.mark.parametrize("key, value", [
    ("timeout", NAN), ("lease", INF), ("poll", NAN), ("max_deliveries", 10**12), ("max_package_size", 0),
    ("max_result_size", 1.5), ("idempotency_ttl", INF),
])
def test_bad_setting_names_its_key(key, value):
    with pytest.raises(ConfigError, match=rf"TASKMQ\['{key}'\]"):
        from_mapping({key: value})


def test_a_function_that_no_longer_imports_dead_letters_at_once(broker):
    """Enqueued while it existed, gone when it runs: DEAD after one delivery, 'cannot import ...'."""
    import tests.tasks as module

    module.vanishing = lambda: None
    module.vanishing.__qualname__ = "vanishing"
    try:
        job_id = async_task("tests.tasks.vanishing")
    finally:
        del module.vanishing
    from django_taskmq.runtime.loading import resolve

    resolve.cache_clear()
    run_sync(job_id)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.deliveries) == (State.DEAD, 1)
    assert job.error.startswith("cannot import tests.tasks.vanishing: ImportError:")
    assert "has no attribute 'vanishing'" in job.error
    assert DeadLetter.objects.get(job_id=job_id).reason.startswith("cannot import tests.tasks.vanishing")


def test_delay_within_limits_is_accepted():
    job_id = async_task("tests.tasks.noop", delay=3600, expires_at=time.time() + 7200, timeout=1.5, max_deliveries=7)
    assert Job.objects.get(pk=job_id).max_deliveries == 7
