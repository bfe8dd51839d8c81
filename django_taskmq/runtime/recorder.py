"""Recording outcomes: the monitor's work, shared with sync mode.

Successes of a batch are acknowledged in one transaction; other outcomes are rare and go one by
one. Hooks, cached results, chains and signals cost a query only when a job has them or someone
listens. Each final outcome is counted in the throughput rollup (``Broker.count_outcomes``) and
timed in the timing rollup (``Broker.time_outcomes``) in the transaction that records it, so the
dashboard's throughput and histograms do not depend on job rows that retention and ``save_limit``
delete; a lone success recorded outside any transaction (an idle cluster's, one statement that
commits by itself) is counted and timed by the statements right after it.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Sequence

from django.db import InterfaceError, OperationalError

from ..observability import joblog, reporting
from . import cached_results, legacy_chains
from . import execution as ex
from ..brokers.base import Ack, Broker
from ..brokers.clock import as_datetime
from ..conf import Settings
from ..exceptions import LeaseLost, UnreadableResult
from .loading import resolve
from ..models import _from_epoch
from ..policy.backoff import Retry
from ..policy.connections import disconnect
from ..policy import throughput as throughput_policy
from ..policy.states import JobState
from ..policy.storable import clip_head, clip_tail
from ..signals import post_execute
from ..envelope import SealedResult, verify_result

logger = logging.getLogger(__name__)

FINAL = frozenset(s.value for s in JobState.FINAL)

# Errors that mean the database itself is away (a restart, a lost connection), not that one
# outcome cannot be stored: the whole batch is retried by the caller.
DATABASE_AWAY = (OperationalError, InterfaceError)


def _away(exc: BaseException) -> bool:
    """The database is away, or the connection must be replaced (a server that is no longer the
    primary answers writes with an InternalError, 25006): not this outcome's fault."""
    return isinstance(exc, DATABASE_AWAY) or disconnect(exc) is not None


def _dt(epoch: float) -> datetime.datetime | None:
    return _from_epoch(epoch or None)


def _retry_policy(outcome: ex.Outcome, settings: Settings) -> Retry:
    spec = (outcome.envelope.options.get("retry") if outcome.envelope else None)
    return Retry.from_dict(spec) if spec else settings.retry


def _acks_failure(outcome: ex.Outcome, settings: Settings) -> bool:
    value = outcome.envelope.options.get("ack_failure") if outcome.envelope else None
    return settings.ack_failures if value is None else value


def record(outcomes: Sequence[ex.Outcome], broker: Broker, settings: Settings, *,
           outside_transaction: bool = False, bookkeeping: bool = False) -> list[tuple[ex.Outcome, str]]:
    """Record outcomes with the broker; return (outcome, final state) for those that ended.

    Final states are "SUCCEEDED", "FAILED", "DEAD" and "CANCELLED"; a lost lease is logged and skipped (the
    message belongs to another delivery now). Each outcome is recorded in its own savepoint: one
    that cannot be stored fails its own job with the reason and leaves the others as they are.
    Only an error of the database itself (it is away) propagates, so the caller can retry.
    ``outside_transaction``: the caller holds no transaction (the cluster's processes), so a lone
    success is acknowledged by one statement that commits by itself. ``bookkeeping``: the
    cluster records (the monitor, a worker): the commits are :meth:`Broker.bookkeeping`'s (with
    ``TASKMQ['durable_outcomes']`` False they need not wait for the disk flush); what runs after
    them (hooks, signals) is not.
    """
    finals: list[tuple[ex.Outcome, str]] = []
    outcomes = [_storable(o) for o in outcomes]
    successes = [o for o in outcomes if o.status == ex.SUCCESS]
    # Plain successes (the usual batch) are acknowledged in one transaction of their own: an outer
    # one would only add a savepoint and its release, a round trip each on PostgreSQL.
    acks_only = len(successes) == len(outcomes) and not any(legacy_chains.chained(o) or _step(o) for o in successes)
    with (broker.bookkeeping() if bookkeeping else contextlib.nullcontext(),
          contextlib.nullcontext() if acks_only else broker.atomic()):
        if successes:
            finals += _ack(successes, broker, settings,
                           lone=acks_only and outside_transaction and len(successes) == 1)
        others = []  # (outcome, state after it: final or not, None if its lease was lost)
        for o in outcomes:
            if o.status != ex.SUCCESS:
                state = _isolated(o, broker, settings, counted(broker, lambda o: _record_other(o, broker, settings)))
                others.append((o, state))
                if state is not None and state in FINAL:
                    finals.append((o, state))
        # A package queued before 0.2 with a "chain": the rest of its chain becomes a workflow in
        # the transaction that acknowledges it (see legacy_chains), so nobody sees the ack without
        # it and it is queued once. One that cannot be queued rolls back only its savepoint.
        for o, state in finals:
            if state == "SUCCEEDED" and legacy_chains.chained(o):
                try:
                    with broker.atomic(write=True):
                        legacy_chains.queue_rest(o, broker, settings)
                except Exception:
                    logger.exception("could not queue the rest of the chain of job %s", o.reservation.job_id)
        # A workflow step's end is counted in the same transaction: its dependents are released
        # (or cancelled) with it or not at all, whoever records it.
        steps = [o.reservation.job_id for o, _ in finals if _step(o)]
        if steps:
            broker.workflow_ended(steps)
    # Everything below runs after the outcomes are committed; its failures are logged, never raised.
    try:
        joblog.outcomes([*((o, s) for o, s in finals if s == "SUCCEEDED"), *others])
    except Exception:
        logger.exception("logging the outcomes failed")
    if settings.error_reporter is not None:
        # What the worker could not report (its process was killed or died), now that it is recorded.
        for o, state in others:
            if state is not None and o.status in (ex.TIMEOUT, ex.CRASH):
                reporting.lost(o.reservation, o.envelope, o.status.value, o.error, state,
                               settings.name, settings.error_reporter)
    # (job_dead is sent by the broker for every path into the DLQ.)
    if post_execute.has_listeners():
        for o in outcomes:
            post_execute.send_robust(sender=record, job_id=o.reservation.job_id,
                                     func=o.envelope.func if o.envelope else None, status=o.status,
                                     result=_value(o, settings), error=o.error)
    try:
        _run_hooks(finals, broker, settings)
    except Exception:
        logger.exception("running hooks failed")
    return finals


