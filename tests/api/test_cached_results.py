"""Results in the Django cache (``cached=True|seconds``, ``TASKMQ['cached']``): written by the recorder
after the outcome committed, read by ``result``/``fetch``/``result_group`` with ``cached=True``,
signed like stored results; ``save=False`` keeps no result in the database."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from django_taskmq import async_task, count_group, fetch, result, result_group
from django_taskmq.runtime.cached_results import job_key
from django_taskmq.conf import get_settings
from django_taskmq.exceptions import ConfigError, UnreadableResult
from django_taskmq.models import Job, State
from django_taskmq.envelope import seal_result


@pytest.fixture
def sync(db, taskmq_settings):
    taskmq_settings(sync=True)
    cache.clear()
    yield
    cache.clear()


def test_a_cached_result_is_read_from_the_cache(sync):
    job_id = async_task("tests.tasks.add", 2, 3, cached=True)
    assert result(job_id, cached=True) == 5
    assert cache.get(job_key(get_settings(), job_id)) is not None
    Job.objects.filter(pk=job_id).delete()  # the cache alone answers
    job = fetch(job_id, cached=True)
    assert (job.id, job.state, job.result, job.func) == (job_id, State.SUCCEEDED, 5, "tests.tasks.add")


def test_a_job_without_cached_writes_nothing_to_the_cache(sync):
    job_id = async_task("tests.tasks.add", 2, 3)
    assert result(job_id) == 5 and result(job_id, cached=True) is None
    assert cache.get(job_key(get_settings(), job_id)) is None


def test_seconds_set_the_cache_timeout(sync, monkeypatch):
    from django.core.cache import caches

    timeouts = []
    backend = caches["default"]
    original = backend.set

    def spy(key, value, timeout=None, version=None):
        timeouts.append(timeout)
        return original(key, value, timeout, version)

    monkeypatch.setattr(backend, "set", spy)
    async_task("tests.tasks.add", 1, 1, cached=7)
    async_task("tests.tasks.add", 1, 1, cached=True)
    assert timeouts == [7, None]


def test_taskmq_cached_applies_to_every_job(sync, taskmq_settings):
    taskmq_settings(sync=True, cached=60)
    job_id = async_task("tests.tasks.add", 1, 1)
    assert result(job_id, cached=True) == 2
    assert result(async_task("tests.tasks.add", 1, 1, cached=False), cached=True) is None


def test_groups_in_the_cache(sync):
    ids = [async_task("tests.tasks.add", i, 0, group="g", cached=True) for i in range(3)]
    async_task("tests.tasks.fail", "x", group="g", cached=True, ack_failure=True)
    assert result_group("g", cached=True) == [0, 1, 2]
    assert result_group("g", failures=True, cached=True) == [0, 1, 2, "tests.tasks.TaskFailed: x"]
    assert count_group("g", cached=True) == 3 and count_group("g", failures=True, cached=True) == 1
    assert [j.id for j in Job.objects.filter(group="g").order_by("id")][:3] == ids


def test_save_false_keeps_no_result_in_the_database(sync):
    job_id = async_task("tests.tasks.add", 2, 2, save=False, cached=True)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result_package, job.result) == (State.SUCCEEDED, None, None)
    assert result(job_id, cached=True) == 4


def test_a_tampered_or_forged_cache_entry_is_never_unpickled(sync):
    job_id = async_task("tests.tasks.add", 2, 3, cached=True)
    key = job_key(get_settings(), job_id)
    cache.set(key, cache.get(key)[:-3] + "abc")
    with pytest.raises(UnreadableResult, match="bad signature"):
        result(job_id, cached=True)
    cache.set(key, seal_result({"not": "a record"}, "another-name"))
    with pytest.raises(UnreadableResult, match="bad signature"):
        result(job_id, cached=True)
    cache.set(key, {"result": None})
    with pytest.raises(UnreadableResult, match="not a signed record"):
        fetch(job_id, cached=True)


def test_a_cached_record_cannot_be_saved_over_its_row(sync):
    job_id = async_task("tests.tasks.add", 2, 3, cached=True)
    with pytest.raises(ConfigError, match="cannot be saved"):
        fetch(job_id, cached=True).save()
    assert Job.objects.get(pk=job_id).payload != ""


def test_cached_and_save_are_checked_at_the_call(db):
    with pytest.raises(ConfigError, match="cached must be a positive number"):
        async_task("tests.tasks.add", 1, 1, cached=-5)
    with pytest.raises(ConfigError, match="save must be True or False"):
        async_task("tests.tasks.add", 1, 1, save="no")


def test_a_hook_sees_the_cached_result(sync, monkeypatch):
    seen = []
    monkeypatch.setattr("tests.tasks.noop", lambda job: seen.append(result(job.id, cached=True)))
    from django_taskmq.runtime.loading import resolve

    resolve.cache_clear()
    async_task("tests.tasks.add", 20, 1, cached=True, hook="tests.tasks.noop")
    resolve.cache_clear()
    assert seen == [21]


def test_a_record_the_cache_refuses_costs_no_other_job_its_record(broker, settings, taskmq_settings):
    """Two cached jobs recorded in one batch: the cache refuses the first's 2 MB record; the
    second's is written all the same, and both jobs succeed."""
    from django_taskmq.runtime import execution, recorder

    settings.CACHES = {**settings.CACHES, "small": {"BACKEND": "tests.cache_backends.ItemLimitedCache",
                                                      "LOCATION": "taskmq-small"}}
    taskmq_settings(cache="small")
    from django.core.cache import caches

    big = async_task("tests.tasks.blob", 2_000_000, cached=True)
    small = async_task("tests.tasks.add", 2, 3, cached=True)
    reservations = broker.reserve(["default"], 10, 300, "t")
    outcomes = [execution.seal(execution.execute(execution.unpack(r, get_settings().name)), get_settings())
                for r in reservations]
    recorder.record(outcomes, broker, get_settings())
    assert set(Job.objects.values_list("state", flat=True)) == {State.SUCCEEDED}
    assert caches["small"].get(job_key(get_settings(), big)) is None
    assert result(small, cached=True) == 5
