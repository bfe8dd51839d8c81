"""The dead-letter queue in the admin: list, replay (selected, or all of a queue), purge.

* *Replay* (``delete dead letter``): the confirmation page asks for a target queue and priority
  (each letter's own by default); each letter's job is requeued through ``Broker.replay_dead``
  under its own id, deliveries from zero, history kept. Letters whose job is no longer dead are
  skipped and counted. ``replay-all/`` replays every waiting letter of one queue (``replay_all``).
* *Purge* (``delete dead letter`` and ``delete job``): deletes the letters with their dead jobs
  (``Broker.purge_dead``).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _, ngettext

from ..brokers import get_broker
from ..exceptions import ConfigError
from ..models import DeadLetter, Job, State
from . import confirm, job_page, payload_access
from .display import monospace, short_time, shorten
from .filters import QueueFilter, ReasonFilter, ReplayedFilter
from .forms import RequeueForm
from .paginator import CappedPaginator
from .jobs import HEAVY, ReadOnlyMixin, without_delete_selected

ERROR_SHOWN = 80  # characters of the last error in the list
REASON_SHOWN = 60  # characters of the reason in the list


class QueueChoiceForm(forms.Form):
    """The queue whose waiting dead letters "replay all" requeues."""

    queue = forms.ChoiceField(label=_("Queue"))

    def __init__(self, *args, pending: dict[str, int], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["queue"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(q, f"{q} ({n} waiting)") for q, n in sorted(pending.items())]


class DeadLetterAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("job_link", "task", "queue", "reason_display", "last_error", "deliveries", "failed", "replays")
    list_filter = (QueueFilter, ReasonFilter, ReplayedFilter)
    list_select_related = ("job",)
    readonly_fields = ("job_link", "task", "queue", "reason", "error_display", "arguments", "keyword_arguments",
                       "deliveries", "failed_at", "replayed_at", "replay_count")
    fields = readonly_fields
    actions = ["replay", "purge"]
    show_full_result_count = False
    paginator = CappedPaginator  # a COUNT(*) of millions of rows takes seconds
    change_list_template = "admin/django_taskmq/deadletter/change_list.html"

    # Purge deletes letters with their jobs, through the broker.
    get_actions = without_delete_selected

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("job").defer(*(f"job__{name}" for name in HEAVY))

    def get_object(self, request, object_id, from_field=None):
        letter = super().get_object(request, object_id, from_field)
        if letter is not None:
            payload_access.attach(request, letter.job)  # its arguments: see view_job_payload
        return letter

    def get_search_results(self, request, queryset, search_term):
        """Search by job id (exact), task name and last error (contained)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        # The letter's own columns only: a join to the job table would read all of it.
        return queryset.filter(Q(job_id=term) | Q(task_name__icontains=term) | Q(error__icontains=term)), False

    def get_search_fields(self, request):
        return ("job__id", "task_name", "error")  # shows the search box; the search itself is above

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "can_replay": self.has_replay_permission(request)}
        return super().changelist_view(request, extra_context)

    def get_urls(self):
        return [
            path("replay-all/", self.admin_site.admin_view(self.replay_all_view),
                 name="django_taskmq_deadletter_replay_all"),
            *super().get_urls(),
        ]

    # -- permissions --------------------------------------------------------------------------
    def has_replay_permission(self, request) -> bool:
        """Replaying takes a letter out of the queue of dead letters: ``delete dead letter``."""
        return self.has_model_perm(request, "delete")

    def has_purge_permission(self, request) -> bool:
        """Purging deletes dead jobs too: it needs the delete permission on both models."""
        return self.has_model_perm(request, "delete") and self.has_model_perm(request, "delete", Job)

    # -- columns ------------------------------------------------------------------------------
    @admin.display(description=_("job"), ordering="job_id")
    def job_link(self, letter: DeadLetter):
        return format_html("<a href='{}'>{}</a>", reverse("admin:django_taskmq_job_change", args=[letter.job_id]),
                           letter.job_id)

    @admin.display(description=_("task"), ordering="job__task_name")
    def task(self, letter: DeadLetter) -> str:
        return letter.job.task_name

    @admin.display(description=_("reason"), ordering="reason")
    def reason_display(self, letter: DeadLetter) -> str:
        return shorten(letter.reason, REASON_SHOWN)

    @admin.display(description=_("failed at"), ordering="failed_at")
    def failed(self, letter: DeadLetter):
        return short_time(letter.failed_at)

    @admin.display(description=_("last error"))
    def last_error(self, letter: DeadLetter) -> str:
        return shorten(letter.error.splitlines()[-1] if letter.error.strip() else "", ERROR_SHOWN)

    @admin.display(description=_("last error"))
    def error_display(self, letter: DeadLetter):
        return monospace(letter.error) if letter.error else "-"

    @admin.display(description=_("arguments"))
    def arguments(self, letter: DeadLetter):
        return job_page.arguments(letter.job)

    @admin.display(description=_("keyword arguments"))
    def keyword_arguments(self, letter: DeadLetter):
        return job_page.keyword_arguments(letter.job)

    @admin.display(description=_("replays"), ordering="replay_count")
    def replays(self, letter: DeadLetter) -> str:
        if letter.replayed_at is None:
            return str(_("waiting")) if not letter.replay_count else f"{letter.replay_count}"
        return f"{letter.replay_count} (last {letter.replayed_at:%Y-%m-%d %H:%M})"

    # -- actions ------------------------------------------------------------------------------
    @admin.action(description=_("Replay selected dead letters"), permissions=["replay"])
    def replay(self, request, queryset: QuerySet):
        own = _single_queue(queryset)
        form = RequeueForm(request.POST if confirm.confirmed(request) else None, own_queue=own)
        if not confirm.confirmed(request) or not form.is_valid():
            waiting = queryset.filter(replayed_at__isnull=True, job__state=State.DEAD).count()
            return confirm.page(
                self, request, title=_("Replay dead letters"), verb=_("replay"), action="replay", form=form,
                question=_("Replay the selected dead letters? Each job goes back to a queue under its own id, its "
                           "deliveries counted from zero; its history stays."),
                note=ngettext("%(n)d of them can be replayed; the others were replayed already or their job is no "
                              "longer dead.",
                              "%(n)d of them can be replayed; the others were replayed already or their job is no "
                              "longer dead.", waiting) % {"n": waiting},
                objects=queryset, total=queryset.count())
        queue, priority = form.target()
        broker = get_broker()
        replayed, skipped = [], []
        for letter in queryset:
            try:
                broker.replay_dead(letter.pk, queue=queue, priority=priority)
                replayed.append(letter)
            except ConfigError as exc:  # replayed already, or its job is no longer dead
                skipped.append(str(exc))
        where = " ".join(w for w in (f"into queue {queue}" if queue else "",
                                     f"at priority {priority}" if priority is not None else "") if w)
        confirm.log(request, replayed, f"Replayed {where}".strip())
        if replayed:
            self.message_user(request, ngettext("%d job replayed.", "%d jobs replayed.", len(replayed)) % len(replayed),
                              messages.SUCCESS)
            self.message_user(request, format_html("{} {}", _("Follow them:"), format_html_join(", ", "<a href='{}'>{}</a>", (
                (reverse("admin:django_taskmq_job_change", args=[d.job_id]), d.job_id) for d in replayed[:10]))),
                messages.INFO)
        if skipped:
            self.message_user(request, ngettext(
                "%(n)d dead letter not replayed (skipped): %(why)s", "%(n)d dead letters not replayed (skipped): %(why)s",
                len(skipped)) % {"n": len(skipped), "why": "; ".join(skipped[:5])}, messages.WARNING)
        return None

    @admin.action(description=_("Purge selected dead letters and their jobs"), permissions=["purge"])
    def purge(self, request, queryset: QuerySet):
        if not confirm.confirmed(request):
            return confirm.page(
                self, request, title=_("Purge dead letters"), verb=_("purge"), action="purge",
                question=_("Purge the selected dead letters? Each waiting letter is deleted with its dead job; "
                           "letters replayed already are left alone. This cannot be undone."),
                objects=queryset, total=queryset.count())
        pending = queryset.filter(replayed_at__isnull=True)
        letters = list(pending)
        jobs = list(Job.objects.filter(pk__in=[d.job_id for d in letters], state=State.DEAD).only("id", "task_name"))
        confirm.log(request, letters, "Purged with its job", deletion=True)
        confirm.log(request, jobs, "Purged with its dead letter", deletion=True)
        count = get_broker().purge_dead(ids=[d.pk for d in letters])
        self.message_user(request, ngettext("%d dead letter purged.", "%d dead letters purged.", count) % count,
                          messages.SUCCESS)
        return None

    def replay_all_view(self, request):
        """Replay every waiting dead letter of one queue, in its own queue and at its own priority."""
        if not self.has_replay_permission(request):
            raise PermissionDenied
        pending = dict(DeadLetter.objects.filter(replayed_at__isnull=True, job__state=State.DEAD).order_by()
                       .values_list("queue").annotate(n=Count("pk")).values_list("queue", "n"))
        changelist = reverse("admin:django_taskmq_deadletter_changelist")
        if not pending:
            self.message_user(request, _("No dead letter is waiting."), messages.INFO)
            return HttpResponseRedirect(changelist)
        initial = {"queue": request.GET.get("queue")} if request.GET.get("queue") in pending else {}
        form = QueueChoiceForm(request.POST if confirm.confirmed(request) else None, pending=pending, initial=initial)
        if not confirm.confirmed(request) or not form.is_valid():
            letters = DeadLetter.objects.filter(replayed_at__isnull=True, job__state=State.DEAD)
            if initial:
                letters = letters.filter(queue=initial["queue"])
            return confirm.page(
                self, request, title=_("Replay all dead letters of a queue"), verb=_("replay all"), form=form,
                question=_("Replay every waiting dead letter of this queue, each job in its own queue at its own "
                           "priority?"),
                note=", ".join(f"{q}: {n}" for q, n in sorted(pending.items())),
                objects=letters.select_related("job"),
                total=pending[initial["queue"]] if initial else sum(pending.values()), selected=[], cancel_url=changelist)
        queue = form.cleaned_data["queue"]
        before = set(DeadLetter.objects.filter(replayed_at__isnull=True, queue=queue).values_list("pk", flat=True))
        count = get_broker().replay_all(queue)
        confirm.log(request, DeadLetter.objects.filter(pk__in=before, replayed_at__isnull=False),
                    "Replayed (all of its queue)")
        self.message_user(request, ngettext("%(n)d job of queue %(q)s replayed.",
                                            "%(n)d jobs of queue %(q)s replayed.", count)
                          % {"n": count, "q": queue}, messages.SUCCESS)
        return HttpResponseRedirect(f"{changelist}?queue={queue}")


def _single_queue(queryset: QuerySet) -> str:
    queues = list(queryset.order_by().values_list("queue", flat=True).distinct()[:2])
    return queues[0] if len(queues) == 1 else ""
