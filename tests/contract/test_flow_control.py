"""Flow control in the claim: concurrency keys, queue caps and rate limits hold jobs back without
delivering them, and never block the jobs behind them.

The tests taking ``broker`` run on each broker (see conftest.py); the ``orm_broker`` ones read
flow control back through ``qinfo`` and the admin."""

from __future__ import annotations

import time

import pytest

from django_taskmq import ConfigError, Priority
from django_taskmq.conf import from_mapping
from django_taskmq.policy.states import JobState
from tests import tasks
from tests.contract.helpers import ack, job, put

LONG = 300


def claim(broker, queues=("default",), limit=10, lease=LONG):
    return broker.reserve(list(queues), limit, lease, "t")


def ids(reservations):
    return [r.job_id for r in reservations]


def test_a_job_whose_key_is_taken_is_not_delivered_until_the_key_frees(broker):
    first = put(broker, concurrency_key="import:42")
    second = put(broker, concurrency_key="import:42")
    (r,) = claim(broker)
    assert r.job_id == first
    held = job(broker, second)
    assert (held.state, held.deliveries, held.attempt, held.lease_token) == (JobState.QUEUED, 0, 0, None)
    assert claim(broker) == []
    assert broker.has_ready(["default"]) is False  # nothing deliverable: an idle pusher may sleep
    ack(broker, r)
    (r2,) = claim(broker)
    assert (r2.job_id, r2.deliveries) == (second, 1)


def test_held_jobs_do_not_block_the_jobs_behind_them(broker):
    blocker = put(broker, concurrency_key="k")
    held = [put(broker, concurrency_key="k") for _ in range(5)]
    free = [put(broker, concurrency_key=f"other-{i}") for i in range(3)]
    plain = put(broker)
    got = ids(claim(broker, limit=3))
    assert got[0] == blocker and set(got[1:]) <= set(free)
    got += ids(claim(broker, limit=10))  # the held ones stay out of the way of what follows
    assert set(got) == {blocker, *free, plain}
    assert all(job(broker, j).deliveries == 0 for j in held)


def test_priority_holds_among_the_eligible_jobs(broker):
    running = put(broker, concurrency_key="busy")
    claim(broker, limit=1)
    waiting = [put(broker, concurrency_key="busy") for _ in range(3)]
    normal = [put(broker) for _ in range(3)]
    critical = put(broker, concurrency_key="free", priority=Priority.CRITICAL)
    got = ids(claim(broker, limit=2))
    assert got == [critical, normal[0]]
    assert running not in got and not set(waiting) & set(got)


def test_a_queue_whose_jobs_are_all_held_does_not_stop_another_queue(broker):
    first = put(broker, queue="a", concurrency_key="a-key")
    assert ids(claim(broker, queues=["a", "b"], limit=1)) == [first]
    [put(broker, queue="a", concurrency_key="a-key", priority=9) for _ in range(4)]
    b = [put(broker, queue="b") for _ in range(2)]
    assert ids(claim(broker, queues=["a", "b"], limit=10)) == b


def test_concurrency_limit_admits_that_many_at_once(broker):
    jobs = [put(broker, concurrency_key="reports", concurrency_limit=3) for _ in range(5)]
    assert ids(claim(broker)) == jobs[:3]
    assert claim(broker) == []


def test_a_key_held_by_a_crashed_holder_frees_when_its_lease_is_reclaimed(broker):
    first = put(broker, concurrency_key="k")
    second = put(broker, concurrency_key="k")
    (r,) = claim(broker, lease=0.05)
    assert r.job_id == first and claim(broker) == []
    time.sleep(0.1)
    broker.reclaim_expired()
    got = ids(claim(broker, limit=1))
    assert got in ([first], [second])  # the key is free again: one of them runs, never both
    assert claim(broker) == []


def test_a_queue_concurrency_cap_holds_across_claims(reconfigure):
    broker = reconfigure(queues={"default": {}, "reports": {"concurrency": 2}})
    jobs = [put(broker, queue="reports") for _ in range(4)]
    other = put(broker)
    got = claim(broker, queues=["default", "reports"])
    assert set(ids(got)) == {other, *jobs[:2]}
    assert claim(broker, queues=["default", "reports"]) == []
    ack(broker, next(r for r in got if r.job_id == jobs[0]))
    assert ids(claim(broker, queues=["default", "reports"])) == [jobs[2]]


