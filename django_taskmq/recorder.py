"""Recording outcomes: the monitor's work, shared with sync mode.

Successes of a batch are acknowledged in one transaction; other outcomes are rare and go one by
one. Hooks, chains and signals cost a query only when a job has them or someone listens.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence

from django.db import transaction

from . import execution as ex
from .brokers.base import Ack
from .conf import Settings
from .exceptions import LeaseLost
from .models import _from_epoch
from .policy.backoff import Retry

logger = logging.getLogger(__name__)


def _dt(epoch: float) -> datetime.datetime | None:
    return _from_epoch(epoch or None)


def _retry_policy(outcome: ex.Outcome, settings: Settings) -> Retry:
    spec = (outcome.envelope.options.get("retry") if outcome.envelope else None)
    return Retry.from_dict(spec) if spec else settings.retry


def _acks_failure(outcome: ex.Outcome, settings: Settings) -> bool:
    value = outcome.envelope.options.get("ack_failure") if outcome.envelope else None
    return settings.ack_failures if value is None else value


def record(outcomes: Sequence[ex.Outcome], broker, settings: Settings) -> list[tuple[ex.Outcome, str]]:
    """Record outcomes with the broker; return (outcome, final state) for those that ended.

    Final states are "SUCCEEDED", "FAILED" and "DEAD"; a lost lease is logged and skipped (the
    message belongs to another delivery now).
    """
    from .signals import post_execute

    finals: list[tuple[ex.Outcome, str]] = []
    successes = [o for o in outcomes if o.status == ex.SUCCESS]
    with transaction.atomic(using=broker.alias):
        if successes:
            lost = {r.job_id for r in broker.ack_many(
                Ack(o.reservation, o.result, _dt(o.started_at), _dt(o.finished_at)) for o in successes
            )}
            for o in successes:
                if o.reservation.job_id in lost:
                    logger.warning("job %s finished after its lease was lost; not recorded", o.reservation.job_id)
                else:
                    finals.append((o, "SUCCEEDED"))
        for o in outcomes:
            if o.status == ex.SUCCESS:
                continue
            try:
                state = _record_other(o, broker, settings)
            except LeaseLost:
                logger.warning("job %s: lease lost before its %s was recorded", o.reservation.job_id, o.status)
                continue
            if state:
                finals.append((o, state))
        # A chain's next link is queued in the transaction that acknowledges its predecessor:
        # a monitor killed in between cannot lose the rest of the chain, and nobody (a burst
        # cluster deciding whether it is done) sees the ack without the next link. A link that
        # cannot be queued rolls back only its savepoint and is logged.
        for o, state in finals:
            if state == "SUCCEEDED" and o.envelope and o.envelope.options.get("chain"):
                try:
                    with transaction.atomic(using=broker.alias):
                        _next_link(o)
                except Exception:
                    logger.exception("could not queue the next link of job %s", o.reservation.job_id)
    # Everything below runs after the outcomes are committed; its failures are logged, never raised.
    # (job_dead is sent by the broker for every path into the DLQ.)
    if post_execute.has_listeners():
        for o in outcomes:
            post_execute.send_robust(sender=record, job_id=o.reservation.job_id,
                                     func=o.envelope.func if o.envelope else None, status=o.status,
                                     result=o.result, error=o.error)
    try:
        _run_hooks(finals, broker)
    except Exception:
        logger.exception("running hooks failed")
    return finals


def _record_other(o: ex.Outcome, broker, settings: Settings) -> str | None:
    r = o.reservation
    if o.status == ex.DEFER:
        broker.defer(r, o.delay or 0)
        return None
    if o.status == ex.REJECT:
        broker.dead_letter(r, o.error or "rejected", o.error, o.traceback)
        return "DEAD"
    if o.status == ex.FAILURE and _acks_failure(o, settings):
        broker.fail(r, o.error, o.traceback, _dt(o.started_at), _dt(o.finished_at))
        return "FAILED"
    # A failed delivery: raised, asked to retry, timed out or crashed its worker.
    if r.deliveries >= r.max_deliveries:
        broker.nack(r, True, 0, o.error, o.traceback)
        return "DEAD"
    delay = o.delay if o.delay is not None else _retry_policy(o, settings).delay(r.deliveries)
    broker.nack(r, True, delay, o.error, o.traceback)
    return None


def _next_link(o: ex.Outcome) -> None:
    from .api import async_task

    chain = list(o.envelope.options["chain"])
    func, args, kwargs, options = chain[0]
    options = dict(options)
    if len(chain) > 1:
        options["chain"] = chain[1:]
    async_task(func, *args, q_options=options, **kwargs)


def _run_hooks(finals: list[tuple[ex.Outcome, str]], broker) -> None:
    from .models import Job

    wanted = {}
    for o, state in finals:
        options = o.envelope.options if o.envelope else {}
        hooks = [options.get("hook")] + ([options.get("on_dead")] if state == "DEAD" else [])
        hooks = [h for h in hooks if h]
        if hooks:
            wanted[o.reservation.job_id] = hooks
    if not wanted:
        return
    jobs = Job.objects.using(broker.alias).in_bulk(list(wanted))
    for job_id, hooks in wanted.items():
        for hook in hooks:
            try:
                ex.resolve(hook)(jobs[job_id])
            except Exception:
                logger.exception("hook %s of job %s failed", hook, job_id)
