"""Chains, hooks and failure handling as a running cluster applies them."""

from __future__ import annotations

import collections

import pytest

from django_taskmq import async_task, async_chain
from django_taskmq import Chain
from django_taskmq.models import DeadLetter, Job

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

TASKS = "tests.cluster.tasks_cluster"


@pytest.mark.parametrize("threads", ["1", "8"])
def test_chain_runs_links_in_order_and_a_failed_link_stops_it(cluster, threads):
    async_chain([("tests.tasks.record_run", ("ok1",)), ("tests.tasks.record_run", ("ok2",)),
                 ("tests.tasks.record_run", ("ok3",))], group="good")
    (Chain(group="bad")
     .append("tests.tasks.record_run", "bad1")
     .append(f"{TASKS}.boom", "bad2", q_options={"max_deliveries": 2})
     .append("tests.tasks.record_run", "bad3")
     .run())

    cluster.burst("-w", "2", "--threads", threads)

    tags = [tag for _, tag in cluster.log()]
    assert [t for t in tags if t.startswith("ok")] == ["ok1", "ok2", "ok3"]
    assert sorted(Job.objects.filter(group="good").values_list("state", flat=True)) == ["SUCCEEDED"] * 3
    # The failed link ran its deliveries, died, and the link after it never ran: it ended CANCELLED.
    assert [t for t in tags if "bad" in t] == ["bad1", "start:bad2", "start:bad2"]
    bad = list(Job.objects.filter(group="bad").order_by("id").values_list("func", "state", "error"))
    assert bad[:2] == [("tests.tasks.record_run", "SUCCEEDED", ""), (f"{TASKS}.boom", "DEAD", bad[1][2])]
    assert bad[2] == ("tests.tasks.record_run", "CANCELLED", "upstream step 'link-2' ended DEAD")


@pytest.mark.parametrize("threads", ["1", "8"])
def test_hooks_fire_once_per_final_outcome_and_ack_failure_ends_failed(cluster, threads):
    hook = f"{TASKS}.hook"
    ok = async_task("tests.tasks.record_run", "ok", hook=hook)
    redelivered = async_task(f"{TASKS}.boom", "redelivered", hook=hook, max_deliveries=3)
    acked = async_task(f"{TASKS}.boom", "acked", hook=hook, ack_failure=True)

    cluster.burst("-w", "2", "--threads", threads)

    log = cluster.log()
    hooks = collections.Counter((j, t) for j, t in log if t.startswith("hook:"))
    assert hooks == {(ok, "hook:SUCCEEDED"): 1, (redelivered, "hook:DEAD"): 1, (acked, "hook:FAILED"): 1}
    runs = collections.Counter(j for j, t in log if not t.startswith("hook:"))
    assert runs == {ok: 1, redelivered: 3, acked: 1}

    # Default (ack_failures False): a raising task is redelivered until max_deliveries, then DEAD.
    job = Job.objects.get(pk=redelivered)
    assert (job.state, job.deliveries) == ("DEAD", 3) and "Boom: redelivered" in job.error
    assert DeadLetter.objects.filter(job_id=redelivered).count() == 1
    # ack_failure=True: the failure is acknowledged, FAILED at once, never redelivered.
    job = Job.objects.get(pk=acked)
    assert (job.state, job.deliveries) == ("FAILED", 1) and "Boom: acked" in job.error
    assert not DeadLetter.objects.filter(job_id=acked).exists()
