"""A backlog held behind a concurrency key at its limit: each claim walks past the held rows, and
for each it asks whether the key is free. That question must find the key's running rows by the
key, not walk every running row of the table once per held row.

The planners did the latter: PostgreSQL counted through whichever partial index of running rows it
liked (fresh statistics or not), SQLite through the first index on ``state``. With 300 jobs running
and 20,000 held, a claim took 0.8 s on both, under SQLite's write lock (measured, not asserted
here: timings belong to ``benchmarks/``). These tests pin each engine's plan instead: the plan the
engine actually chose for the claim's statements, on a table like that one in miniature.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_taskmq import async_task
from django_taskmq.models import Job

JOB = Job._meta.db_table
HELD, RUNNING_ELSEWHERE = 40, 12


def hot_backlog(broker) -> list[str]:
    """One job of key ``hot`` (limit 1) running, jobs of other keys running, ``HELD`` jobs of
    ``hot`` queued behind them, then three free jobs; return the free jobs' ids."""
    hot = {"concurrency_key": "hot", "concurrency_limit": 1}
    async_task("tests.tasks.noop", q_options=hot)
    for i in range(RUNNING_ELSEWHERE):
        async_task("tests.tasks.noop", q_options={"concurrency_key": f"k{i % 4}", "concurrency_limit": 10})
    assert len(broker.reserve(["default"], 100, 300, "owner-a")) == 1 + RUNNING_ELSEWHERE
    for _ in range(HELD):
        async_task("tests.tasks.noop", q_options=hot)
    return [async_task("tests.tasks.noop") for _ in range(3)]


def look_and_claim_behind_a_backlog(broker) -> list[str]:
    """Build :func:`hot_backlog`, look for work and claim the free jobs; return the statements that
    asked whether a key is free."""
    hot_backlog(broker)
    with CaptureQueriesContext(connection) as context:
        assert broker.has_ready(["default"])
        assert len(broker.reserve(["default"], 10, 300, "owner-b")) == 3
    return [q["sql"] for q in context.captured_queries if "concurrency_limit >" in q["sql"]]


def job_scans_per_subquery(plan: dict, inside: str | None = None) -> list[tuple[str, int]]:
    """(subplan kind, loops) of every scan of the job table below an InitPlan or a SubPlan of a
    PostgreSQL JSON plan."""
    kind = plan.get("Parent Relationship")
    inside = kind if kind in ("InitPlan", "SubPlan") else inside
    found = []
    if inside and plan.get("Relation Name") == JOB:
        found.append((inside, plan["Actual Loops"]))
    for child in plan.get("Plans", []):
        found += job_scans_per_subquery(child, inside)
    return found


def test_held_jobs_do_not_hide_the_free_ones(broker):
    free = hot_backlog(broker)
    assert sorted(r.job_id for r in broker.reserve(["default"], 10, 300, "owner-b")) == sorted(free)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plan")
def test_postgresql_reads_the_running_keys_once_per_statement(broker):
    statements = look_and_claim_behind_a_backlog(broker)
    assert len(statements) == 2  # the look, then the claim's heads
    for statement in statements:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement)
            raw = cursor.fetchone()[0]
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        scans = job_scans_per_subquery(plan)
        # Once, as an InitPlan: not once for each of the HELD rows walked past.
        assert scans and all(kind == "InitPlan" and loops == 1 for kind, loops in scans), scans


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's plan")
def test_sqlite_counts_a_keys_running_jobs_by_the_key(broker):
    statements = look_and_claim_behind_a_backlog(broker)
    assert statements
    for statement in statements:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + statement)
            plan = [row[-1] for row in cursor.fetchall()]
        subquery = plan[next(i for i, line in enumerate(plan) if "CORRELATED SCALAR SUBQUERY" in line) + 1]
        assert "taskmq_job_key_running (concurrency_key=?)" in subquery, plan
