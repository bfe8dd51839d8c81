"""Workflows in the admin, read-only (code makes them: ``django_taskmq.Workflow``).

The list shows each workflow's name, state, its steps counted by state (one query for the page,
each count a link to those jobs), when it was created and when it finished; it filters by state
and finds a workflow by its id (exact) or a part of its name; *Cancel selected workflows* cancels
their steps that have not ended (``cancel_workflow``). The page draws the workflow as an
SVG graph, the steps in columns by dependency depth, each a link to its job, and lists the drawn
steps with their state and error (see :mod:`.workflow_page` for what it reads).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..models import Job, Workflow, WorkflowStates
from ..workflows import cancel_workflow
from . import confirm, workflow_page
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

    actions = ["cancel_workflows"]
    get_actions = without_delete_selected

    def has_cancel_permission(self, request) -> bool:
        """Cancelling a workflow ends its jobs: ``delete job``, as the jobs' own *Cancel*."""
        return self.has_model_perm(request, "delete", Job)

    @admin.action(description=_("Cancel selected workflows"), permissions=["cancel"])
    def cancel_workflows(self, request, queryset: QuerySet):
        running = queryset.filter(state=WorkflowStates.RUNNING)
        if not confirm.confirmed(request):
            count = running.count()
            return confirm.page(
                self, request, title=_("Cancel workflows"), verb=_("cancel"), action="cancel_workflows",
                question=_("Cancel the selected workflows? Their steps that wait never run; their running steps "
                           "are asked to stop. A cancelled workflow resumes if one of its steps is replayed."),
                note=ngettext("%(n)d of them is running.", "%(n)d of them are running.", count) % {"n": count},
                objects=queryset.order_by("-id"), total=queryset.count())
        ids = list(running.values_list("pk", flat=True))
        steps = sum(cancel_workflow(workflow_id) for workflow_id in ids)
        confirm.log(request, Workflow.objects.filter(pk__in=ids).only("id", "name"), "Cancelled")
        self.message_user(request, ngettext("%(w)d workflow cancelled (%(s)d steps).",
                                            "%(w)d workflows cancelled (%(s)d steps).", len(ids))
                          % {"w": len(ids), "s": steps}, messages.SUCCESS)
        return None

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