def test_a_task_rate_limit_spreads_starts_and_says_when_it_opens(broker):
    jobs = [put(broker, rate_limit="5/s") for _ in range(4)]
    other = put(broker, 1, 2, func="tests.tasks.add")
    got = ids(claim(broker))
    assert got == [jobs[0], other]  # one start per 1/5 s, the other task is not held
    assert 0 < broker.flow_wait() <= 0.2
    assert claim(broker) == []
    time.sleep(broker.flow_wait() + 0.01)
    assert ids(claim(broker)) == [jobs[1]]
    assert all(job(broker, j).deliveries == 0 for j in jobs[2:])


def test_a_queue_rate_limit(reconfigure):
    broker = reconfigure(queues={"default": {}, "emails": {"rate_limit": "2/s"}})
    mails = [put(broker, queue="emails") for _ in range(3)]
    assert ids(claim(broker, queues=["emails"])) == [mails[0]]
    assert claim(broker, queues=["emails"]) == []
    time.sleep(0.55)
    assert ids(claim(broker, queues=["emails"])) == [mails[1]]


def test_a_task_may_compute_its_key_from_the_call(broker):
    a1 = put(broker, 1, "row", func=tasks.import_customer)
    a2 = put(broker, 1, "row", func=tasks.import_customer)
    b1 = put(broker, 2, "row", func=tasks.import_customer)
    assert job(broker, a1).concurrency_key == "import:1"
    assert ids(claim(broker)) == [a1, b1]
    assert job(broker, a2).state == JobState.QUEUED


def test_flow_status_shows_keys_held_waiting_and_limits(reconfigure):
    broker = reconfigure(queues={"default": {"concurrency": 5, "rate_limit": "100/s"}})
    [put(broker, concurrency_key="k") for _ in range(3)]
    claim(broker)
    status = broker.flow_status()
    assert status["keys"] == {"k": {"running": 1, "limit": 1, "waiting": 2}}
    assert status["queues"] == {"default": {"running": 1, "cap": 5}}
    assert "queue:default" in status["rates"]


@pytest.mark.parametrize("options, match", [
    ({"rate_limit": "10/x"}, "rate_limit"), ({"rate_limit": "0/s"}, "rate_limit"),
    ({"concurrency_limit": 0}, "concurrency_limit"), ({"concurrency_key": "k" * 256}, "concurrency_key"),
    ({"concurrency_key": 42}, "concurrency_key"),
])
def test_bad_flow_options_are_config_errors_at_the_call(broker, options, match):
    with pytest.raises(ConfigError, match=match):
        put(broker, **options)
    assert broker.stats() == []


@pytest.mark.parametrize("queue, match", [
    ({"concurrency": 0}, "concurrency of queue 'q'"), ({"rate_limit": "5/d"}, "rate_limit of queue 'q'"),
    ({"rate": "5/s"}, "'weight', 'concurrency' and 'rate_limit'"),
])
def test_bad_queue_flow_settings_name_the_setting(queue, match):
    with pytest.raises(ConfigError, match=r"TASKMQ\['queues'\].*" + match):
        from_mapping({"queues": {"q": queue}, "default_queue": "q"})


def test_qinfo_shows_keys_held_and_what_waits(orm_broker):
    """ORM only: qinfo reads the configured broker."""
    import json
    from io import StringIO

    from django.core.management import call_command

    broker = orm_broker
    [put(broker, concurrency_key="import:7") for _ in range(3)]
    put(broker, rate_limit="1/m")
    claim(broker)
    out = StringIO()
    call_command("qinfo", stdout=out)
    assert "key import:7: 1/1 running, 2 waiting" in out.getvalue()
    assert "rate limit task:tests.tasks.noop: next start in" in out.getvalue()
    out = StringIO()
    call_command("qinfo", "--json", stdout=out)
    assert json.loads(out.getvalue())["flow"]["keys"]["import:7"] == {"running": 1, "limit": 1, "waiting": 2}


def test_the_admin_job_page_and_dashboard_show_why_a_job_waits(admin_client, orm_broker):
    """ORM only: the admin reads the job table."""
    broker = orm_broker
    holder = put(broker, concurrency_key="import:9")
    waiting = put(broker, concurrency_key="import:9")
    claim(broker)
    page = admin_client.get(f"/admin/django_taskmq/job/{waiting}/change/").content.decode()
    assert "import:9: 1 of 1 running, this job waits for it" in page
    page = admin_client.get(f"/admin/django_taskmq/job/{holder}/change/").content.decode()
    assert "import:9: 1 of 1 running" in page and "this job waits" not in page
    dashboard = admin_client.get("/admin/django_taskmq/dashboard/").content.decode()
    assert 'id="taskmq-flow"' in dashboard and "import:9" in dashboard
