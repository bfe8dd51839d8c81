"""The dashboard's throughput survives pruning: outcomes are counted in a rollup written in the
transaction that records them, so deleting job rows (retention, ``save_limit``) takes nothing from
the last minute's and hour's figures, and a recording that rolls back counts nothing."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from django_taskmq import async_task
from django_taskmq.observability import histograms, statistics
from django_taskmq.runtime import recorder
from django_taskmq.runtime import execution as ex
from django_taskmq.api import run_sync
from django_taskmq.conf import get_settings
from django_taskmq.models import Job, OutcomeCount, TimingCount

pytestmark = pytest.mark.django_db(transaction=True)


def outcome(reservation, status=ex.SUCCESS, **fields):
    now = time.time()
    return ex.seal(ex.Outcome(reservation, None, status, "ok", started_at=now, finished_at=now, **fields),
                   get_settings())


def test_throughput_counts_outcomes_whose_rows_were_deleted(broker):
    for i in range(5):
        async_task("tests.tasks.noop", i, queue="emails")
    async_task("tests.tasks.fail", "kaput", queue="emails", max_deliveries=1)
    reservations = broker.reserve(["emails"], 6, 30, "owner-a")
    failing = next(r for r in reservations if Job.objects.get(pk=r.job_id).func == "tests.tasks.fail")
    recorder.record([outcome(r) for r in reservations if r is not failing]
                    + [outcome(failing, ex.FAILURE, error="kaput")], broker, get_settings(), outside_transaction=True)
    before = statistics.throughput()
    assert (before.succeeded_minute, before.failed_minute, before.succeeded_hour, before.failed_hour) == (5, 1, 5, 1)
    Job.objects.all().delete()  # what retention and save_limit do
    after = statistics.throughput()
    assert (after.succeeded_minute, after.failed_minute, after.succeeded_hour, after.failed_hour) == (5, 1, 5, 1)
    assert sum(ok for _, ok, _f in after.per_minute) == 5 and sum(f for _, _ok, f in after.per_minute) == 1
    assert set(OutcomeCount.objects.values_list("queue", flat=True)) == {"emails"}


def test_a_lone_success_and_sync_mode_are_counted(broker):
    async_task("tests.tasks.noop")
    (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    recorder.record([outcome(reservation)], broker, get_settings(), outside_transaction=True)  # an idle cluster's
    run_sync(async_task("tests.tasks.noop"))
    assert statistics.throughput().succeeded_minute == 2


def test_a_retry_is_not_an_outcome_yet(broker):
    async_task("tests.tasks.fail", "kaput", max_deliveries=3)
    (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    recorder.record([outcome(reservation, ex.FAILURE, error="kaput")], broker, get_settings())
    assert Job.objects.get().state == "RETRYING"
    assert (statistics.throughput().failed_minute, OutcomeCount.objects.count()) == (0, 0)


def test_the_count_is_in_the_transaction_that_records_the_outcomes(broker):
    async_task("tests.tasks.noop")
    (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    with pytest.raises(RuntimeError), transaction.atomic():
        recorder.record([outcome(reservation)], broker, get_settings())
        assert statistics.throughput().succeeded_minute == 1
        raise RuntimeError("the caller's transaction rolls back")
    assert Job.objects.get().state == "RUNNING" and not OutcomeCount.objects.exists()


def test_old_slots_go_when_a_new_one_starts(broker):
    import datetime

    from django.utils import timezone

    from django_taskmq.policy import throughput

    old = throughput.slot_of(timezone.now() - throughput.KEPT - datetime.timedelta(minutes=1))
    OutcomeCount.objects.create(at=old, queue="default", succeeded=7)
    TimingCount.objects.create(at=old, queue="default", task_name="tests.tasks.noop", bucket=0, waits=7, runs=7)
    run_sync(async_task("tests.tasks.noop"))
    assert list(OutcomeCount.objects.values_list("succeeded", flat=True)) == [1]
    assert sum(TimingCount.objects.values_list("runs", flat=True)) == 1 and not TimingCount.objects.filter(at=old)


def test_the_histograms_count_outcomes_whose_rows_were_deleted(broker):

    for i in range(4):
        async_task("tests.tasks.noop", i, queue="emails")
    async_task("tests.tasks.fail", "kaput", queue="emails", max_deliveries=1)
    reservations = broker.reserve(["emails"], 5, 30, "owner-a")
    failing = next(r for r in reservations if Job.objects.get(pk=r.job_id).func == "tests.tasks.fail")
    recorder.record([outcome(r) for r in reservations if r is not failing]
                    + [outcome(failing, ex.FAILURE, error="kaput")], broker, get_settings(), outside_transaction=True)
    run_sync(async_task("tests.tasks.noop", queue="emails"))
    before = histograms.last_hour()
    Job.objects.all().delete()  # what retention and save_limit do
    after = histograms.last_hour()
    assert after == before and set(after) == {("tests.tasks.noop", "emails"), ("tests.tasks.fail", "emails")}
    noop, failed = after["tests.tasks.noop", "emails"], after["tests.tasks.fail", "emails"]
    assert (noop.wait.count, noop.run.count, failed.wait.count, failed.run.count) == (5, 5, 1, 1)
    assert noop.wait.buckets[-1] == noop.run.buckets[-1] == 5 and noop.wait.total >= 0
    assert sum(TimingCount.objects.values_list("waits", flat=True)) == 6


def test_a_timing_that_rolls_back_counts_nothing(broker):
    async_task("tests.tasks.noop")
    (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    with pytest.raises(RuntimeError), transaction.atomic():
        recorder.record([outcome(reservation)], broker, get_settings())
        assert TimingCount.objects.exists()
        raise RuntimeError("the caller's transaction rolls back")
    assert not TimingCount.objects.exists()
