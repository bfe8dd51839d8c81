"""The fallback, for this release only, for packages queued with a ``chain`` key.

Until 0.2 the django-q2 compat ``async_task(..., chain=[...])`` and ``qimport_djangoq`` put the
links after a job in its package, and the recorder queued the next link after each success (links
after a failure were never created). Chains are workflows now (``Chain`` in :mod:`django_taskmq.workflows`). A package of the
old format still waiting in a queue runs its chain once: when its job succeeds, the rest of the
chain is queued as one workflow in the transaction that acknowledges it, so a link that fails from
then on ends the links after it CANCELLED, as every chain's. A job that fails for good ends its
chain there, as before. Each such package logs a warning. This module goes in 0.3.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..brokers import workflow_rows
from ..brokers.base import Broker
from ..conf import Settings
from .execution import Outcome
from ..policy.ids import new_id
from ..options import JobTemplate

logger = logging.getLogger(__name__)

#: The name of the workflows this fallback queues (shown in the admin).
NAME = "chain (queued before 0.2)"


def chained(outcome: Outcome) -> bool:
    """Whether ``outcome``'s package holds the old ``chain`` key."""
    return bool(outcome.envelope and outcome.envelope.options.get("chain"))


def queue_rest(outcome: Outcome, broker: Broker, settings: Settings) -> str:
    """Queue the links after ``outcome``'s job (it succeeded) as a workflow, in the caller's
    transaction; return the workflow's id."""
    assert outcome.envelope is not None
    links: Sequence[Sequence[Any]] = outcome.envelope.options["chain"]
    workflow_id = new_id()
    steps = {}
    for number, (func, args, kwargs, options) in enumerate(links, 1):
        step_options = {k: v for k, v in options.items() if k != "sync"}  # a workflow decides when its steps run
        template = JobTemplate(func, {**step_options, "workflow": workflow_id}, settings)
        after = (f"link-{number - 1}",) if number > 1 else ()
        steps[f"link-{number}"] = workflow_rows.StepCall(template, tuple(args), dict(kwargs), after, False)
    # The links join the trace of the chain's first enqueue, as the next link always did.
    trace = outcome.envelope.options.get("trace") if settings.opentelemetry else None
    ids, rows, edges = workflow_rows.rows(steps, trace)
    broker.enqueue_workflow({"id": workflow_id, "name": NAME}, rows, edges)
    logger.warning("job %s was queued with a 'chain' in its package (before release 0.2): its %d next link(s) "
                   "are queued as workflow %s, first job %s; re-queue such chains with Chain or async_chain, "
                   "this fallback goes in 0.3", outcome.reservation.job_id, len(links), workflow_id, ids["link-1"])
    return workflow_id
