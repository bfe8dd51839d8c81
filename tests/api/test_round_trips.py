"""The statements of the two hot transactions: recording plain successes, and a claim.

On PostgreSQL every statement is a round trip to the server, on the path of every job's latency.
These tests pin what a change could quietly add back: a savepoint around plain successes, one
counter update per queue.
"""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_taskmq import async_task
from django_taskmq.runtime import recorder
from django_taskmq.runtime import execution as ex
from django_taskmq.brokers import get_broker
from django_taskmq.conf import get_settings
from django_taskmq.models import Job, QueueState, State

pytestmark = pytest.mark.django_db(transaction=True)  # outside any transaction, as the cluster runs them


def success(reservation):
    now = time.time()
    return ex.seal(ex.Outcome(reservation, None, ex.SUCCESS, "ok", started_at=now, finished_at=now), get_settings())


def statements(context: CaptureQueriesContext) -> list[str]:
    """Each statement's first two words, upper case: "UPDATE DJANGO_TASKMQ_JOB", "SAVEPOINT ..."."""
    sql = [re.sub(r"^\d+ times: ", "", q["sql"]) for q in context.captured_queries]  # executemany's
    return [" ".join(s.split()[:2]).upper() for s in sql]


def test_plain_successes_are_recorded_in_one_transaction_without_savepoints(broker):
    ids = [async_task("tests.tasks.noop", i) for i in range(3)]
    reservations = broker.reserve(["default"], 3, 30, "owner-a")
    with CaptureQueriesContext(connection) as context:
        recorder.record([success(r) for r in reservations], broker, get_settings())
    assert not [s for s in statements(context) if "SAVEPOINT" in s]
    assert [s for s in statements(context) if s.startswith("UPDATE")] == ["UPDATE DJANGO_TASKMQ_JOB"]
    assert {j.state for j in Job.objects.filter(pk__in=ids)} == {State.SUCCEEDED}


