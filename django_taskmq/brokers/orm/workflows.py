"""Workflows in the database: steps wait in their jobs' rows (``WAITING``) and the counts of what
they wait for live in ``WorkflowStep``, so a step becomes ready in the transaction that records the
end of its last dependency, whichever process or cluster records it, and never twice.

Every function here runs inside the caller's transaction, the one that changed the jobs' states:
:func:`ended` after jobs ended (acknowledged, failed, dead-lettered, expired, cancelled),
:func:`reopened` after jobs were replayed. Both are idempotent: a step's end is counted once
(``WorkflowStep.ended``), an edge is satisfied once (``WorkflowEdge.done``). The rules themselves
(what an end does to a dependent, a workflow's final state) are ``policy/workflow.py``'s.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from ...models import Workflow, WorkflowEdge, WorkflowStep
from ...policy import workflow as rules
from ...policy.states import Event, JobState
from ...signals import workflow_finished
from .sql import CANCEL, JOB, chunks, literal, marks, move

# The functions take the ORM broker (its alias, connection, clock and dialect) as ``broker``; not
# imported for its type, since the broker imports this module.
OrmBroker = Any

STEP = WorkflowStep._meta.db_table
EDGE = WorkflowEdge._meta.db_table
FLOW = Workflow._meta.db_table
RELEASE = move(Event.RELEASE)
REOPEN = move(Event.REOPEN)
FINAL_SQL = literal(*JobState.FINAL)
UNSUCCESSFUL_SQL = literal(*rules.UNSUCCESSFUL)
WAITING = f"'{JobState.WAITING.value}'"
STEP_COLUMNS = ("job_id", "workflow_id", "name", "waiting_for", "run_on_failure", "ended")
EDGE_COLUMNS = ("workflow_id", "upstream", "downstream", "done")


def insert(broker: OrmBroker, flow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]],
           edges: Sequence[tuple[str, str]]) -> None:
    """Store a workflow, its steps' jobs (``job`` of each step: column values) and its edges
    (upstream id, downstream id), in the caller's transaction."""
    Workflow.objects.using(broker.alias).create(open_steps=len(steps), **flow)
    columns, width, table = broker._table([s["job"] for s in steps])
    quote = broker.connection.ops.quote_name
    insert = broker.dialect.insert_many
    with broker.connection.cursor() as cursor:
        broker._resolve_times(table)
        insert(cursor, JOB, columns, width, table)
        # The bulk path of the job rows for the steps and edges too (COPY on PostgreSQL): Django's
        # bulk_create took most of a 10,000-step enqueue building and preparing model instances.
        insert(cursor, STEP, ", ".join(map(quote, STEP_COLUMNS)), len(STEP_COLUMNS),
               [[s["job"]["id"], flow["id"], s["name"], s["waiting_for"], s["run_on_failure"], False]
                for s in steps])
        insert(cursor, EDGE, ", ".join(map(quote, EDGE_COLUMNS)), len(EDGE_COLUMNS),
               [[flow["id"], upstream, downstream, False] for upstream, downstream in edges])


def ended(broker: OrmBroker, job_ids: Iterable[str]) -> None:
    """Count the end of the workflow steps among ``job_ids`` that ended and were not counted yet:
    satisfy or cancel their dependents (transitively), release the dependents left waiting for
    nothing, and end the workflows whose last step ended."""
    frontier = list(dict.fromkeys(job_ids))
    closing: collections.Counter[str] = collections.Counter()
    with broker.connection.cursor() as cursor:
        while frontier:
            ends = _uncounted_ends(cursor, frontier)
            if not ends:
                break
            _per_chunk(cursor, f"UPDATE {STEP} SET ended = %s WHERE job_id IN (?ids)", list(ends), before=[True])
            closing.update(workflow for workflow, _, _ in ends.values())
            frontier = _settle_edges(broker, cursor, {job_id: (name, state) for job_id, (_, name, state) in ends.items()})
        if closing:
            _close(broker, cursor, closing)


