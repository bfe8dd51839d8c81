"""Forms of the admin: the options of a replay or a retry, and the schedule form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from ..runtime.allowed_tasks import check_allowed
from ..conf import get_settings
from ..exceptions import ConfigError
from ..models import Schedule
from ..policy import cron as cron_policy
from ..policy.cron import ScheduleType
from ..policy.priority import MAX_PRIORITY, MIN_PRIORITY


def _priorities(own: str) -> list[tuple[str, str]]:
    return [("", own)] + [(str(p), str(p)) for p in range(MAX_PRIORITY, MIN_PRIORITY - 1, -1)]


class RequeueForm(forms.Form):
    """Where a replayed or retried job goes: its own queue and priority unless one is chosen."""

    target_queue = forms.ChoiceField(label=_("Target queue"), required=False)
    target_priority = forms.TypedChoiceField(label=_("Priority"), required=False, coerce=int, empty_value=None)

    def __init__(self, *args: Any, own_queue: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        own = _("its own queue ({})").format(own_queue) if own_queue else _("each one's own queue")
        queue_field = self.fields["target_queue"]
        assert isinstance(queue_field, forms.ChoiceField)
        queue_field.choices = [("", own)] + [(q, q) for q in sorted(get_settings().queues)]
        priority_field = self.fields["target_priority"]
        assert isinstance(priority_field, forms.ChoiceField)
        priority_field.choices = _priorities(str(_("its own priority")))

    def target(self) -> tuple[str | None, int | None]:
        """Return ``(queue, priority)`` to pass to the broker (None: keep each job's own)."""
        data = self.cleaned_data
        return data.get("target_queue") or None, data.get("target_priority")


class SignalForm(forms.Form):
    """A signal to send to a durable job (``django_taskmq.send_signal``): its name and a JSON payload."""

    signal_name = forms.CharField(label=_("Signal"), max_length=100,
                                  help_text=_("the name the task waits for, e.g. approved"))
    payload = forms.JSONField(label=_("Payload"), required=False,
                              help_text=_('JSON, e.g. {"approved": true}; what ctx.wait_for() returns'))


class ScheduleForm(forms.ModelForm):
    """The schedule form: an allowed function, JSON arguments, a valid cron or interval, a known queue."""

    queue = forms.ChoiceField(required=False, help_text=_("empty: the task's own queue (TASKMQ['default_queue'])"))
    priority = forms.TypedChoiceField(coerce=int, initial=0, choices=())

    class Meta:
        model = Schedule
        fields = ("name", "func", "args", "kwargs", "schedule_type", "minutes", "cron", "repeats", "next_run", "queue",
                  "priority", "catch_up", "paused", "hook", "intended_date_kwarg", "options", "tz")
        help_texts = {
            "func": _("dotted path of a function in an allowed task module, e.g. myapp.tasks.send_report"),
            "args": _('positional arguments as a JSON list, e.g. [42, "monthly"]'),
            "kwargs": _('keyword arguments as a JSON object, e.g. {"dry_run": false}'),
            "minutes": _("for the Minutes type: the interval in minutes"),
            "cron": _("for the Cron type: a cron expression, e.g. */15 * * * * (in the schedule's time zone)"),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        queue_field = self.fields["queue"]
        assert isinstance(queue_field, forms.ChoiceField)
        queue_field.choices = [("", "-")] + [(q, q) for q in sorted(get_settings().queues)]
        priority_field = self.fields["priority"]
        assert isinstance(priority_field, forms.ChoiceField)
        priority_field.choices = [(p, str(p)) for p in range(MAX_PRIORITY, MIN_PRIORITY - 1, -1)]

    def _post_clean(self) -> None:
        # Schedule.clean() checks the same things again: once the form's own checks failed it would
        # only repeat them, worded about the emptied fields ("func '' is not ..."). It runs otherwise.
        if self._errors:
            return
        super()._post_clean()

    def clean_func(self) -> str:
        func = self.cleaned_data["func"]
        try:
            check_allowed(func, get_settings())
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None
        return func

    def clean_args(self) -> Any:
        args = self.cleaned_data.get("args")
        if args is None:
            return []
        if not isinstance(args, list):
            raise forms.ValidationError(_("must be a JSON list, e.g. [1, 2]"))
        return args

    def clean_kwargs(self) -> Any:
        kwargs = self.cleaned_data.get("kwargs")
        if kwargs is None:
            return {}
        if not isinstance(kwargs, dict):
            raise forms.ValidationError(_('must be a JSON object, e.g. {"key": "value"}'))
        return kwargs

    def clean_options(self) -> Any:
        options = self.cleaned_data.get("options")
        if options is None:
            return {}
        if not isinstance(options, dict):
            raise forms.ValidationError(_('must be a JSON object of async_task options, e.g. {"timeout": 30}'))
        return options

    def clean_hook(self) -> str | None:
        hook = self.cleaned_data.get("hook") or None
        if hook:
            try:
                check_allowed(hook, get_settings())
            except ConfigError as exc:
                raise forms.ValidationError(str(exc)) from None
        return hook

    def clean_queue(self) -> str | None:
        return self.cleaned_data.get("queue") or None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kind = data.get("schedule_type")
        if kind == ScheduleType.MINUTES.value and not data.get("minutes"):
            self.add_error("minutes", _("a Minutes schedule needs its interval in minutes"))
        elif kind == ScheduleType.CRON.value:
            try:
                cron_policy.validate(ScheduleType.CRON, None, data.get("cron"))
            except ConfigError as exc:
                self.add_error("cron", str(exc))
        return data
