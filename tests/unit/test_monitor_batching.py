"""The monitor's gathering and recording (``cluster.monitor.Monitor``) on the in-memory broker, fed
through a ``queue.Queue`` as the sentinel feeds the result queue: no process, no database
(pytest-django refuses database access to these tests: none is marked ``django_db``).

Outcomes arrive as lists of pickled outcomes, one list per turn of the sentinel. The monitor takes
what is there (up to ``BATCH`` lists), records it all in one transaction, and exits once the end
mark (None) came, after recording what arrived with it. A batch the database refuses is retried.
"""

from __future__ import annotations

import queue
import threading

import pytest
from django.db import OperationalError

from django_taskmq.runtime import execution as ex
from django_taskmq.cluster import monitor as monitor_module
from django_taskmq.cluster.messages import END_OF_RESULTS, IDLE, dump_outcome
from django_taskmq.cluster.monitor import Monitor
from django_taskmq.conf import get_settings
from django_taskmq.envelope import Envelope
from django_taskmq.policy import retention
from django_taskmq.policy.states import JobState
from tests.memory_broker import MemoryBroker


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker(get_settings())


def outcomes(broker: MemoryBroker, n: int, status: ex.Status = ex.SUCCESS, prefix: str = "job") -> list[ex.Outcome]:
    """Reserve ``n`` new jobs; return an outcome of ``status`` for each."""
    for i in range(n):
        broker.enqueue({"id": f"{prefix}{i}"})
    reservations = broker.reserve(["default"], n, 300, "test-cluster")
    assert len(reservations) == n
    envelope = Envelope(func="tests.tasks.noop")
    error = "" if status == ex.SUCCESS else "ValueError: boom"
    return [ex.Outcome(r, envelope, status, error=error, started_at=1.0, finished_at=2.0) for r in reservations]


def feed(results: queue.Queue, items: list[ex.Outcome], per_turn: int) -> None:
    """Put ``items`` on the queue as the sentinel does: lists of pickled outcomes, ``per_turn`` a list."""
    for start in range(0, len(items), per_turn):
        results.put([dump_outcome(o) for o in items[start:start + per_turn]])


