"""The last hour's outcomes read by the dashboard, ``qmonitor`` and the metrics endpoint: the
throughput (``statistics.throughput``) and the wait and run times (``histograms.last_hour``) read
no job row at all, only their rollups' last hour through their indexes."""

from __future__ import annotations

import pytest

from django_taskmq.observability import histograms, statistics
from django_taskmq.policy.states import JobState
from tests.contract.helpers import recorded, sqlite_plan
from tests.contract.test_retention import end

@pytest.mark.sqlite_only
def test_sqlite_reads_the_last_hours_outcomes_from_the_rollups_through_their_indexes(orm_broker):
    """Reading job rows, SQLite took the index of states and walked every success in the table
    (114 ms each for the throughput and the histograms beside 289,000 successes); the rollups are
    read by a range of their slots' index and no job row."""
    from django.db import connection
    from django.utils import timezone

    ended = [end(orm_broker, state) for state in (JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.FAILED,
                                                   JobState.DEAD)]
    orm_broker.time_outcomes({job_id: timezone.now() for job_id in ended})
    with recorded(connection) as executed:
        statistics.throughput()
        timings = histograms.last_hour()

    # The dead one was dead-lettered unopened (its deliveries spent): it never started, so it has no
    # wait or run time.
    assert sum(timing.run.count for timing in timings.values()) == 3
    for table in ("django_taskmq_outcomecount", "django_taskmq_timingcount"):
        (rollup, rollup_params), = [(sql, params) for sql, params in executed if table in sql]
        rollup_plan = sqlite_plan(connection, rollup, rollup_params)  # the unique constraint's index (at, ...)
        assert f"SEARCH {table} USING INDEX" in rollup_plan and "(at>?)" in rollup_plan, rollup_plan
    assert not [sql for sql, _ in executed if "django_taskmq_job" in sql]