@pytest.mark.parametrize("outside_transaction", [True, False])
def test_a_lone_success_outside_any_transaction_is_one_statement_that_commits_alone(broker, outside_transaction):
    """As the monitor and the workers record an idle cluster's jobs: no BEGIN and COMMIT around the
    ack (two round trips on PostgreSQL). A caller that may hold a transaction (sync mode) does not
    say ``outside_transaction``, and the ack keeps its own transaction or savepoint."""
    job_id = async_task("tests.tasks.noop")
    (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    in_transaction = []

    def watch(execute, sql, params, many, context):
        if sql.startswith("UPDATE django_taskmq_job"):
            in_transaction.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        recorder.record([success(reservation)], broker, get_settings(), outside_transaction=outside_transaction)
    assert in_transaction == [not outside_transaction]
    assert Job.objects.get(pk=job_id).state == State.SUCCEEDED


def test_a_failure_in_the_batch_keeps_each_outcome_in_its_own_savepoint(broker):
    ids = [async_task("tests.tasks.noop", i) for i in range(2)]
    first, second = broker.reserve(["default"], 2, 30, "owner-a")
    failed = ex.Outcome(second, None, ex.FAILURE, error="boom", started_at=time.time(), finished_at=time.time())
    with CaptureQueriesContext(connection) as context:
        recorder.record([success(first), failed], broker, get_settings())
    assert [s for s in statements(context) if s.startswith("SAVEPOINT")]
    states = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
    assert states == {first.job_id: State.SUCCEEDED, second.job_id: State.RETRYING}


def test_the_first_claim_creates_the_queue_counters_and_later_claims_write_none(broker, taskmq_settings,
                                                                                monkeypatch):
    """No commit of its own before a cluster's first claim: the claim creates the counters it is
    missing in its own transaction, counts itself in them, and later claims insert nothing."""
    taskmq_settings(queues={"a": {"weight": 1}, "b": {"weight": 1}}, default_queue="a")
    assert not QueueState.objects.exists()
    async_task("tests.tasks.noop")
    commits = []
    commit = connection.commit
    monkeypatch.setattr(connection, "commit", lambda: commits.append(1) or commit())
    assert len(broker.reserve(["a", "b"], 10, 30, "owner-a")) == 1
    assert len(commits) == 1  # the claim's own
    served = dict(QueueState.objects.values_list("queue", "served"))
    assert sorted(served) == ["a", "b"] and served["a"] == 1
    async_task("tests.tasks.noop")
    with CaptureQueriesContext(connection) as context:
        assert len(broker.reserve(["a", "b"], 10, 30, "owner-a")) == 1
    assert not [q["sql"] for q in context.captured_queries if q["sql"].startswith("INSERT")]
    assert QueueState.objects.get(queue="a").served == 2


def test_a_claim_updates_every_queue_counter_in_one_statement(broker, taskmq_settings):
    taskmq_settings(queues={"a": {"weight": 3}, "b": {"weight": 1}, "c": {"weight": 1}}, default_queue="a")
    for queue in "ab":
        async_task("tests.tasks.noop", q_options={"queue": queue})
    broker.reserve(["a", "b", "c"], 10, 30, "owner-a")  # creates the counters
    before = dict(QueueState.objects.values_list("queue", "served"))
    async_task("tests.tasks.noop", q_options={"queue": "a"})
    async_task("tests.tasks.noop", q_options={"queue": "a"})
    with CaptureQueriesContext(connection) as context:
        claimed = broker.reserve(["a", "b", "c"], 10, 30, "owner-a")
    assert [r.queue for r in claimed] == ["a", "a"]
    counters = [q["sql"] for q in context.captured_queries if "UPDATE django_taskmq_queuestate " in q["sql"]]
    assert len(counters) == 1
    if connection.vendor == "postgresql":
        # BEGIN, heads and counters read together (synchronous_commit off said inside), the claim
        # with the counters' update, COMMIT: a round trip each.
        assert len(context.captured_queries) == 4, [q["sql"][:60] for q in context.captured_queries]
    after = dict(QueueState.objects.values_list("queue", "served"))
    assert after["a"] == before["a"] + 2
    # The idle queues were lifted towards the busy one (never lowered), all in that one statement.
    assert after["b"] >= before["b"] and after["c"] >= before["c"]
    assert (after["b"], after["c"]) != (before["b"], before["c"])


def test_a_lone_success_that_cannot_be_stored_fails_its_job_with_the_reason(broker):
    job_id = async_task("tests.tasks.noop")
    (reservation,) = broker.reserve(["default"], 1, 30, "owner-a")
    broken = success(reservation)._replace(started_at="not a time")
    recorder.record([broken], broker, get_settings(), outside_transaction=True)
    job = Job.objects.get(pk=job_id)
    assert job.state == State.DEAD
    assert job.error.startswith("outcome could not be stored: TypeError")


def prepared_statements() -> list[str]:
    """The statements this connection prepared on the server (``pg_prepared_statements``)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return sorted(row[0] for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="server-side prepared statements are PostgreSQL's")
@pytest.mark.parametrize("prepared", [True, False])
def test_claims_and_acks_are_prepared_once_per_connection(broker, taskmq_settings, prepared):
    """Each hot statement is prepared once, whatever the queues and the number of rows it takes
    (arrays, not a placeholder per value); ``prepared_statements: False`` prepares nothing."""
    taskmq_settings(queues={"a": {"weight": 1}, "b": {"weight": 1}}, default_queue="a", prepared_statements=prepared)
    broker = get_broker()
    connection.close()  # a connection of its own: nothing prepared by an earlier test
    for round_, queues in enumerate([["a"], ["a", "b"], ["a", "b"]]):
        ids = [async_task("tests.tasks.noop", q_options={"queue": q}) for q in queues for _ in range(round_ + 1)]
        reservations = broker.reserve(["a", "b"], 10, 30, "owner-a")
        assert sorted(r.job_id for r in reservations) == sorted(ids)
        recorder.record([success(r) for r in reservations], broker, get_settings(), outside_transaction=True)
        if round_ == 0:
            first = prepared_statements()
    assert Job.objects.filter(state=State.SUCCEEDED).count() == 1 + 4 + 6
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('plan_cache_mode'), "
                       "(SELECT COALESCE(sum(custom_plans), 0) FROM pg_prepared_statements)")
        plan_cache_mode, custom_plans = cursor.fetchone()
    if not prepared:
        assert prepared_statements() == [] and plan_cache_mode == "auto"
        return
    # Each planned once with its parameters unknown, not again at every run (see brokers/pooling.py).
    assert plan_cache_mode == "force_generic_plan" and custom_plans == 0
    kinds = [" ".join(s.split()[:2]) for s in prepared_statements()]
    # The one-statement claim ("WITH weighted": the first claim lacks the counters, later ones
    # find two queues with work); the full claim's heads, and claim with its counters; the ack (one
    # text for the lone ack and a batch's executemany).
    assert len(first) == 4
    assert sorted(kinds) == ["SELECT q.name,", "UPDATE django_taskmq_job", "WITH locked", "WITH weighted"]
    assert prepared_statements() == first  # the same texts for 2 queues and 4 or 6 rows


# -- PostgreSQL: the claim of one queue's work in one statement ---------------------------------
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql",
                                     reason="the one-statement claim is PostgreSQL's (UPDATE in a WITH)")
WEIGHTED = {"a": {"weight": 3}, "b": {"weight": 1}, "c": {"weight": 2}}


def claim_statements(context: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in context.captured_queries]


@postgresql_only
def test_one_queue_with_work_is_claimed_in_one_statement_in_pick_order(broker, taskmq_settings):
    """BEGIN, heads, claim and COMMIT become one autocommit statement: the heads in pick order
    (priority, then age), the busy queue counted and the idle ones lifted as the full claim does,
    the commit not waiting for the flush, as every claim's."""
    from django_taskmq.policy import pick

    taskmq_settings(queues=WEIGHTED, default_queue="a")
    broker = get_broker()  # with these weights
    async_task("tests.tasks.noop", q_options={"queue": "a"})
    broker.reserve(["a", "b", "c"], 10, 30, "owner-a")  # creates the counters
    QueueState.objects.filter(queue="b").update(served=0)
    QueueState.objects.filter(queue="c").update(served=5)
    before = dict(QueueState.objects.values_list("queue", "served"))
    low = async_task("tests.tasks.noop", q_options={"queue": "a", "priority": -5})
    ids = [async_task("tests.tasks.noop", i, q_options={"queue": "a"}) for i in range(3)]
    urgent = async_task("tests.tasks.noop", q_options={"queue": "a", "priority": 9})
    with CaptureQueriesContext(connection) as context:
        claimed = broker.reserve(["a", "b", "c"], 4, 30, "owner-a")
    (sql,) = claim_statements(context)
    assert sql.startswith("WITH weighted") and "'synchronous_commit', 'off', true" in sql
    assert [r.job_id for r in claimed] == [urgent, *ids]
    assert Job.objects.get(pk=low).state == State.QUEUED
    assert {j.state for j in Job.objects.filter(pk__in=[urgent, *ids])} == {State.RUNNING}
    assert not connection.in_atomic_block
    after = dict(QueueState.objects.values_list("queue", "served"))
    weights = {q: v["weight"] for q, v in WEIGHTED.items()}
    busy_after = {**before, "a": before["a"] + 4}
    expected = {**busy_after, **pick.lift_idle(busy_after, weights, ["a"], ["b", "c"])}
    assert after == expected and after["b"] > before["b"] and after["c"] == before["c"]


@postgresql_only
@pytest.mark.parametrize("seed", range(6))
def test_the_one_statement_claim_takes_and_counts_what_the_full_claim_does(broker, taskmq_settings, seed):
    """The same start, claimed once by each path: the same jobs in the same order, the same counters."""
    import random

    rng = random.Random(seed)
    queues = {q: {"weight": rng.randint(1, 5)} for q in "abcd"}
    taskmq_settings(queues=queues, default_queue="a")
    broker = get_broker()  # with these weights
    busy = rng.choice("abcd")
    async_task("tests.tasks.noop", q_options={"queue": busy})
    broker.reserve(list(queues), 10, 30, "owner-a")  # creates the counters
    for q in queues:
        QueueState.objects.filter(queue=q).update(served=rng.randint(0, 40))
    for i in range(rng.randint(1, 12)):
        async_task("tests.tasks.noop", i, q_options={"queue": busy, "priority": rng.choice([-5, 0, 0, 5])})
    limit = rng.randint(1, 8)
    start = (dict(QueueState.objects.values_list("queue", "served")),
             dict(Job.objects.values_list("pk", "state")))
    results = []
    for plain in (True, False):
        QueueState.objects.all().delete()
        QueueState.objects.bulk_create([QueueState(queue=q, served=n) for q, n in start[0].items()])
        for pk, state in start[1].items():
            Job.objects.filter(pk=pk).update(state=state, deliveries=0)
        broker._plain_next = plain
        with CaptureQueriesContext(connection) as context:
            claimed = broker.reserve(list(queues), limit, 30, "owner-a")
        assert (len(context.captured_queries) == 1) is plain
        results.append(([r.job_id for r in claimed], dict(QueueState.objects.values_list("queue", "served"))))
    assert results[0] == results[1]
    assert len(results[0][0]) == min(limit, sum(1 for s in start[1].values() if s == State.QUEUED))


@postgresql_only
def test_expired_and_poisoned_heads_take_the_full_claim(broker):
    expired = async_task("tests.tasks.noop", q_options={"expires_at": time.time() + 0.05})
    poisoned = async_task("tests.tasks.noop", q_options={"max_deliveries": 1})
    fine = async_task("tests.tasks.noop")
    Job.objects.filter(pk=poisoned).update(deliveries=1)
    broker.reserve(["default"], 1, 30, "owner-a", above=9)  # creates the counter, claims nothing
    time.sleep(0.1)
    with CaptureQueriesContext(connection) as context:
        claimed = broker.reserve(["default"], 10, 30, "owner-a")
    assert claim_statements(context)[0].startswith("WITH weighted") and len(context.captured_queries) > 1
    assert [r.job_id for r in claimed] == [fine]
    states = dict(Job.objects.values_list("pk", "state"))
    assert (states[expired], states[poisoned]) == (State.EXPIRED, State.DEAD)
    async_task("tests.tasks.noop")
    with CaptureQueriesContext(connection) as context:
        assert len(broker.reserve(["default"], 10, 30, "owner-a")) == 1
    assert len(context.captured_queries) == 1  # the full claim dealt with them: one statement again


@postgresql_only
def test_flow_control_takes_the_full_claim_from_its_first_keyed_job_on(broker):
    keyed = async_task("tests.tasks.noop", q_options={"concurrency_key": "k"})
    broker.reserve(["default"], 1, 30, "owner-a", above=9)  # creates the counter
    with CaptureQueriesContext(connection) as context:
        assert [r.job_id for r in broker.reserve(["default"], 10, 30, "owner-a")] == [keyed]
    assert len(context.captured_queries) > 1
    async_task("tests.tasks.noop")
    with CaptureQueriesContext(connection) as context:
        assert len(broker.reserve(["default"], 10, 30, "owner-a")) == 1
    # Once a claim met flow control, every claim takes its locks and counts (FlowGate.seen).
    assert not claim_statements(context)[0].startswith("WITH weighted")


@postgresql_only
def test_several_queues_with_work_take_the_weighted_pick_until_one_has_work_again(broker, taskmq_settings):
    taskmq_settings(queues=WEIGHTED, default_queue="a")
    broker = get_broker()  # with these weights
    async_task("tests.tasks.noop", q_options={"queue": "a"})
    broker.reserve(["a", "b", "c"], 10, 30, "owner-a")  # creates the counters
    for _ in range(3):
        for q in "ab":
            async_task("tests.tasks.noop", q_options={"queue": q})
    sequences = []
    for limit in (2, 2, 2):
        with CaptureQueriesContext(connection) as context:
            claimed = broker.reserve(["a", "b", "c"], limit, 30, "owner-a")
        sequences.append(([r.queue for r in claimed], [q["sql"].split()[0] for q in context.captured_queries]))
    # The first finds two queues with work and falls back; the second knows and does not try.
    assert sequences[0][1][0] == "WITH" and sequences[1][1][0] != "WITH"
    assert sorted(q for queues, _ in sequences for q in queues) == ["a"] * 3 + ["b"] * 3
    assert sequences[0][0] == ["a", "a"]  # the weighted pick: a (weight 3) is the furthest behind
    # A full claim that finds one queue with work ends the hint: the next is one statement again.
    for _ in range(2):
        async_task("tests.tasks.noop", q_options={"queue": "c"})
        with CaptureQueriesContext(connection) as context:
            assert [r.queue for r in broker.reserve(["a", "b", "c"], 2, 30, "owner-a")] == ["c"]
    assert len(context.captured_queries) == 1


@postgresql_only
def test_a_claim_that_took_all_it_could_is_followed_by_the_full_claim(broker):
    """On a backlog the claims are transactions (concurrent one-statement claims wait longer for
    the counters' lock); once a claim takes less than it could, the next is one statement again."""
    for _ in range(3):
        async_task("tests.tasks.noop")
    broker.reserve(["default"], 1, 30, "owner-a", above=9)  # creates the counter

    def claim() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as context:
            taken = len(broker.reserve(["default"], 2, 30, "owner-a"))
        return taken, len(context.captured_queries)

    # 2 of 3 in one statement, then the last one by the transaction (BEGIN, heads, claim, COMMIT).
    assert [claim(), claim()] == [(2, 1), (1, 4)]
    async_task("tests.tasks.noop")
    assert claim() == (1, 1)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="JIT compilation is PostgreSQL's")
