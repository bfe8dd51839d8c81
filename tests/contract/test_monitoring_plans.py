"""The last hour's outcomes read by the dashboard, ``qmonitor`` and the metrics endpoint: the wait
and run times (``histograms.last_hour``) walk the partial indexes of finished jobs by finish time,
never every finished job of the table; the throughput (``monitoring.throughput``) reads no job row
at all, only the rollup's last hour through its index."""

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
        monitoring.throughput()
        timings = histograms.last_hour()

    # The dead one was dead-lettered unopened (its deliveries spent): it never started, so it has no
    # wait or run time.
    assert sum(timing.run.count for timing in timings.values()) == 3
    reads = [(sql, params) for sql, params in executed if "finished_at" in sql]
    assert len(reads) == 1, executed  # the histograms' one
    (sql, params), = reads
    plan = sqlite_plan(connection, sql, params)
    assert "taskmq_job_state_queue" not in plan, (sql, plan)
    assert all(f"INDEX {index} (finished_at>? AND finished_at<?)" in plan for index in INDEXES), plan
    (rollup, rollup_params), = [(sql, params) for sql, params in executed if "django_taskmq_outcomecount" in sql]
    rollup_plan = sqlite_plan(connection, rollup, rollup_params)  # the (at, queue) unique constraint's index
    assert "SEARCH django_taskmq_outcomecount USING INDEX" in rollup_plan and "(at>?)" in rollup_plan, rollup_plan
    assert not [sql for sql, _ in executed if "django_taskmq_job" in sql and "finished_at" not in sql]
