"""A worker with one thread records a plain success itself when the sentinel sent the task alone (it
met an idle cluster) and nothing came after it; everything else goes to the monitor.

The worker runs in a thread of the test process, fed through a real pipe as the sentinel feeds it.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest
from django.db import connections

from django_taskmq import async_task
from django_taskmq.runtime import execution as ex
from django_taskmq.cluster.messages import (RECORDED, STOP, SUCCEEDED, Ticket, read_outcome_frame,
                                            recorded_frame, tasks_frame)
from django_taskmq.cluster.worker import OneAtATime
from django_taskmq.conf import get_settings
from django_taskmq.models import Job, State
from tests.legacy_packages import queue_chained

pytestmark = pytest.mark.django_db(transaction=True)  # the worker thread has its own connection


class Worker:
    """One worker serving in a thread; ``run()`` feeds it and reads what it said."""

    def __init__(self) -> None:
        self.pipe, child = multiprocessing.Pipe()
        self.worker = OneAtATime(0, child, get_settings(), None)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        try:
            self.worker.serve()
        finally:
            connections.close_all()

    def run(self, broker, count: int, alone: bool = True) -> list[bytes]:
        """Send ``count`` reserved tasks in one frame (``alone``: marked so, as the sentinel marks
        the one task of an idle cluster); return ``count`` frames back."""
        return self.run_frames([self.frame(broker, count, alone)], count)

    def run_frames(self, frames: list[bytes], count: int) -> list[bytes]:
        """Start the worker, send it ``frames`` at once, return the ``count`` frames it says."""
        self.thread.start()
        for frame in frames:
            self.pipe.send_bytes(frame)
        answers = []
        for _ in range(count):
            assert self.pipe.poll(30), "the worker said nothing"
            answers.append(self.pipe.recv_bytes())
        self.pipe.send_bytes(STOP)
        self.thread.join(30)
        assert not self.thread.is_alive()
        return answers

    @staticmethod
    def frame(broker, count: int, alone: bool) -> bytes:
        reservations = broker.reserve(["default"], count, 30, "owner-a")
        assert len(reservations) == count
        return tasks_frame([Ticket.of(ex.unpack(r, get_settings().name)) for r in reservations], alone)


def test_a_worker_records_a_plain_success_that_met_an_idle_cluster(broker):
    job_id = async_task("tests.tasks.add", 1, 2)
    (frame,) = Worker().run(broker, 1)
    assert frame == recorded_frame(job_id)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.result, job.attempt) == (State.SUCCEEDED, 3, 1)


@pytest.mark.parametrize("count", [1, 2])
def test_tasks_not_sent_alone_are_the_monitors(broker, count):
    """A busy cluster's tasks (the sentinel held others, or a worker ran one): the monitor records
    them in batches, not even the last one is recorded by the worker."""
    ids = [async_task("tests.tasks.add", i, 1) for i in range(count)]
    frames = Worker().run(broker, count, alone=False)
    assert [read_outcome_frame(f)[:2] for f in frames] == [(SUCCEEDED, i) for i in ids]
    assert set(Job.objects.values_list("state", flat=True)) == {State.RUNNING}


def test_a_task_sent_alone_with_more_behind_it_is_the_monitors(broker):
    """Work came right behind it (a busy cluster again): the monitor records both."""
    first = async_task("tests.tasks.sleep", 0.3)
    worker = Worker()
    alone = worker.frame(broker, 1, alone=True)
    second = async_task("tests.tasks.add", 1, 2)
    frames = worker.run_frames([alone, worker.frame(broker, 1, alone=False)], 2)
    assert [read_outcome_frame(f)[:2] for f in frames] == [(SUCCEEDED, first), (SUCCEEDED, second)]
    assert set(Job.objects.values_list("state", flat=True)) == {State.RUNNING}


@pytest.mark.parametrize("options", [{"hook": "tests.tasks.noop"}, {"cached": 60}, {"chain": [("tests.tasks.noop", (), {}, {})]}])
def test_a_success_with_more_to_do_than_its_ack_goes_to_the_monitor(broker, options):
    if "chain" in options:  # a package queued before 0.2 (see legacy_chains)
        job_id = queue_chained("tests.tasks.add", (1, 2), options["chain"])
    else:
        job_id = async_task("tests.tasks.add", 1, 2, q_options=options)
    (frame,) = Worker().run(broker, 1)
    assert read_outcome_frame(frame)[:2] == (SUCCEEDED, job_id)
    assert Job.objects.get(pk=job_id).state == State.RUNNING


def test_a_failure_goes_to_the_monitor(broker):
    job_id = async_task("tests.tasks.fail")
    (frame,) = Worker().run(broker, 1)
    assert read_outcome_frame(frame)[0] not in (SUCCEEDED, RECORDED)
    assert Job.objects.get(pk=job_id).state == State.RUNNING


def test_a_task_that_left_a_transaction_open_is_not_acknowledged_inside_it(broker):
    job_id = async_task("tests.tasks.leave_autocommit_off")
    (frame,) = Worker().run(broker, 1)
    assert read_outcome_frame(frame)[:2] == (SUCCEEDED, job_id)
    assert Job.objects.get(pk=job_id).state == State.RUNNING


@pytest.mark.sqlite_only
def test_an_idle_worker_does_not_wait_long_for_the_sqlite_write_lock(broker):
    """Another writer holds the lock: the worker gives the outcome to the monitor after LOCK_WAIT,
    not after the connection's busy timeout (30 s in the test settings), and puts that back."""
    import sqlite3

    from django.db import connection

    from django_taskmq.cluster.worker import LOCK_WAIT

    job_id = async_task("tests.tasks.add", 1, 2)
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    worker = Worker()
    try:
        reservations = broker.reserve(["default"], 1, 30, "owner-a")
        other.execute("BEGIN IMMEDIATE")  # the write lock, held until the worker has answered
        worker.thread.start()
        worker.pipe.send_bytes(tasks_frame([Ticket.of(ex.unpack(r, get_settings().name)) for r in reservations],
                                           alone=True))
        sent = time.monotonic()
        assert worker.pipe.poll(10)
        waited = time.monotonic() - sent
        frame = worker.pipe.recv_bytes()
        busy_timeout = worker.worker.broker.connection.connection.execute("PRAGMA busy_timeout").fetchone()[0]
    finally:
        other.execute("ROLLBACK")
        other.close()
        worker.pipe.send_bytes(STOP)
        worker.thread.join(10)
    assert read_outcome_frame(frame)[:2] == (SUCCEEDED, job_id)
    assert LOCK_WAIT <= waited < 5
    assert busy_timeout == int(connection.settings_dict["OPTIONS"]["timeout"] * 1000)
    assert Job.objects.get(pk=job_id).state == State.RUNNING
