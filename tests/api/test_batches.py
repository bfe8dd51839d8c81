"""Batches in sync mode and through the recorder: all jobs or none, each callback once with the
batch's outcome. Across clusters and a SIGKILL: ``tests/cluster/test_durable.py``."""

from __future__ import annotations

import pytest

from django_taskmq import Batch, ConfigError, batch
from django_taskmq.batches import callbacks_due
from django_taskmq.models import Job
from tests.tasks import read_run_log

pytestmark = pytest.mark.django_db
TASKS = "tests.cluster.tasks_durable"
CALLBACKS = {"on_success": f"{TASKS}.on_success", "on_finish": f"{TASKS}.on_finish",
             "on_discard": f"{TASKS}.on_discard"}


@pytest.fixture
def sync(settings):
    settings.TASKMQ = {**settings.TASKMQ, "sync": True}


def callbacks_run(run_log, batch_id: str) -> list[str]:
    return sorted(tag for j, tag in read_run_log(run_log) if j == batch_id)


def test_a_batch_that_all_succeeds_runs_on_success_and_on_finish_once(sync, broker, run_log):
    b = Batch(**CALLBACKS, name="ok")
    for n in range(5):
        b.add("tests.tasks.add", n, 1)
    batch_id = b.enqueue()
    assert callbacks_run(run_log, batch_id) == ["on_finish 5 [('SUCCEEDED', 5)]", "on_success 5 [('SUCCEEDED', 5)]"]
    info = batch(batch_id)
    assert (info.name, info.total, info.counts, info.finished) == ("ok", 5, {"SUCCEEDED": 5}, True)
    assert sorted(Job.objects.get(pk=j).result for j in info.job_ids) == [1, 2, 3, 4, 5]


def test_a_batch_with_dead_jobs_runs_on_discard_and_on_finish_once(sync, broker, run_log):
    b = Batch(**CALLBACKS)
    for n in range(4):
        b.add("tests.tasks.add", n, 1)
    b.add("tests.tasks.reject", "no")
    batch_id = b.enqueue()
    counts = "[('DEAD', 1), ('SUCCEEDED', 4)]"
    assert callbacks_run(run_log, batch_id) == [f"on_discard 5 {counts}", f"on_finish 5 {counts}"]


def test_the_finisher_queues_each_callback_once_when_it_runs_twice(sync, broker, run_log):
    from django_taskmq.batches import finish_batch

    b = Batch(**CALLBACKS)
    b.add("tests.tasks.add", 1, 1)
    batch_id = b.enqueue()
    finish_batch(batch_id, "", {k: v for k, v in CALLBACKS.items()})  # a second run (its worker was killed)
    assert callbacks_run(run_log, batch_id) == ["on_finish 1 [('SUCCEEDED', 1)]", "on_success 1 [('SUCCEEDED', 1)]"]


def test_callbacks_due():
    assert callbacks_due({"SUCCEEDED": 3}, 3) == ["on_finish", "on_success"]
    assert callbacks_due({"SUCCEEDED": 2, "FAILED": 1}, 3) == ["on_finish", "on_discard"]
    assert callbacks_due({"SUCCEEDED": 2, "CANCELLED": 1}, 3) == ["on_finish"]


def test_bad_batches_raise_config_errors(broker):
    with pytest.raises(ConfigError, match="at least one job"):
        Batch().enqueue()
    with pytest.raises(ConfigError, match="on_success"):
        Batch(on_success="no.such.module.fn")
    b = Batch()
    b.add("tests.tasks.noop")
    b.enqueue(sync=False)
    with pytest.raises(ConfigError, match="queued already"):
        b.add("tests.tasks.noop")
    assert batch("0" * 24) is None
