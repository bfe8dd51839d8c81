"""List filters whose choices cost no scan of the job table.

Django's default filter of a field lists its distinct values, one ``SELECT DISTINCT`` over the
whole table per page view; these take their choices from the settings (queues), the code (states,
priorities, reason kinds) or the small heartbeat table (clusters, what the workers execute), or
are a text box (group, workflow).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import connections
from django.db.models import CharField, F, Func, Q, QuerySet
from django.utils.translation import gettext_lazy as _

from ..observability import statistics
from ..conf import get_settings
from ..models import Cluster, State
from ..policy.priority import MAX_PRIORITY, MIN_PRIORITY
from .window import newest


class ValueFilter(admin.SimpleListFilter):
    """Filter on one field's exact value, from a fixed list of choices."""

    field = ""

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value not in (None, "") else queryset


class QueueFilter(ValueFilter):
    title = _("queue")
    parameter_name = field = "queue"

    def lookups(self, request, model_admin):
        return [(name, name) for name in sorted(get_settings().queues)]


class PriorityFilter(ValueFilter):
    title = _("priority")
    parameter_name = field = "priority"

    def lookups(self, request, model_admin):
        return [(str(p), str(p)) for p in range(MAX_PRIORITY, MIN_PRIORITY - 1, -1)]


class ClusterFilter(ValueFilter):
    """The cluster labels (``Job.cluster``) of the heartbeat table."""

    title = _("cluster")
    parameter_name = field = "cluster"

    def lookups(self, request, model_admin):
        names = Cluster.objects.order_by("name").values_list("name", flat=True).distinct()
        return [(name, name) for name in names]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        # No index on the label: among the newest jobs only (see admin/window.py).
        value = self.value()
        return queryset.filter(newest(queryset), cluster=value) if value not in (None, "") else queryset


#: The choices of :class:`ExecutionFilter`: RUNNING jobs a worker executes, and the others.
EXECUTING, RESERVED = "executing", "reserved"


def executing_now(alias: str) -> set[str]:
    """The ids of the jobs the workers of the clusters alive execute (their heartbeats)."""
    return statistics.executing_ids(statistics.clusters_alive(alias, with_task_names=False))


class ExecutionFilter(admin.SimpleListFilter):
    """RUNNING jobs split as the operator means it: started on a worker, or reserved by a cluster
    (prefetched) and not started. The stored state is RUNNING for both; the clusters' heartbeats
    say which jobs their workers execute (a few ids, so the filter is an ``IN`` on the primary key
    beside the state index)."""

    title = _("running or reserved")
    parameter_name = "execution"

    def lookups(self, request, model_admin):
        return [(EXECUTING, _("running (started on a worker)")), (RESERVED, _("reserved by a cluster, not started"))]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value not in (EXECUTING, RESERVED):
            return queryset
        started = Q(pk__in=executing_now(queryset.db))
        return queryset.filter(started if value == EXECUTING else ~started, state=State.RUNNING)


#: A state with more jobs than this is "common": see :class:`StateFilter`.
COMMON = 10_000


class StateFilter(admin.ChoicesFieldListFilter):
    """The state filter (``state__exact``), which on SQLite lists a common state by walking the
    primary key.

    The list is newest first (``ORDER BY id DESC``). SQLite has no statistics, so for ``state = ?``
    it always takes the index of states and then sorts every job of the state to find the newest
    50: beside 289,000 successes the page took 154 ms, and it grows with the table. For a state
    with more than :data:`COMMON` jobs the condition is written ``+state = ?`` (SQLite's way of
    saying "not through an index"): SQLite then reads the primary key from the newest id down and
    stops at the page's last row. A rarer state keeps its index, since walking the whole table to
    find a handful would cost more than sorting them. PostgreSQL and MySQL choose by their
    statistics.
    """

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        values = self.used_parameters.get(self.lookup_kwarg)
        if (connections[queryset.db].vendor == "sqlite" and set(self.used_parameters) == {self.lookup_kwarg}
                and isinstance(values, list) and len(values) == 1 and values[0] in State.values
                and queryset.filter(state=values[0]).order_by()[:COMMON + 1].count() > COMMON):
            unindexed = Func(F("state"), template="+%(expressions)s", output_field=CharField())
            return queryset.alias(unindexed_state=unindexed).filter(unindexed_state=values[0])
        return super().queryset(request, queryset)