@pytest.mark.parametrize("dedicated", [True, False])
def test_the_pushers_claims_are_never_jit_compiled(broker, monkeypatch, dedicated):
    """A claim's generic plan guesses its LIMIT at a tenth of the ready rows the statistics count:
    with the statistics of a backlog of a few thousand jobs its cost passed ``jit_above_cost``, and
    PostgreSQL compiled both claims at every execution (30 to 60 ms each, for statements of 2 ms).
    Here ``jit_above_cost`` is 0 instead, so that any compilation shows in the plans that
    auto_explain sends back: none on a connection dedicated to the broker (the pusher's), the
    compiled claims otherwise (the server's JIT, as a worker's connection keeps it for its tasks)."""
    from django_taskmq.brokers import pooling

    monkeypatch.setattr(pooling, "_by_alias", {})  # this process's preparing state, as a new process's
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_jit_available()")
        if not cursor.fetchone()[0]:
            pytest.skip("this PostgreSQL server has no JIT compiler")
    connection.close()  # a new session: nothing said on it yet
    if dedicated:
        broker.dedicate()
    with connection.cursor() as cursor:
        for statement in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                          "SET auto_explain.log_level = notice", "SET client_min_messages = notice",
                          "SET jit = on", "SET jit_above_cost = 0"):
            cursor.execute(statement)
    plans: list[str] = []
    connection.connection.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    try:
        for _ in range(3):
            async_task("tests.tasks.noop")
        broker.reserve(["default"], 1, 30, "owner-a", above=9)  # creates the counter; claims nothing
        plans.clear()
        # The one statement (2 of 3), then the transaction's heads and claim (the last one).
        assert [len(broker.reserve(["default"], 2, 30, "owner-a")) for _ in range(2)] == [2, 1]
    finally:
        connection.close()  # auto_explain and its notices stay with this session, not the next tests'
    claims = {kind: [p for p in plans if f"Query Text: {kind}" in p] for kind in ("WITH weighted", "SELECT q.name")}
    assert [len(found) for found in claims.values()] == [1, 1]
    compiled = [kind for kind, (plan,) in claims.items() if "JIT:" in plan]
    assert compiled == ([] if dedicated else list(claims))
