"""Batches: jobs queued together, with callbacks that run once when they have all ended.

::

    batch = Batch(on_success="app.tasks.mail_report", on_discard="app.tasks.page_someone")
    for row in rows:
        batch.add("app.tasks.import_row", row.pk, queue="imports")
    batch_id = batch.enqueue()

A batch is a :class:`~django_taskmq.Workflow` underneath: its jobs are steps that wait for nothing,
and one more step, the batch's *finisher*, waits for all of them with ``run_on_failure``, so the
database starts it in the transaction that records the end of the batch's last job, whichever
cluster records it. The finisher counts the jobs' end states and queues each callback that applies
as a job of its own, under an idempotency key of the batch, so a finisher that runs twice (its
worker killed after it queued them) queues each callback once.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .api import async_task
from .exceptions import ConfigError
from .options import func_path
from .tasks import task
from .workflows import Workflow, workflow

__all__ = ["Batch", "BatchInfo", "batch"]

#: The step name of a batch's finisher (a job's is ``job-1``, ``job-2``, ...).
FINISHER = "#finish"
CALLBACKS = ("on_success", "on_finish", "on_discard")
DISCARDED = frozenset({"DEAD", "FAILED"})  # ended for good without success: on_discard runs


class Batch:
    """Jobs to queue at once with :meth:`enqueue` (all of them or none), and callbacks for their end.

    Each callback is a task path, a function or a ``@task``, called as a job of its own with the
    batch's outcome (a dict: ``id``, ``name``, ``total``, ``counts`` of the jobs per end state):

    * ``on_finish`` once every job has ended, however;
    * ``on_success`` once every job has ended ``SUCCEEDED``;
    * ``on_discard`` once every job has ended and at least one ended ``DEAD`` or ``FAILED``.

    A job that expired or was cancelled counts for neither ``on_success`` nor ``on_discard``.
    """

    def __init__(self, on_success: Callable | str | None = None, on_finish: Callable | str | None = None,
                 on_discard: Callable | str | None = None, name: str = "") -> None:
        given = {"on_success": on_success, "on_finish": on_finish, "on_discard": on_discard}
        self.callbacks = {kind: func_path(value, kind) for kind, value in given.items() if value is not None}
        self._workflow = Workflow(name=name or "batch")
        #: The batch's id (its workflow's), known before it is queued.
        self.id = self._workflow.id
        self.name = name

    def add(self, func: Callable | str, *args: Any, **kwargs: Any) -> str:
        """Add ``func(*args, **kwargs)`` with the options :func:`~django_taskmq.async_task` takes
        (as keywords, or in ``q_options``); return its name in the batch (``job-1``, ...)."""
        if self._workflow.queued:
            raise ConfigError(f"batch {self.id} was queued already; build a new Batch to queue more jobs")
        return self._workflow.add(func, *args, name=f"job-{len(self._workflow.steps) + 1}", **kwargs)

    def enqueue(self, sync: bool | None = None) -> str:
        """Queue every job and the finisher in one transaction; return the batch's id.

        Raises :class:`~django_taskmq.ConfigError` for an empty batch. With ``sync`` (default:
        ``TASKMQ['sync']``) the jobs and then the callbacks run here before this returns.
        """
        jobs = list(self._workflow.steps)
        if not jobs:
            raise ConfigError("a batch needs at least one job (Batch.add) before enqueue()")
        if not self._workflow.queued:
            self._workflow.add_call(finish_batch, (self.id, self.name, self.callbacks), name=FINISHER,
                                    after=jobs, run_on_failure=True)
        return self._workflow.enqueue(sync)


def outcome(batch_id: str, name: str = "") -> dict[str, Any]:
    """The outcome a batch's callbacks get: its id, name, number of jobs and their counts per state."""
    info = workflow(batch_id)
    states = [] if info is None else [s.state for n, s in info.steps.items() if n != FINISHER]
    return {"id": batch_id, "name": name, "total": len(states), "counts": dict(collections.Counter(states))}


def callbacks_due(counts: dict[str, int], total: int) -> list[str]:
    """The callbacks that apply to a batch whose jobs ended with ``counts`` (all ``total`` of them)."""
    due = ["on_finish"]
    if counts.get("SUCCEEDED", 0) == total:
        due.append("on_success")
    if any(counts.get(state, 0) for state in DISCARDED):
        due.append("on_discard")
    return due


@task
def finish_batch(batch_id: str, name: str, callbacks: dict[str, str]) -> dict[str, Any]:
    """The finisher of a batch: queue each callback that applies, once (an idempotency key per
    batch and callback), with the batch's outcome; return the outcome."""
    result = outcome(batch_id, name)
    for kind in callbacks_due(result["counts"], result["total"]):
        if kind in callbacks:
            async_task(callbacks[kind], result, key=f"taskmq-batch:{batch_id}:{kind}")
    return result


@dataclass(frozen=True)
class BatchInfo:
    """A batch as :func:`batch` reads it: ``finished`` once its finisher ran (its callbacks are queued)."""

    id: str
    name: str
    total: int
    counts: dict[str, int]
    finished: bool
    job_ids: tuple[str, ...]


def batch(batch_id: str) -> BatchInfo | None:
    """Return the state of the batch ``batch_id`` (its jobs' counts per state), or None."""
    info = workflow(batch_id)
    if info is None or FINISHER not in info.steps:
        return None
    finisher = info.steps[FINISHER]
    jobs = [s for n, s in info.steps.items() if n != FINISHER]
    counts = dict(collections.Counter(s.state for s in jobs))
    return BatchInfo(batch_id, info.name, len(jobs), counts, finisher.state == "SUCCEEDED",
                     tuple(s.job_id for s in jobs))
