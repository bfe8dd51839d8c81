"""How far back the admin looks for what no index finds: the newest :data:`WINDOW` jobs.

A search for a part of a task name, or a filter on the cluster label, cannot use an index: on a
table of ten million jobs it would read all of them (seconds) whenever the term is rare. Job ids
grow with time, so "the newest jobs" is a range of the primary key: the search reads at most
:data:`WINDOW` rows, whatever the table holds. Exact matches (a job id, a group, a live
idempotency key) are found in the whole table through their indexes.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

#: Jobs, newest first, that a search by task name or a filter on the cluster reads at most.
WINDOW = 20_000


def newest(queryset: QuerySet) -> Q:
    """The condition "among the newest :data:`WINDOW` jobs" of ``queryset``'s job table (by id);
    empty when the table holds fewer."""
    model = queryset.model
    field = "pk" if model._meta.model_name == "job" else "job_id"
    ids = model._default_manager.db_manager(queryset.db).order_by(f"-{field}").values_list(field, flat=True)
    oldest = ids[WINDOW - 1:WINDOW].first()
    return Q() if oldest is None else Q(**{f"{field}__gte": oldest})
