"""Jobs in the admin: a read-only list and page, and two actions through the broker.

* *Retry* (``change job``): selected jobs that ended FAILED, DEAD, EXPIRED or CANCELLED go back to
  their queue under the same id (``Broker.retry_jobs``), optionally into another queue or priority.
* *Cancel* (``delete job``): selected QUEUED or RETRYING jobs are cancelled (``Broker.cancel``);
  RUNNING ones are asked to stop (``Broker.request_cancel``, as :func:`django_taskmq.cancel`).

Both first show a confirmation page; both write a ``LogEntry`` per job they changed. Django's
"delete selected" is removed: deleting rows would bypass the broker (a running job's lease, the
dead letters of a job). List pages never load the package, the result or the traceback.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _, ngettext

from ..brokers import get_broker
from ..durable_tasks import send_signal
from ..exceptions import ConfigError
from ..models import Cluster, IdempotencyKey, Job, State, UniqueKey
from . import confirm, job_page, payload_access, progress_bar
from .display import FitsTheWindow, between, duration, monospace, reserved_badge, short_time, shortened, state_badge
from .filters import (ClusterFilter, ExecutionFilter, GroupFilter, PriorityFilter, QueueFilter, StateFilter,
                      WorkflowFilter, executing_now)
from .forms import RequeueForm, SignalForm
from .paginator import CappedPaginator
from .window import newest

HEAVY = ("payload", "result_package", "traceback", "attempt_log")  # never loaded by a list page
RETRYABLE = (State.FAILED, State.DEAD, State.EXPIRED, State.CANCELLED)
CANCELLABLE = (State.WAITING, State.QUEUED, State.RETRYING, State.SUSPENDED, State.RUNNING)
TASK_SHOWN = 48  # characters of a task name in the list (the whole of it on hover and on the job's page)


def without_delete_selected(self, request, action_location=None):
    """``ModelAdmin.get_actions`` without Django's "delete selected" (Django 6.1 passes
    ``action_location``; 5.2 does not)."""
    extra = {} if action_location is None else {"action_location": action_location}
    actions = admin.ModelAdmin.get_actions(self, request, **extra)
    actions.pop("delete_selected", None)
    return actions


class ReadOnlyMixin(FitsTheWindow):
    """Rows are shown, never added, edited or deleted through a form: changes go through the
    broker, in actions that check the model's permissions themselves (``has_perm``)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # no delete page, no Delete button: deleting a row would bypass the broker

    def has_model_perm(self, request, action: str, model=None) -> bool:
        """Return whether the user holds ``<app>.<action>_<model>`` (this admin's model by default)."""
        opts = (model or self.model)._meta  # type: ignore[attr-defined]
        return request.user.has_perm(f"{opts.app_label}.{action}_{opts.model_name}")


def _is_list(request: HttpRequest) -> bool:
    match = request.resolver_match
    return bool(match and match.url_name and match.url_name.endswith("_changelist"))