class InputFilter(admin.SimpleListFilter):
    """A text box instead of a list of choices (values too many to list)."""

    template = "admin/django_taskmq/input_filter.html"
    field = ""

    def lookups(self, request, model_admin):
        return [("", "")]  # shown as a text box; a non-empty list keeps the filter visible

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset

    def choices(self, changelist) -> Any:
        # Every other parameter of the page (filters, search, ordering) but the page number.
        others = {k: v for k, v in changelist.params.items() if k not in (self.parameter_name, "p")}
        yield {
            "parameter_name": self.parameter_name,
            "value": self.value() or "",
            "others": [(k, v) for k, values in others.items() for v in (values if isinstance(values, list) else [values])],
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }


class GroupFilter(InputFilter):
    title = _("group")
    parameter_name = field = "group"


class WorkflowFilter(InputFilter):
    """The steps of one workflow (its id), through the step table's primary key."""

    title = _("workflow")
    parameter_name = "workflow"
    field = "workflow_step__workflow_id"


#: The kinds of reason a dead letter has, as the broker and the cluster word them.
REASON_KINDS = {
    "failed": (_("failed"), Q(reason__startswith="max deliveries exceeded: failed")),
    "no_ack": (_("crash loop / no ack"), Q(reason__startswith="max deliveries exceeded: delivered")),
    "bad_package": (_("bad package"), Q(reason__startswith="bad signature") | Q(reason__startswith="cannot unpickle")
                    | Q(reason__startswith="cannot import")),
    "expired": (_("expired"), Q(reason__icontains="expired")),
}


def reason_kind(kind: str) -> Q:
    """Return the condition of one kind of reason; ``manual`` is every reason of no other kind
    (``Reject`` from a task, a dead letter written by code)."""
    if kind == "manual":
        others = Q()
        for _label, condition in REASON_KINDS.values():
            others |= condition
        return ~others
    if kind == "expired":  # a reason that says "expired" but is of another kind stays there
        return REASON_KINDS["expired"][1] & ~(REASON_KINDS["failed"][1] | REASON_KINDS["no_ack"][1]
                                              | REASON_KINDS["bad_package"][1])
    return REASON_KINDS[kind][1]


class ReasonFilter(admin.SimpleListFilter):
    title = _("kind of reason")
    parameter_name = "reason"

    def lookups(self, request, model_admin):
        return [(kind, label) for kind, (label, _q) in REASON_KINDS.items()] + [("manual", _("manual"))]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value in REASON_KINDS or value == "manual":
            return queryset.filter(reason_kind(value))
        return queryset


class ReplayedFilter(admin.SimpleListFilter):
    """Waiting (not replayed) by default: the letters an operator has to act on; "All" is a
    choice of its own (``replayed=all``)."""

    title = _("replayed")
    parameter_name = "replayed"

    def lookups(self, request, model_admin):
        return [("no", _("No, waiting")), ("yes", _("Yes"))]

    def value(self):
        return super().value() or "no"

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value == "no":
            return queryset.filter(replayed_at__isnull=True)
        if value == "yes":
            return queryset.filter(replayed_at__isnull=False)
        return queryset

    def choices(self, changelist) -> Any:
        yield {"selected": self.value() == "all", "display": _("All"),
               "query_string": changelist.get_query_string({self.parameter_name: "all"})}
        for lookup, title in self.lookup_choices:
            yield {"selected": self.value() == str(lookup), "display": title,
                   "query_string": changelist.get_query_string({self.parameter_name: lookup})}