def serve(m: Monitor) -> None:
    """Run the monitor's loop; fail (instead of hanging) if it does not end."""
    thread = threading.Thread(target=m.serve, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the monitor did not stop at the end mark"


def states(broker: MemoryBroker, items: list[ex.Outcome]) -> set[JobState]:
    return {broker.job(o.reservation.job_id).state for o in items}


def test_many_outcomes_are_recorded_in_one_transaction_and_the_end_mark_stops_the_monitor(broker):
    """300 successes and 5 failures in 11 lists, then the end mark: one transaction, then the loop ends."""
    successes = outcomes(broker, 300)
    failures = outcomes(broker, 5, ex.FAILURE, prefix="failed")
    results: queue.Queue = queue.Queue()
    feed(results, successes, per_turn=30)
    feed(results, failures, per_turn=5)
    results.put(END_OF_RESULTS)
    m = Monitor(results, broker, get_settings(), owner="test")
    # No pruning round during the test: on a loaded machine the loop can pass its first second, and
    # a round would delete the successes this test reads back (the pruning tests below cover it).
    m.retention.prune_at = m.retention.next_round = float("inf")

    serve(m)

    assert broker.transactions == 1
    assert states(broker, successes) == {JobState.SUCCEEDED}
    assert states(broker, failures) == {JobState.RETRYING}
    assert broker.job("failed0").error == "ValueError: boom"
    assert results.empty()


def test_gather_takes_everything_waiting_up_to_the_batch_limit(broker, monkeypatch):
    """With BATCH = 3 lists, five lists waiting are two batches: 3 lists, then 2 and the end mark."""
    monkeypatch.setattr(monitor_module, "BATCH", 3)
    items = outcomes(broker, 10)
    results: queue.Queue = queue.Queue()
    feed(results, items, per_turn=2)
    results.put(END_OF_RESULTS)
    m = Monitor(results, broker, get_settings(), owner="test")

    first = m.gather()
    assert [o.reservation.job_id for o in first] == [f"job{i}" for i in range(6)]
    assert not m.stopping
    second = m.gather()
    assert [o.reservation.job_id for o in second] == [f"job{i}" for i in range(6, 10)]
    assert m.stopping

    m.record(first)
    assert broker.transactions == 1
    assert states(broker, items[:6]) == {JobState.SUCCEEDED}
    assert states(broker, items[6:]) == {JobState.RUNNING}


def test_a_list_that_says_idle_ends_the_gathering_of_a_busy_monitor(broker):
    """Busy, the monitor gathers for a few ms; a list ending with IDLE (the cluster holds nothing
    else) is recorded at once, without the lists behind it (they are the next batch)."""
    items = outcomes(broker, 4)
    results: queue.Queue = queue.Queue()
    results.put([dump_outcome(items[0]), dump_outcome(items[1]), IDLE])
    feed(results, items[2:], per_turn=2)
    m = Monitor(results, broker, get_settings(), owner="test")
    m.last_record = monitor_module.time.monotonic()  # it recorded just now: busy

    first = m.gather()
    assert [o.reservation.job_id for o in first] == ["job0", "job1"]
    assert [o.reservation.job_id for o in m.gather()] == ["job2", "job3"]


def test_a_busy_monitor_without_idle_gathers_the_lists_behind(broker):
    """The same lists without IDLE: one batch (the mark, not timing, made the difference above)."""
    items = outcomes(broker, 4)
    results: queue.Queue = queue.Queue()
    feed(results, items, per_turn=2)
    m = Monitor(results, broker, get_settings(), owner="test")
    m.last_record = monitor_module.time.monotonic()

    assert [o.reservation.job_id for o in m.gather()] == ["job0", "job1", "job2", "job3"]


def test_outcomes_that_arrive_with_the_end_mark_are_recorded(broker):
    """The end mark ends the loop after the batch it came in is recorded, also what followed it."""
    items = outcomes(broker, 4)
    results: queue.Queue = queue.Queue()
    feed(results, items[:2], per_turn=2)
    results.put(END_OF_RESULTS)
    feed(results, items[2:], per_turn=2)  # a late list, gathered with the end mark
    m = Monitor(results, broker, get_settings(), owner="test")

    serve(m)

    assert states(broker, items) == {JobState.SUCCEEDED}
    assert broker.transactions == 1


def test_a_batch_the_database_refuses_is_retried_with_a_new_connection(broker):
    """The first try fails (the database restarts): the connection is dropped, the batch recorded on the
    next try, in one transaction."""
    items = outcomes(broker, 20)
    ack_many = broker.ack_many
    calls = []

    def flaky(acks):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("the database system is starting up")
        return ack_many(acks)

    broker.ack_many = flaky
    m = Monitor(queue.Queue(), broker, get_settings(), owner="test")

    m.record(items)

    assert len(calls) == 2
    assert broker.closes == 1
    assert broker.transactions == 2  # the failed one rolled back, the retry committed
    assert states(broker, items) == {JobState.SUCCEEDED}
    assert not m.failures.failing


class PruningRound:
    """Pruning on a big table: every batch is full, takes ``seconds``, and what happened is logged
    in ``events`` (with the monotonic times each batch began and ended in ``batches``);
    ``during_first`` is sent on the result queue while the first batch runs, as outcomes arriving
    in the middle of a round, and the end mark once ``batches_before_end`` batches ran."""

    def __init__(self, broker: MemoryBroker, results: queue.Queue, during_first: list, seconds: float = 0.005,
                 batches_before_end: int = 4):
        self.events: list[str] = []
        self.batches: list[tuple[float, float, int]] = []
        self.results, self.during_first, self.seconds = results, during_first, seconds
        self.batches_before_end = batches_before_end
        ack_many = broker.ack_many

        def recording(acks):
            self.events.append("record")
            return ack_many(acks)

        broker.prune = self.prune
        broker.ack_many = recording

    def prune(self, keep: int, batch: int = 1000) -> int:
        began = monitor_module.time.monotonic()
        self.events.append("prune")
        if len(self.batches) == 0:
            for item in self.during_first:
                self.results.put(item)
        monitor_module.time.sleep(self.seconds)
        self.batches.append((began, monitor_module.time.monotonic(), batch))
        if len(self.batches) == self.batches_before_end:
            self.results.put(END_OF_RESULTS)
        return batch


def pruning_monitor(broker: MemoryBroker, results: queue.Queue) -> Monitor:
    m = Monitor(results, broker, get_settings(), owner="test")
    m.retention.prune_at = 0.0  # the first round is due at once (not a second after the start)
    return m


def test_outcomes_that_arrive_during_a_pruning_step_are_recorded_before_the_next_one(broker):
    """On a table of millions of old jobs every round deletes all through: a job that finished
    meanwhile is recorded after the batch under way, and the deleting then goes on."""
    items = outcomes(broker, 3)
    results: queue.Queue = queue.Queue()
    round_ = PruningRound(broker, results, during_first=[[dump_outcome(o) for o in items]])

    serve(pruning_monitor(broker, results))

    assert round_.events == ["prune", "record", "prune", "prune", "prune"]
    assert states(broker, items) == {JobState.SUCCEEDED}
    assert broker.chore_deleted["prune"] == sum(size for *_, size in round_.batches)


def test_each_pruning_step_is_followed_by_a_pause_nine_times_as_long(broker):
    """Deleting takes a tenth of the monitor's time, a batch at a time: between the end of one
    batch and the start of the next the monitor waits at least nine times what the batch took."""
    results: queue.Queue = queue.Queue()
    round_ = PruningRound(broker, results, during_first=[], seconds=0.01)

    serve(pruning_monitor(broker, results))

    assert len(round_.batches) == 4
    for (began, ended, _), (next_began, _, _) in zip(round_.batches, round_.batches[1:]):
        assert next_began - ended >= (1 - retention.SHARE) / retention.SHARE * (ended - began)


def test_the_batch_halves_after_a_long_step(broker):
    """A step that took longer than ``STRETCH`` (a loaded database) halves the next batch."""
    results: queue.Queue = queue.Queue()
    round_ = PruningRound(broker, results, during_first=[], seconds=retention.STRETCH * 2, batches_before_end=3)
    m = pruning_monitor(broker, results)
    m.retention.batch = 400

    serve(m)

    assert [size for *_, size in round_.batches] == [400, 200, 100]


def test_the_end_mark_arriving_during_a_pruning_step_ends_the_round_and_counts_it(broker):
    """The cluster stops while the monitor prunes: what came with the end mark is recorded, no
    further batch is deleted (the monitor exits), and what the round deleted is counted."""
    items = outcomes(broker, 2)
    results: queue.Queue = queue.Queue()
    round_ = PruningRound(broker, results, during_first=[[dump_outcome(o) for o in items], END_OF_RESULTS])
    m = pruning_monitor(broker, results)

    serve(m)

    assert round_.events == ["prune", "record"]
    assert m.stopping and m.retention.pruning is None
    assert states(broker, items) == {JobState.SUCCEEDED}
    assert broker.chore_deleted["prune"] == round_.batches[0][2]
