"""Workflows in the admin, read-only (code makes them: ``django_taskmq.Workflow``).

The list shows each workflow's name, state, its steps counted by state (one query for the page,
each count a link to those jobs), when it was created and when it finished; it filters by state
and finds a workflow by its id (exact) or a part of its name. The page draws the workflow as an
SVG graph, the steps in columns by dependency depth, each a link to its job, and lists the drawn
steps with their state and error (see :mod:`.workflow_page` for what it reads).
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from ..models import Workflow
from . import workflow_page
from .display import short_time, state_badge
from .jobs import ReadOnlyMixin, without_delete_selected
from .paginator import CappedPaginator


class WorkflowAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("id", "name_display", "state_display", "steps", "created", "finished")
    list_display_links = ("id", "name_display")
    list_filter = ("state",)
    ordering = ("-id",)  # ids start with their creation time: newest first, through the primary key
    show_full_result_count = False
    paginator = CappedPaginator
    list_per_page = 50
    fields = ("id", "name", "state_display", "steps", "open_steps", "cancelled", "created_at", "finished_at")
    readonly_fields = fields
    change_form_template = "admin/django_taskmq/workflow/change_form.html"

    get_actions = without_delete_selected  # nothing to act on: workflows are cancelled from code

    def get_search_results(self, request, queryset, search_term):
        """Search by workflow id (exact) or a part of the name."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(Q(pk=term) | Q(name__icontains=term)), False

    def get_search_fields(self, request):
        return ("id", "name")  # shows the search box; the search itself is above

    def get_changelist_instance(self, request):
        """The list, with the steps of the page's workflows counted by state in one query."""
        changelist = super().get_changelist_instance(request)
        page = list(changelist.result_list)
        counts = workflow_page.step_counts([w.pk for w in page], changelist.queryset.db)
        for workflow in page:
            workflow.__dict__["_taskmq_step_counts"] = counts[workflow.pk]
        changelist.result_list = page
        return changelist

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context.update(workflow_page.graph(obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    # -- columns ------------------------------------------------------------------------------
    @admin.display(description=_("name"), ordering="name")
    def name_display(self, workflow: Workflow) -> str:
        return workflow.name or "-"

    @admin.display(description=_("state"), ordering="state")
    def state_display(self, workflow: Workflow):
        return state_badge(workflow.state)

    @admin.display(description=_("steps by state"))
    def steps(self, workflow: Workflow):
        counts = workflow.__dict__.get("_taskmq_step_counts")
        if counts is None:  # the page of one workflow: its own query
            counts = workflow_page.step_counts([workflow.pk], workflow._state.db)[workflow.pk]
        return workflow_page.counts_html(workflow.pk, counts)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, workflow: Workflow):
        return short_time(workflow.created_at)

    @admin.display(description=_("finished"), ordering="finished_at")
    def finished(self, workflow: Workflow):
        return short_time(workflow.finished_at)
