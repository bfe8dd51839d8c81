"""What a workflow step's dependencies returned: ``current_job().upstream`` reads it here.

Apart from :mod:`.workflows`, which builds and queues workflows (the producer side), so that the
worker side (``progress``, ``execution``) does not import the producer's.
"""

from __future__ import annotations

from typing import Any

from ..conf import get_settings
from ..models import Job, State, WorkflowEdge, WorkflowStep


def upstream_results(job_id: str) -> dict[str, Any]:
    """The results of the direct dependencies of the step ``job_id``, by step name (None for one
    that did not succeed: a ``run_on_failure`` step sees its failed dependencies so)."""
    alias = get_settings().database
    names = dict(WorkflowStep.objects.using(alias).filter(
        job_id__in=WorkflowEdge.objects.using(alias).filter(downstream=job_id).values("upstream")
    ).values_list("job_id", "name"))
    jobs = Job.objects.using(alias).in_bulk(list(names))
    return {name: (jobs[j].result if j in jobs and jobs[j].state == State.SUCCEEDED else None)
            for j, name in sorted(names.items())}
