"""The last hour's outcomes read by the dashboard, ``qmonitor`` and the metrics endpoint
(``monitoring.throughput``, ``histograms.last_hour``) walk the partial indexes of finished jobs by
finish time, never every finished job of the table."""

from __future__ import annotations

import pytest

from django_taskmq import histograms, monitoring
from django_taskmq.policy.states import JobState
from tests.contract.helpers import recorded, sqlite_plan
from tests.contract.test_retention import end

INDEXES = ("taskmq_job_succeeded", "taskmq_job_failed")


@pytest.mark.sqlite_only
def test_sqlite_reads_the_last_hours_outcomes_through_the_indexes_of_finish_times(orm_broker):
    """SQLite plans without statistics: with the state bound as a parameter, or even written out, it
    took the index of states and walked every success in the table (114 ms each for the throughput
    and the histograms beside 289,000 successes). The statements name the indexes."""
    from django.db import connection

    for state in (JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD):
        end(orm_broker, state)
    with recorded(connection) as executed:
        throughput = monitoring.throughput()
        timings = histograms.last_hour()

    assert (throughput.succeeded_hour, throughput.failed_hour) == (2, 2)
    # The dead one was dead-lettered unopened (its deliveries spent): it never started, so it has no
    # wait or run time.
    assert sum(timing.run.count for timing in timings.values()) == 3
    reads = [(sql, params) for sql, params in executed if "finished_at" in sql]
    assert len(reads) == 3, executed  # the throughput's two, the histograms' one
    used = []
    for sql, params in reads:
        plan = sqlite_plan(connection, sql, params)
        assert "taskmq_job_state_queue" not in plan, (sql, plan)
        used.append(tuple(index for index in INDEXES if f"INDEX {index} (finished_at>? AND finished_at<?)" in plan))
    assert used == [INDEXES[:1], INDEXES[1:], INDEXES], used