class JobAdmin(ReadOnlyMixin, admin.ModelAdmin):
    # Facts that belong together share a column (id and task name; queue and priority; when it
    # started, finished and how long it ran), so the list fits beside the sidebar and the filters.
    list_display = ("id_and_task", "queue_and_priority", "state_display", "deliveries_display", "attempts",
                    "enqueued", "ran")
    list_filter = (("state", StateFilter), ExecutionFilter, QueueFilter, PriorityFilter, ClusterFilter, GroupFilter,
                   WorkflowFilter)
    ordering = ("-id",)
    show_full_result_count = False  # one COUNT(*) of the whole table per page is enough
    paginator = CappedPaginator  # a COUNT(*) of millions of rows takes seconds
    list_per_page = 50
    actions = ["retry_jobs", "cancel_jobs"]
    exclude = HEAVY[:2]  # the signed package and the raw result: shown verified instead
    fieldsets = (
        (None, {"fields": ("id", "task_name", "func", "state_display", "progress_display", "queue", "priority",
                           "group_display", "workflow_display", "key", "cluster")}),
        (_("Call"), {"fields": ("arguments", "keyword_arguments", "next_link")}),
        (_("Outcome"), {"fields": ("return_value", "error_display", "traceback_display", "failed_executions",
                                   "dead_letters")}),
        (_("Times"), {"fields": ("times",)}),
        (_("Deliveries"), {"fields": ("limits", "lease", "flow")}),
        (_("Durable steps"), {"fields": ("durable_steps",)}),
    )
    readonly_fields = ("id", "task_name", "func", "state_display", "progress_display", "queue", "priority", "group_display",
                       "workflow_display", "key", "cluster", "arguments", "keyword_arguments", "next_link", "return_value",
                       "error_display", "traceback_display", "failed_executions", "dead_letters", "times", "limits", "lease",
                       "flow", "durable_steps")
    change_list_template = "admin/django_taskmq/job/change_list.html"

    # Deleting rows bypasses the broker (a running job's lease, its dead letters): cancel instead.
    get_actions = without_delete_selected

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        return queryset.defer(*HEAVY) if _is_list(request) else queryset

    def get_changelist(self, request, **kwargs):
        return JobChangeList

    def get_object(self, request, object_id, from_field=None):
        job = super().get_object(request, object_id, from_field)
        return payload_access.attach(request, job) if job is not None else None

    def get_search_results(self, request, queryset, search_term):
        """Search by job id, group, live idempotency key and coalescing key (exact, the whole table,
        through indexes: the key tables' primary keys); when none
        matches, by a part of the task name or function or an expired key among the newest jobs
        (see :mod:`.window`)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        keyed = [*IdempotencyKey.objects.using(queryset.db).filter(key=term).values_list("job_id", flat=True),
                 *UniqueKey.objects.using(queryset.db).filter(key=term).values_list("job_id", flat=True)]
        exact = queryset.filter(Q(pk=term) | Q(group=term) | Q(pk__in=keyed))
        if exact.exists():  # an id, a group or a key: what was looked for, through indexes
            return exact, False
        return queryset.filter(newest(queryset), Q(key=term) | Q(task_name__icontains=term)
                               | Q(func__icontains=term)), False

    def has_search(self) -> bool:
        return True

    def get_search_fields(self, request):
        return ("id", "task_name", "key", "group")  # shows the search box; the search itself is above

    # -- permissions --------------------------------------------------------------------------
    def has_retry_permission(self, request) -> bool:
        """Retrying changes jobs: ``change job`` (the job form itself stays read-only)."""
        return self.has_model_perm(request, "change")

    def has_cancel_permission(self, request) -> bool:
        """Cancelling ends jobs: ``delete job``."""
        return self.has_model_perm(request, "delete")

    def has_signal_permission(self, request) -> bool:
        """Sending a signal changes what a job does next: ``change job``."""
        return self.has_model_perm(request, "change")

    def get_urls(self):
        return [
            path("<path:object_id>/signal/", self.admin_site.admin_view(self.signal_view),
                 name="django_taskmq_job_signal"),
            *super().get_urls(),
        ]

    def signal_view(self, request, object_id: str):
        """Send a signal to a durable job (``django_taskmq.send_signal``), after a confirmation page."""
        if not self.has_signal_permission(request):
            raise PermissionDenied
        job = Job.objects.filter(pk=object_id).only("id", "task_name", "state").first()
        if job is None:
            raise Http404(f"no job {object_id}")
        back = reverse("admin:django_taskmq_job_change", args=[job.pk], current_app=self.admin_site.name)
        form = SignalForm(request.POST if confirm.confirmed(request) else None)
        if not confirm.confirmed(request) or not form.is_valid():
            return confirm.page(self, request, title=_("Send a signal"), verb=_("send"), form=form, objects=[job],
                                question=_("Send this signal to the job? A ctx.wait_for() of that name returns its "
                                           "payload; sent before the task waits for it, it is kept for the wait."),
                                selected=[], cancel_url=back)
        name, payload = form.cleaned_data["signal_name"], form.cleaned_data["payload"]
        try:
            woke = send_signal(job.pk, name, payload)
        except ConfigError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(back)
        confirm.log(request, [job], f"Sent the signal {name!r}")
        self.message_user(request, _("Signal %(s)s sent: the job runs on.") % {"s": name} if woke else
                          _("Signal %(s)s sent and kept until the job waits for it.") % {"s": name}, messages.SUCCESS)
        return HttpResponseRedirect(back)

    # -- columns ------------------------------------------------------------------------------
    @admin.display(description=_("id / task name"), ordering="id")
    def id_and_task(self, job: Job):  # the list's link to the job's page
        return format_html("<span class='taskmq-id'>{}</span><span class='taskmq-quiet'>{}</span>", job.pk,
                           shortened(job.task_name, TASK_SHOWN))

    @admin.display(description=_("queue / priority"), ordering="queue")
    def queue_and_priority(self, job: Job):
        return format_html("{}<span class='taskmq-quiet'>{} {}</span>", job.queue, _("priority"), job.priority)

    @admin.display(description=_("started / finished / run time"), ordering="started_at")
    def ran(self, job: Job):
        if job.started_at is None and job.finished_at is None:
            return "-"
        return format_html("{}<span class='taskmq-quiet'>{}</span><span class='taskmq-quiet'>{}</span>",
                           short_time(job.started_at), short_time(job.finished_at), self.run_time(job))

    @admin.display(description=_("state"), ordering="state")
    def state_display(self, job: Job):
        if job.state == State.RUNNING and getattr(job, "executing", True) is False:
            holder = getattr(job, "holder", None) or job.lease_owner or "?"
            return reserved_badge(holder)
        return state_badge(job.state)

    @admin.display(description=_("progress"))
    def progress_display(self, job: Job):
        return progress_bar.bar(job.progress)

    @admin.display(description=_("deliveries"))
    def deliveries_display(self, job: Job) -> str:
        return f"{job.deliveries} / {job.max_deliveries}"

    @admin.display(description=_("attempts"), ordering="attempt")
    def attempts(self, job: Job) -> int:
        return job.attempt

    @admin.display(description=_("enqueued"), ordering="id")
    def enqueued(self, job: Job):
        return short_time(job.enqueued_at)

    @admin.display(description=_("run time"))
    def run_time(self, job: Job) -> str:
        if job.state not in (State.SUCCEEDED, State.FAILED):
            return "-"
        return duration(between(job.started_at, job.finished_at))

    # -- the job page -------------------------------------------------------------------------
    @admin.display(description=_("group"))
    def group_display(self, job: Job):
        return job_page.group(job)

    @admin.display(description=_("workflow"))
    def workflow_display(self, job: Job):
        return job_page.workflow(job)

    @admin.display(description=_("arguments"))
    def arguments(self, job: Job):
        return job_page.arguments(job)

    @admin.display(description=_("keyword arguments"))
    def keyword_arguments(self, job: Job):
        return job_page.keyword_arguments(job)

    @admin.display(description=_("chain: next link"))
    def next_link(self, job: Job):
        return job_page.next_link(job)

    @admin.display(description=_("result"))
    def return_value(self, job: Job):
        return job_page.result(job)

    @admin.display(description=_("error"))
    def error_display(self, job: Job):
        return monospace(job.error) if job.error else "-"

    @admin.display(description=_("traceback"))
    def traceback_display(self, job: Job):
        return monospace(job.traceback) if job.traceback else "-"

    @admin.display(description=_("failed executions"))
    def failed_executions(self, job: Job):
        return job_page.failed_executions(job)

    @admin.display(description=_("dead letters"))
    def dead_letters(self, job: Job):
        return job_page.dead_letters(job)

    @admin.display(description=_("times"))
    def times(self, job: Job):
        return job_page.times(job)

    @admin.display(description=_("deliveries, executions, yields"))
    def limits(self, job: Job):
        return job_page.limits(job)

    @admin.display(description=_("lease"))
    def lease(self, job: Job):
        return job_page.lease(job)

    @admin.display(description=_("steps, sleeps and waits"))
    def durable_steps(self, job: Job):
        return job_page.durable_steps(job)

    @admin.display(description=_("flow control"))
    def flow(self, job: Job):
        return job_page.flow(job)

    # -- actions ------------------------------------------------------------------------------
    @admin.action(description=_("Retry selected failed, dead, expired or cancelled jobs"), permissions=["retry"])
    def retry_jobs(self, request, queryset: QuerySet):
        own = _single_queue(queryset)
        form = RequeueForm(request.POST if confirm.confirmed(request) else None, own_queue=own)
        if not confirm.confirmed(request) or not form.is_valid():
            retryable = queryset.filter(state__in=RETRYABLE).count()
            return confirm.page(
                self, request, title=_("Retry jobs"), verb=_("retry"), action="retry_jobs", form=form,
                question=_("Retry the selected jobs? Each goes back to a queue under its own id, its deliveries "
                           "counted from zero; its history (executions, last error, dead letters) stays."),
                note=ngettext("%(n)d of them can be retried; the others have not finished, or succeeded.",
                              "%(n)d of them can be retried; the others have not finished, or succeeded.",
                              retryable) % {"n": retryable},
                objects=queryset.order_by("-id"), total=queryset.count())
        queue, priority = form.target()
        ids = list(queryset.filter(state__in=RETRYABLE).values_list("pk", flat=True))
        count = get_broker().retry_jobs(ids, queue=queue, priority=priority)
        retried = Job.objects.filter(pk__in=ids, state=State.QUEUED).only("id", "task_name")
        confirm.log(request, retried, _describe("Retried", queue, priority))
        self.message_user(request, ngettext("%d job requeued.", "%d jobs requeued.", count) % count, messages.SUCCESS)
        skipped = queryset.count() - count
        if skipped:
            self.message_user(request, ngettext(
                "%d job was not retried: it had not finished, or it succeeded.",
                "%d jobs were not retried: they had not finished, or they succeeded.", skipped) % skipped,
                messages.WARNING)
        return None

    @admin.action(description=_("Cancel selected queued or running jobs"), permissions=["cancel"])
    def cancel_jobs(self, request, queryset: QuerySet):
        if not confirm.confirmed(request):
            cancellable = queryset.filter(state__in=CANCELLABLE).count()
            return confirm.page(
                self, request, title=_("Cancel jobs"), verb=_("cancel"), action="cancel_jobs",
                question=_("Cancel the selected jobs? Jobs that wait (queued or retrying) never run and no hook "
                           "fires. Running jobs are asked to stop, and interrupted if they have not after the "
                           "cancel grace period; they end cancelled and their hooks run. Finished jobs are left "
                           "alone."),
                note=ngettext("%(n)d of them can be cancelled.", "%(n)d of them can be cancelled.", cancellable)
                % {"n": cancellable},
                objects=queryset.order_by("-id"), total=queryset.count())
        ids = list(queryset.filter(state__in=CANCELLABLE).values_list("pk", flat=True))
        broker = get_broker()
        with broker.atomic(write=True):
            count = broker.cancel(ids)
            asked = broker.request_cancel(ids)
        confirm.log(request, Job.objects.filter(pk__in=ids, state=State.CANCELLED).only("id", "task_name"),
                    "Cancelled")
        confirm.log(request, Job.objects.filter(pk__in=ids, state=State.RUNNING, cancel_requested_at__isnull=False)
                    .only("id", "task_name"), "Cancellation requested (running)")
        self.message_user(request, ngettext("%d job cancelled.", "%d jobs cancelled.", count) % count, messages.SUCCESS)
        if asked:
            self.message_user(request, ngettext(
                "%d running job was asked to stop; it ends cancelled within seconds.",
                "%d running jobs were asked to stop; they end cancelled within seconds.", asked) % asked,
                messages.SUCCESS)
        skipped = queryset.count() - count - asked
        if skipped:
            self.message_user(request, ngettext(
                "%d job was not cancelled: it had finished.",
                "%d jobs were not cancelled: they had finished.", skipped) % skipped, messages.WARNING)
        return None

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "dashboard_url": reverse("admin:django_taskmq_dashboard")}
        return super().changelist_view(request, extra_context)


class JobChangeList(ChangeList):
    """The job list, whose RUNNING rows of the page learn whether a worker executes them (the
    clusters' heartbeats) and which cluster holds them: two small queries a page, none per row and
    none in the counts."""

    def get_results(self, request):
        super().get_results(request)
        held = [job for job in self.result_list if job.state == State.RUNNING]
        if not held:
            return
        started = executing_now(self.queryset.db)
        owners = {job.lease_owner for job in held if job.lease_owner}
        names = dict(Cluster.objects.using(self.queryset.db).filter(pk__in=owners).values_list("pk", "name"))
        for job in held:
            job.executing = job.pk in started
            job.holder = names.get(job.lease_owner or "", job.lease_owner or "")


def _single_queue(queryset: QuerySet) -> str:
    """The one queue of the selected rows, or "" when they are in several."""
    queues = list(queryset.order_by().values_list("queue", flat=True).distinct()[:2])
    return queues[0] if len(queues) == 1 else ""


def _describe(verb: str, queue: str | None, priority: int | None) -> str:
    where = [f"into queue {queue}" if queue else "", f"at priority {priority}" if priority is not None else ""]
    return " ".join([verb, *[w for w in where if w]])
