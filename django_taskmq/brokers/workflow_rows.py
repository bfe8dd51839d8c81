"""The rows of a workflow as :meth:`Broker.enqueue_workflow` stores them: one job per step (waiting
when it has dependencies), its step record, and the edges between the steps' jobs.

Shared by :class:`~django_taskmq.workflows.Workflow` and the fallback for chains queued by release
0.1 (:mod:`.legacy_chains`), which the recorder runs and which must not import the producer side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..policy.ids import new_id
from ..options import JobTemplate
from ..policy.states import JobState


class StepCall(NamedTuple):
    """One step to store: its call (``template`` stamped with ``args`` and ``kwargs``) and what it waits for."""

    template: JobTemplate  # its options carry the workflow's id
    args: tuple
    kwargs: dict
    after: tuple[str, ...]  # names of the steps it waits for
    run_on_failure: bool


def rows(steps: Mapping[str, StepCall], trace: dict | None = None) -> tuple[dict[str, str], list[dict], list[tuple]]:
    """Return the job id of each step (by name), the step rows and the edges of ``steps``."""
    ids = {name: new_id() for name in steps}
    stored: list[dict[str, Any]] = []
    edges: list[tuple[str, str]] = []
    for name, step in steps.items():
        job = step.template.values(step.args, step.kwargs, trace)
        job["id"] = ids[name]
        if step.after and job["state"] == JobState.QUEUED.value:
            job["state"] = JobState.WAITING.value
        stored.append({"job": job, "name": name, "waiting_for": len(step.after), "run_on_failure": step.run_on_failure})
        edges += [(ids[upstream], ids[name]) for upstream in step.after]
    return ids, stored, edges