def plain_success(o: ex.Outcome) -> bool:
    """True when recording ``o`` is one acknowledgement (and ``post_execute``): a success with no
    chain, hook, cached result or workflow. A worker records those itself when it is idle (see
    :mod:`.cluster.worker`); the rest is the monitor's."""
    if o.status != ex.SUCCESS:
        return False
    options = o.envelope.options if o.envelope else {}
    # ("chain": a package queued before 0.2, see legacy_chains.)
    return not (options.get("chain") or options.get("hook") or options.get("cached") or options.get("workflow"))


def _step(o: ex.Outcome) -> bool:
    return bool(o.envelope and o.envelope.options.get("workflow"))


def _storable(o: ex.Outcome) -> ex.Outcome:
    """Return ``o`` with error and traceback text that every engine can store (NUL, surrogates, size)."""
    error, traceback = clip_head(o.error or ""), clip_tail(o.traceback or "")
    if error == o.error and traceback == o.traceback:
        return o
    return o._replace(error=error, traceback=traceback)


def _value(o: ex.Outcome, settings: Settings):
    """Return the result value of ``o`` (results travel signed from the workers)."""
    if isinstance(o.result, SealedResult):
        try:
            return verify_result(o.result, settings.name)
        except UnreadableResult:
            return None
    return o.result


def _ack(successes: list[ex.Outcome], broker: Broker, settings: Settings,
         lone: bool = False) -> list[tuple[ex.Outcome, str]]:
    """Acknowledge successes in one statement; if that fails on one row, one by one.

    ``lone``: one success and no transaction around: its statement needs no savepoint or
    transaction of its own (a failed statement undoes itself), saving two round trips.
    """
    def acks(items):
        return [Ack(o.reservation, o.result if _saves(o) else None, _dt(o.started_at), _dt(o.finished_at))
                for o in items]

    try:
        with contextlib.nullcontext() if lone else broker.atomic():
            lost = {r.job_id for r in broker.ack_many(acks(successes))}
            acked = [(o, "SUCCEEDED") for o in successes if o.reservation.job_id not in lost]
            if not lone:
                count(broker, acked)
    except Exception as exc:
        if _away(exc):
            raise
        logger.warning("acknowledging %d job(s) at once failed; acknowledging them one by one", len(successes),
                       exc_info=True)
        finals = []
        for o in successes:
            if _isolated(o, broker, settings, counted(broker, lambda o: _ack_one(o, broker, acks))) == "SUCCEEDED":
                finals.append((o, "SUCCEEDED"))
        return finals
    if lone:
        try:  # the ack has committed: a count that fails now is logged, the outcome stands
            count(broker, acked)
        except Exception as exc:
            if _away(exc):
                raise
            logger.exception("could not count job %s in the throughput rollup", successes[0].reservation.job_id)
    for o in successes:
        if o.reservation.job_id in lost:
            logger.warning("job %s finished after its lease was lost; not recorded", o.reservation.job_id,
                           extra=_fields(o))
    return acked


def count(broker: Broker, finals: Sequence[tuple[ex.Outcome, str]]) -> None:
    """Add final outcomes to the throughput rollup, by the slot of their finish time and their
    queue, and their wait and run times to the timing rollup (the histograms), by task too."""
    if finals:
        finished = [(as_datetime(o.finished_at if isinstance(o.finished_at, (int, float)) and o.finished_at
                                 else time.time()), o, state) for o, state in finals]
        broker.count_outcomes(throughput_policy.tally((at, o.reservation.queue, state) for at, o, state in finished))
        broker.time_outcomes({o.reservation.job_id: at for at, o, state in finished
                              if state == "SUCCEEDED" or state in throughput_policy.FAILED})


