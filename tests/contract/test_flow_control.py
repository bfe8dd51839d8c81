"""Flow control in the claim: concurrency keys, queue caps and rate limits hold jobs back without
delivering them, and never block the jobs behind them (both engines, through the Broker ABC)."""

from __future__ import annotations

import time

import pytest

from django_taskmq import ConfigError, Priority, async_task
from django_taskmq.conf import from_mapping
from django_taskmq.models import Job, State
from tests import tasks

pytestmark = pytest.mark.django_db

LONG = 300


def claim(broker, queues=("default",), limit=10, lease=LONG):
    return broker.reserve(list(queues), limit, lease, "t")


def ids(reservations):
    return [r.job_id for r in reservations]


def test_a_job_whose_key_is_taken_is_not_delivered_until_the_key_frees(broker):
    first = async_task("tests.tasks.noop", concurrency_key="import:42")
    second = async_task("tests.tasks.noop", concurrency_key="import:42")
    (r,) = claim(broker)
    assert r.job_id == first
    held = Job.objects.get(pk=second)
    assert (held.state, held.deliveries, held.attempt, held.lease_token) == (State.QUEUED, 0, 0, None)
    assert claim(broker) == []
    assert broker.has_ready(["default"]) is False  # nothing deliverable: an idle pusher may sleep
    broker.ack(r)
    (r2,) = claim(broker)
    assert (r2.job_id, r2.deliveries) == (second, 1)


def test_held_jobs_do_not_block_the_jobs_behind_them(broker):
    blocker = async_task("tests.tasks.noop", concurrency_key="k")
    held = [async_task("tests.tasks.noop", concurrency_key="k") for _ in range(5)]
    free = [async_task("tests.tasks.noop", concurrency_key=f"other-{i}") for i in range(3)]
    plain = async_task("tests.tasks.noop")
    got = ids(claim(broker, limit=3))
    assert got[0] == blocker and set(got[1:]) <= set(free)
    got += ids(claim(broker, limit=10))  # the held ones stay out of the way of what follows
    assert set(got) == {blocker, *free, plain}
    assert all(Job.objects.get(pk=j).deliveries == 0 for j in held)


def test_priority_holds_among_the_eligible_jobs(broker):
    running = async_task("tests.tasks.noop", concurrency_key="busy")
    claim(broker, limit=1)
    waiting = [async_task("tests.tasks.noop", concurrency_key="busy") for _ in range(3)]
    normal = [async_task("tests.tasks.noop") for _ in range(3)]
    critical = async_task("tests.tasks.noop", concurrency_key="free", priority=Priority.CRITICAL)
    got = ids(claim(broker, limit=2))
    assert got == [critical, normal[0]]
    assert running not in got and not set(waiting) & set(got)


def test_a_queue_whose_jobs_are_all_held_does_not_stop_another_queue(broker):
    first = async_task("tests.tasks.noop", queue="a", concurrency_key="a-key")
    assert ids(claim(broker, queues=["a", "b"], limit=1)) == [first]
    [async_task("tests.tasks.noop", queue="a", concurrency_key="a-key", priority=9) for _ in range(4)]
    b = [async_task("tests.tasks.noop", queue="b") for _ in range(2)]
    assert ids(claim(broker, queues=["a", "b"], limit=10)) == b


def test_concurrency_limit_admits_that_many_at_once(broker):
    jobs = [async_task("tests.tasks.noop", concurrency_key="reports", concurrency_limit=3) for _ in range(5)]
    assert ids(claim(broker)) == jobs[:3]
    assert claim(broker) == []


def test_a_key_held_by_a_crashed_holder_frees_when_its_lease_is_reclaimed(broker):
    first = async_task("tests.tasks.noop", concurrency_key="k")
    second = async_task("tests.tasks.noop", concurrency_key="k")
    (r,) = claim(broker, lease=0.05)
    assert r.job_id == first and claim(broker) == []
    time.sleep(0.1)
    broker.reclaim_expired()
    got = ids(claim(broker, limit=1))
    assert got in ([first], [second])  # the key is free again: one of them runs, never both
    assert claim(broker) == []


def test_a_queue_concurrency_cap_holds_across_claims(broker, taskmq_settings):
    from django_taskmq.brokers import get_broker

    taskmq_settings(queues={"default": {}, "reports": {"concurrency": 2}})
    broker = get_broker()
    jobs = [async_task("tests.tasks.noop", queue="reports") for _ in range(4)]
    other = async_task("tests.tasks.noop")
    got = claim(broker, queues=["default", "reports"])
    assert set(ids(got)) == {other, *jobs[:2]}
    assert claim(broker, queues=["default", "reports"]) == []
    broker.ack(next(r for r in got if r.job_id == jobs[0]))
    assert ids(claim(broker, queues=["default", "reports"])) == [jobs[2]]


