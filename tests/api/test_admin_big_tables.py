"""The admin on tables too big to count or scan: capped counts, searches that read the newest jobs
only (exact ids, groups and keys found anywhere), dead letters searched by their own task name."""

from __future__ import annotations

import pytest

from django_taskmq import async_task
from django_taskmq.admin import paginator, window
from django_taskmq.admin.jobs import JobAdmin
from django_taskmq.api import run_sync
from django_taskmq.models import Cluster, DeadLetter, Job, State

pytestmark = pytest.mark.django_db

JOBS = "/admin/django_taskmq/job/"
LETTERS = "/admin/django_taskmq/deadletter/"


def listed(response) -> list[str]:
    return [row.pk for row in response.context["cl"].result_list]


def test_the_count_stops_at_the_cap(admin_client, broker, monkeypatch):
    monkeypatch.setattr(paginator, "CAP", 5)
    ids = [async_task("tests.tasks.noop") for _ in range(8)]
    response = admin_client.get(JOBS)
    cl = response.context["cl"]
    assert cl.result_count == 6 and str(cl.result_count) == "more than 5"
    assert "more than 5" in response.content.decode()
    assert listed(response) == sorted(ids, reverse=True)  # the page itself is whole
    few = admin_client.get(JOBS + "?queue=default&state__exact=RUNNING").context["cl"]
    assert few.result_count == 0 and str(few.result_count) == "0"


def test_search_by_task_name_reads_the_newest_jobs_exact_matches_read_all(admin_client, broker, monkeypatch):
    monkeypatch.setattr(window, "WINDOW", 3)
    old = async_task("tests.tasks.add", 1, 2, group="g-old", key="k-old")
    newer = [async_task("tests.tasks.noop") for _ in range(3)]
    assert listed(admin_client.get(JOBS + "?q=tasks.add")) == []  # beyond the newest 3
    assert listed(admin_client.get(JOBS + "?q=tasks.noop")) == sorted(newer, reverse=True)
    assert listed(admin_client.get(JOBS + f"?q={old}")) == [old]
    assert listed(admin_client.get(JOBS + "?q=g-old")) == [old]
    assert listed(admin_client.get(JOBS + "?q=k-old")) == [old]  # its key is live
    coalesced = async_task("tests.tasks.add", 3, 4, unique_key="u-old")
    async_task("tests.tasks.noop")
    assert listed(admin_client.get(JOBS + "?q=u-old")) == [coalesced]  # by its coalescing key


def test_the_cluster_filter_reads_the_newest_jobs(admin_client, broker, monkeypatch):
    monkeypatch.setattr(window, "WINDOW", 2)
    Cluster.objects.create(id="web-1:h:1:x", name="web-1", host="h", pid=1, state="running")  # the filter's choice
    old = async_task("tests.tasks.noop")
    Job.objects.filter(pk=old).update(cluster="web-1")
    new = async_task("tests.tasks.noop")
    Job.objects.filter(pk=new).update(cluster="web-1")
    async_task("tests.tasks.noop")
    assert listed(admin_client.get(JOBS + "?cluster=web-1")) == [new]


def test_a_dead_letter_carries_its_task_name(admin_client, broker):
    dead = async_task("tests.tasks.fail", "kaput", max_deliveries=1)
    run_sync(dead)
    assert Job.objects.get(pk=dead).state == State.DEAD
    letter = DeadLetter.objects.get(job_id=dead)
    assert letter.task_name == "tests.tasks.fail"
    assert [d.job_id for d in admin_client.get(LETTERS + "?q=tasks.fail").context["cl"].result_list] == [dead]
    Job.objects.filter(pk=dead).update(task_name="renamed")  # the search reads the letter, not the job
    assert [d.job_id for d in admin_client.get(LETTERS + "?q=tasks.fail").context["cl"].result_list] == [dead]


@pytest.mark.sqlite_only
def test_sqlite_lists_a_common_state_by_walking_the_primary_key_and_a_rare_one_through_its_index(
        admin_client, broker, monkeypatch):
    """SQLite has no statistics: for ``state = ?`` it took the index of states and sorted every job
    of the state for the newest page (154 ms beside 289,000 successes). A common state's page walks
    the primary key from the newest id down instead; a rare one keeps the index of states."""
    from django.db import connection

    from django_taskmq.admin import filters

    monkeypatch.setattr(filters, "COMMON", 4)
    monkeypatch.setattr(JobAdmin, "list_per_page", 3)
    queued = [async_task("tests.tasks.noop") for _ in range(6)]
    cancelled = [async_task("tests.tasks.noop") for _ in range(2)]
    Job.objects.filter(pk__in=cancelled).update(state=State.CANCELLED)
    selects: list[tuple[str, list]] = []

    def record(execute, sql, params, many, context):
        if sql.startswith("SELECT") and "ORDER BY" in sql:
            selects.append((sql, list(params or ())))
        return execute(sql, params, many, context)

    def plan(url: str) -> tuple[list[str], str]:
        selects.clear()
        with connection.execute_wrapper(record):
            response = admin_client.get(url)
        (sql, params), = [(sql, params) for sql, params in selects if "django_taskmq_job" in sql]
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            return listed(response), " | ".join(row[-1] for row in cursor.fetchall())

    common, common_plan = plan(JOBS + "?state__exact=QUEUED")
    assert common == sorted(queued, reverse=True)[:3]
    assert "taskmq_job_state_queue" not in common_plan and "TEMP B-TREE" not in common_plan, common_plan
    assert admin_client.get(JOBS + "?state__exact=QUEUED&p=2").context["cl"].result_list[0].pk == sorted(queued)[2]
    rare, rare_plan = plan(JOBS + "?state__exact=CANCELLED")
    assert rare == sorted(cancelled, reverse=True)
    assert "taskmq_job_state_queue" in rare_plan, rare_plan