def counted(broker: Broker, store: Callable[[ex.Outcome], str | None]) -> Callable[[ex.Outcome], str | None]:
    """``store``, then the outcome counted in the rollup when it ended (in ``store``'s savepoint)."""
    def stored(o: ex.Outcome) -> str | None:
        state = store(o)
        if state is not None and state in FINAL:
            count(broker, [(o, state)])
        return state

    return stored


def _saves(o: ex.Outcome) -> bool:
    """False when the job asked to keep no result in the database (``save=False``)."""
    return not (o.envelope is not None and o.envelope.options.get("save") is False)


def _ack_one(o: ex.Outcome, broker: Broker, acks) -> str | None:
    if o.status != ex.SUCCESS:  # the fallback of an unstorable success
        return None
    broker.ack_many(acks([o]))
    return "SUCCEEDED"


def _isolated(o: ex.Outcome, broker: Broker, settings: Settings, store) -> str | None:
    """Run ``store(o)`` in a savepoint; if it fails, record ``o`` as a failure saying why.

    Returns the state afterwards, or None (lease lost, or nothing could be stored).
    """
    try:
        with broker.atomic():
            return store(o)
    except LeaseLost:
        logger.warning("job %s: lease lost before its %s was recorded", o.reservation.job_id, o.status,
                       extra=_fields(o))
        return None
    except Exception as exc:
        if _away(exc):
            raise
        reason = f"outcome could not be stored: {ex.describe(exc)}"
        logger.error("job %s: %s; recorded as a failure", o.reservation.job_id, reason, extra=_fields(o))
        times = [t if isinstance(t, (int, float)) else 0.0 for t in (o.started_at, o.finished_at)]
        failed = o._replace(status=ex.UNSTORABLE, result=None, error=clip_head(reason), traceback="",
                            started_at=times[0], finished_at=times[1])
    try:
        with broker.atomic():
            return counted(broker, lambda o: _record_other(o, broker, settings))(failed)
    except LeaseLost:
        return None
    except Exception as exc:
        if _away(exc):
            raise
        logger.exception("job %s: not even its failure could be stored; its lease will bring it back",
                         o.reservation.job_id, extra=_fields(o))
        return None


def _fields(o: ex.Outcome) -> dict:
    return joblog.fields(o.reservation, o.envelope.func if o.envelope else None)


def _record_other(o: ex.Outcome, broker: Broker, settings: Settings) -> str | None:
    """Record ``o``; return the job's state afterwards (None: the lease was lost)."""
    r = o.reservation
    started = _dt(o.started_at)
    if o.status == ex.DEFER:
        return JobState.QUEUED.value if broker.defer(r, o.delay or 0) else None
    if o.status == ex.SUSPEND:  # a durable task sleeps or waits (CANCELLED if that was requested)
        wake_at, signal = o.result
        suspended = broker.suspend(r, wake_at, signal)
        return suspended.value if suspended is not None else None
    if o.status == ex.REJECT:
        broker.dead_letter(r, o.error or "rejected", o.error, o.traceback, started_at=started)
        return "DEAD"
    if o.status == ex.CANCELLED:  # stopped on request: never retried, whatever its deliveries
        ended = broker.end_cancelled(r, o.error, o.traceback, started, _dt(o.finished_at))
        return "CANCELLED" if ended else None
    if o.status in (ex.FAILURE, ex.UNSTORABLE) and _acks_failure(o, settings):
        broker.fail(r, o.error, o.traceback, started, _dt(o.finished_at))
        return "FAILED"
    # A failed delivery: raised, asked to retry, timed out or crashed its worker. The broker's
    # poison guard decides between RETRYING and DEAD. An unstorable result is not retried: a
    # re-run would return it again.
    requeue = o.status != ex.UNSTORABLE
    delay = o.delay if o.delay is not None else _retry_policy(o, settings).delay(r.deliveries)
    state = broker.settle(r, requeue=requeue, delay=delay, error=o.error, traceback=o.traceback, started_at=started)
    return state.value if state is not None else None


def _run_hooks(finals: list[tuple[ex.Outcome, str]], broker: Broker, settings: Settings) -> None:
    """Cache the results that asked for it, then run the hooks (a hook may read the cached result)."""
    wanted = {}
    cached = []
    for o, state in finals:
        options = o.envelope.options if o.envelope else {}
        hooks = [options.get("hook")] + ([options.get("on_dead")] if state == "DEAD" else [])
        hooks = [h for h in hooks if h]
        if hooks:
            wanted[o.reservation.job_id] = hooks
        if options.get("cached"):
            cached.append((o, options["cached"]))
    if not wanted and not cached:
        return
    jobs = broker.jobs([*wanted, *(o.reservation.job_id for o, _ in cached)])
    for o, timeout in cached:
        job = jobs.get(o.reservation.job_id)
        if job is None:
            continue
        try:  # one by one: a record the cache refuses (too large, say) must not cost its neighbours theirs
            cached_results.store([(job, o.result if o.status == ex.SUCCESS else None, timeout)], settings)
        except Exception:
            logger.exception("caching the result of job %s failed", job.pk)
    for job_id, hooks in wanted.items():
        for hook in hooks:
            try:
                resolve(hook)(jobs[job_id])
            except Exception:
                logger.exception("hook %s of job %s failed", hook, job_id)