def test_a_task_rate_limit_spreads_starts_and_says_when_it_opens(broker):
    jobs = [async_task("tests.tasks.noop", rate_limit="5/s") for _ in range(4)]
    other = async_task("tests.tasks.add", 1, 2)
    got = ids(claim(broker))
    assert got == [jobs[0], other]  # one start per 1/5 s, the other task is not held
    assert 0 < broker.flow_wait() <= 0.2
    assert claim(broker) == []
    time.sleep(broker.flow_wait() + 0.01)
    assert ids(claim(broker)) == [jobs[1]]
    assert all(Job.objects.get(pk=j).deliveries == 0 for j in jobs[2:])


def test_a_queue_rate_limit(broker, taskmq_settings):
    from django_taskmq.brokers import get_broker

    taskmq_settings(queues={"default": {}, "emails": {"rate_limit": "2/s"}})
    broker = get_broker()
    mails = [async_task("tests.tasks.noop", queue="emails") for _ in range(3)]
    assert ids(claim(broker, queues=["emails"])) == [mails[0]]
    assert claim(broker, queues=["emails"]) == []
    time.sleep(0.55)
    assert ids(claim(broker, queues=["emails"])) == [mails[1]]


def test_a_task_may_compute_its_key_from_the_call(broker):
    a1 = tasks.import_customer.delay(1, "row")
    a2 = tasks.import_customer.delay(1, "row")
    b1 = tasks.import_customer.delay(2, "row")
    assert Job.objects.get(pk=a1).concurrency_key == "import:1"
    assert ids(claim(broker)) == [a1, b1]
    assert Job.objects.get(pk=a2).state == State.QUEUED


def test_flow_status_shows_keys_held_waiting_and_limits(broker, taskmq_settings):
    from django_taskmq.brokers import get_broker

    taskmq_settings(queues={"default": {"concurrency": 5, "rate_limit": "100/s"}})
    broker = get_broker()
    [async_task("tests.tasks.noop", concurrency_key="k") for _ in range(3)]
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
def test_bad_flow_options_are_config_errors_at_the_call(options, match):
    with pytest.raises(ConfigError, match=match):
        async_task("tests.tasks.noop", **options)
    assert not Job.objects.exists()


@pytest.mark.parametrize("queue, match", [
    ({"concurrency": 0}, "concurrency of queue 'q'"), ({"rate_limit": "5/d"}, "rate_limit of queue 'q'"),
    ({"rate": "5/s"}, "'weight', 'concurrency' and 'rate_limit'"),
])
def test_bad_queue_flow_settings_name_the_setting(queue, match):
    with pytest.raises(ConfigError, match=r"TASKMQ\['queues'\].*" + match):
        from_mapping({"queues": {"q": queue}, "default_queue": "q"})


def test_qinfo_shows_keys_held_and_what_waits(broker):
    import json
    from io import StringIO

    from django.core.management import call_command

    [async_task("tests.tasks.noop", concurrency_key="import:7") for _ in range(3)]
    async_task("tests.tasks.noop", rate_limit="1/m")
    claim(broker)
    out = StringIO()
    call_command("qinfo", stdout=out)
    assert "key import:7: 1/1 running, 2 waiting" in out.getvalue()
    assert "rate limit task:tests.tasks.noop: next start in" in out.getvalue()
    out = StringIO()
    call_command("qinfo", "--json", stdout=out)
    assert json.loads(out.getvalue())["flow"]["keys"]["import:7"] == {"running": 1, "limit": 1, "waiting": 2}


def test_the_admin_job_page_and_dashboard_show_why_a_job_waits(admin_client, broker):
    holder = async_task("tests.tasks.noop", concurrency_key="import:9")
    waiting = async_task("tests.tasks.noop", concurrency_key="import:9")
    claim(broker)
    page = admin_client.get(f"/admin/django_taskmq/job/{waiting}/change/").content.decode()
    assert "import:9: 1 of 1 running, this job waits for it" in page
    page = admin_client.get(f"/admin/django_taskmq/job/{holder}/change/").content.decode()
    assert "import:9: 1 of 1 running" in page and "this job waits" not in page
    dashboard = admin_client.get("/admin/django_taskmq/dashboard/").content.decode()
    assert 'id="taskmq-flow"' in dashboard and "import:9" in dashboard