def _uncounted_ends(cursor: Any, job_ids: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """job id -> (workflow id, step name, final state) of the steps among ``job_ids`` that ended
    and whose end was not counted yet."""
    rows = _per_chunk(cursor, f"SELECT s.job_id, s.workflow_id, s.name, j.state FROM {STEP} s "
                              f"JOIN {JOB} j ON j.id = s.job_id "
                              f"WHERE s.job_id IN (?ids) AND s.ended = %s AND j.state IN {FINAL_SQL}",
                      job_ids, after=[False])
    return {job_id: (workflow, name, state) for job_id, workflow, name, state in rows}


def _settle_edges(broker: OrmBroker, cursor: Any, upstreams: Mapping[str, tuple[str, str]]) -> list[str]:
    """Apply the ends of ``upstreams`` (job id -> (step name, final state)) to their edges not yet
    done: satisfy them (releasing dependents left waiting for nothing) or cancel the waiting
    dependents. Return the ids of the dependents cancelled here (they ended in turn)."""
    edges = _per_chunk(cursor, f"SELECT e.id, e.upstream, e.downstream, d.run_on_failure FROM {EDGE} e "
                               f"JOIN {STEP} d ON d.job_id = e.downstream WHERE e.upstream IN (?ids) AND e.done = %s",
                       list(upstreams), after=[False])
    satisfied: list[int] = []
    cancels: dict[str, str] = {}  # dependent -> the upstream that cancels it
    for edge_id, upstream, downstream, run_on_failure in sorted(edges, key=lambda e: e[2]):
        if rules.effect(upstreams[upstream][1], bool(run_on_failure)) is rules.Effect.SATISFY:
            satisfied.append(edge_id)
        else:
            cancels.setdefault(downstream, upstream)
    _satisfy(broker, cursor, satisfied, [e[2] for e in edges if e[0] in set(satisfied)])
    return _cancel(broker, cursor, {d: (u, rules.cancel_reason(*upstreams[u])) for d, u in cancels.items()})


def _satisfy(broker: OrmBroker, cursor: Any, edge_ids: list[int], downstreams: list[str]) -> None:
    """Mark ``edge_ids`` done, take one dependency per edge off each of ``downstreams`` and release
    the steps that wait for nothing more."""
    if not edge_ids:
        return
    _per_chunk(cursor, f"UPDATE {EDGE} SET done = %s WHERE id IN (?ids)", edge_ids, before=[True])
    by_count: dict[int, list[str]] = collections.defaultdict(list)
    for downstream, count in sorted(collections.Counter(downstreams).items()):
        by_count[count].append(downstream)
    # Sorted ids, so that two transactions that satisfy edges of the same steps lock them in one order.
    for count, steps in sorted(by_count.items()):
        _per_chunk(cursor, f"UPDATE {STEP} SET waiting_for = waiting_for - %s WHERE job_id IN (?ids)", steps,
                   before=[count])
    # The step rows are locked by this transaction now: the counts read are the last ones.
    rows = _per_chunk(cursor, f"SELECT job_id FROM {STEP} WHERE job_id IN (?ids) AND waiting_for = 0",
                      sorted(set(downstreams)))
    ready = [row[0] for row in rows]
    _per_chunk(cursor, f"UPDATE {JOB} SET state = {RELEASE.to} WHERE state IN {RELEASE.sources} AND id IN (?ids)",
               ready)
    if ready:
        broker.dialect.released(broker, cursor)


def _cancel(broker: OrmBroker, cursor: Any, cancels: Mapping[str, tuple[str, str]]) -> list[str]:
    """End the waiting steps of ``cancels`` (job id -> (upstream id, reason)) CANCELLED; return
    the ids that were still waiting."""
    if not cancels:
        return []
    now, now_args = broker.clock.stamp(broker.connection)
    cancelled = []
    for job_id, (upstream, reason) in sorted(cancels.items()):
        cursor.execute(f"UPDATE {JOB} SET state = {CANCEL.to}, finished_at = {now}, error = %s "
                       f"WHERE id = %s AND state = {WAITING}", [*now_args, reason, job_id])
        if cursor.rowcount:
            cursor.execute(f"UPDATE {STEP} SET cancelled_by = %s WHERE job_id = %s", [upstream, job_id])
            cancelled.append(job_id)
    return cancelled


def _close(broker: OrmBroker, cursor: Any, closing: Mapping[str, int]) -> None:
    """Count ``closing`` (workflow id -> steps that ended) and end the workflows with none open."""
    for workflow_id, count in sorted(closing.items()):
        cursor.execute(f"UPDATE {FLOW} SET open_steps = open_steps - %s WHERE id = %s", [count, workflow_id])
    done = _per_chunk(cursor, f"SELECT id, cancelled FROM {FLOW} WHERE id IN (?ids) AND open_steps = 0",
                      sorted(closing))
    finished = []
    for workflow_id, cancelled in done:
        cursor.execute(f"SELECT j.state FROM {STEP} s JOIN {JOB} j ON j.id = s.job_id WHERE s.workflow_id = %s",
                       [workflow_id])
        state = rules.outcome([row[0] for row in cursor.fetchall()], bool(cancelled))
        Workflow.objects.using(broker.alias).filter(pk=workflow_id).update(state=state.value,
                                                                           finished_at=timezone.now())
        finished.append((workflow_id, state.value))
    if finished and workflow_finished.has_listeners():
        transaction.on_commit(lambda: [workflow_finished.send_robust(sender=Workflow, workflow_id=w, state=s)
                                       for w, s in finished], using=broker.alias)


def reopened(broker: OrmBroker, job_ids: Iterable[str]) -> None:
    """Resume the workflows of the steps among ``job_ids`` that were just replayed (QUEUED again):
    a replayed step whose dependencies are not all satisfied waits again, and the steps its end
    cancelled wait again too, transitively. A step that another dependency's failure still
    cancels is cancelled again, naming that one."""
    frontier = list(dict.fromkeys(job_ids))
    opening: collections.Counter[str] = collections.Counter()
    reopened_ids: list[str] = []
    with broker.connection.cursor() as cursor:
        first = True
        while frontier:
            rows = _per_chunk(cursor, f"SELECT job_id, workflow_id, ended FROM {STEP} WHERE job_id IN (?ids)", frontier)
            if not rows:
                break
            ids = [job_id for job_id, _, _ in rows]
            if first:  # the replayed steps themselves: QUEUED, or WAITING while they wait for something
                _per_chunk(cursor, f"UPDATE {JOB} SET state = {REOPEN.to} WHERE state = '{JobState.QUEUED.value}' "
                                   f"AND id IN (SELECT job_id FROM {STEP} WHERE waiting_for > 0 AND job_id IN (?ids))",
                           ids)
            opening.update(workflow for _, workflow, was_ended in rows if was_ended)
            _per_chunk(cursor, f"UPDATE {STEP} SET ended = %s, cancelled_by = NULL WHERE job_id IN (?ids)", ids,
                       before=[False])
            reopened_ids += ids
            # The dependents these steps' ends cancelled wait again.
            rows = _per_chunk(cursor, f"SELECT job_id FROM {STEP} WHERE cancelled_by IN (?ids)", ids)
            frontier = [row[0] for row in rows]
            _per_chunk(cursor, f"UPDATE {JOB} SET state = {REOPEN.to}, finished_at = NULL, error = '' "
                               f"WHERE state = '{JobState.CANCELLED.value}' AND id IN (?ids)", frontier)
            first = False
        for workflow_id, count in sorted(opening.items()):
            cursor.execute(f"UPDATE {FLOW} SET open_steps = open_steps + %s, state = %s, finished_at = NULL, "
                           f"cancelled = %s WHERE id = %s",
                           [count, rules.WorkflowState.RUNNING.value, False, workflow_id])
        # A reopened step may wait for another step that ended badly (and still stands): that one
        # cancels it again.
        rows = _per_chunk(cursor, f"SELECT DISTINCT u.id, us.name, u.state FROM {EDGE} e "
                                  f"JOIN {JOB} u ON u.id = e.upstream JOIN {STEP} us ON us.job_id = e.upstream "
                                  f"WHERE e.downstream IN (?ids) AND e.done = %s AND u.state IN {UNSUCCESSFUL_SQL}",
                          reopened_ids, after=[False])
        failed = {job_id: (name, state) for job_id, name, state in rows}
        cancelled = _settle_edges(broker, cursor, failed) if failed else []
    if cancelled:
        ended(broker, cancelled)


def _per_chunk(cursor: Any, sql: str, ids: Sequence, before: Sequence = (), after: Sequence = ()) -> list:
    """Run ``sql`` once per chunk of ``ids`` (the database's limit on parameters), its ``?ids`` the
    chunk's placeholders and its parameters ``before``, the chunk, ``after``; return the rows a
    SELECT read, in order (nothing for other statements)."""
    rows: list = []
    for part in chunks(list(ids)):
        cursor.execute(sql.replace("?ids", marks(len(part))), [*before, *part, *after])
        if cursor.description is not None:
            rows += cursor.fetchall()
    return rows
