"""What the job page says about one job, written for people.

Arguments come from the verified package and the result from the verified result: a forged or
tampered row shows ``unreadable package: <reason>`` (or ``unreadable result: <reason>``) and
nothing of it is unpickled. Only a user with ``view_job_payload`` sees them (decrypted, redacted by
``TASKMQ['redact']``; see :mod:`.payload_access`); others read how many there are. Times are shown
as dates with durations, counters against their limits.
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..brokers import get_broker
from ..conf import get_settings
from ..envelope import Envelope, verify, verify_result
from ..encryption import Sealed
from ..exceptions import BadPackage, UnreadableResult
from ..models import FINAL_STATES, NEVER_WAKES, DeadLetter, Job, JobSignal, JobStep, State, StepKind, WorkflowStep
from ..policy import attempts as attempt_history
from ..policy.redaction import redact, shown_call
from . import payload_access
from .display import between, duration, monospace, short_repr, when

RESULT_SHOWN = 2000  # characters of a result's repr shown
ARGUMENTS_SHOWN = 50  # positional and keyword arguments listed
# The next link of a package queued before 0.2 with a "chain" (see legacy_chains) is queued when
# its predecessor's success is recorded: its job id (which starts with its creation time in
# microseconds) falls in this window after finished_at. Goes with legacy_chains in 0.3.
NEXT_LINK_WINDOW = (datetime.timedelta(seconds=-5), datetime.timedelta(minutes=10))


HIDDEN = "not shown: viewing arguments and results needs the permission “Can view job payload”"


def envelope(job: Job) -> Envelope | str:
    """Return the job's verified envelope, or why it cannot be read (``unreadable package: ...``);
    its encrypted arguments decrypted only for a user who may see them."""
    cached = job.__dict__.get("_taskmq_envelope")
    if cached is not None:
        return cached
    try:
        value: Envelope | str = verify(job.payload, get_settings().name, decrypt=payload_access.may_see(job))
    except BadPackage as exc:
        value = f"unreadable package: {exc}"
    job.__dict__["_taskmq_envelope"] = value
    return value


def _call(job: Job) -> tuple[tuple, dict] | str:
    """The job's arguments as this page may show them, or a line saying why they are not shown."""
    env = envelope(job)
    if isinstance(env, str):
        return env
    if not payload_access.may_see(job):
        if env.secret is not None:
            return f"encrypted; {HIDDEN}"
        count = len(env.args) + len(env.kwargs)
        return "(none)" if not count else f"{count} argument(s), {HIDDEN}"
    if env.options.get("encrypt"):
        payload_access.seen(job)
    return shown_call(env.args, env.kwargs, {}, get_settings().redact)


def arguments(job: Job) -> SafeString:
    """The positional arguments, one ``repr`` a line (shortened), from the verified package."""
    call = _call(job)
    if isinstance(call, str):
        return monospace(call)
    args = call[0]
    if not args:
        return monospace("(none)")
    lines = [f"[{i}] {short_repr(value)}" for i, value in enumerate(args[:ARGUMENTS_SHOWN])]
    if len(args) > ARGUMENTS_SHOWN:
        lines.append(f"... and {len(args) - ARGUMENTS_SHOWN} more")
    return monospace("\n".join(lines))


def keyword_arguments(job: Job) -> SafeString:
    """The keyword arguments, ``name = repr`` a line (shortened), from the verified package."""
    call = _call(job)
    if isinstance(call, str):
        return monospace(call)
    if not call[1]:
        return monospace("(none)")
    items = list(call[1].items())
    lines = [f"{name} = {short_repr(value)}" for name, value in items[:ARGUMENTS_SHOWN]]
    if len(items) > ARGUMENTS_SHOWN:
        lines.append(f"... and {len(items) - ARGUMENTS_SHOWN} more")
    return monospace("\n".join(lines))


def _opened(package: Any, allowed: bool, noun: str) -> tuple[str | None, Any]:
    """``(None, value)`` for a signed value (a result, a step's) a user ``allowed`` to see payloads may
    see, else ``(what to show instead, None)``: why it cannot be read, or that it is withheld."""
    try:
        value = verify_result(package, get_settings().name, decrypt=allowed)
    except UnreadableResult as exc:
        return f"unreadable {noun}: {exc}", None
    if not allowed:
        return f"{'an encrypted ' if isinstance(value, Sealed) else 'a '}{noun}, {HIDDEN}", None
    return None, value


def result(job: Job) -> SafeString | str:
    """The verified return value (shortened, redacted), or why it cannot be read or shown."""
    if job.result_package is None:
        return "-"
    allowed = payload_access.may_see(job)
    withheld, value = _opened(job.result_package, allowed, "result")
    if withheld is not None:
        return withheld
    env = envelope(job)
    if not isinstance(env, str) and env.options.get("encrypt"):
        payload_access.seen(job)
    return monospace(short_repr(redact(value, get_settings().redact), RESULT_SHOWN))


def times(job: Job, now: datetime.datetime | None = None) -> SafeString:
    """Enqueued, visible, started, finished and expiry, with waits and the run time."""
    now = now or datetime.datetime.now(tz=datetime.UTC)
    rows: list[tuple[str, str]] = [("enqueued", when(job.enqueued_at, now))]
    if job.visible_time and job.visible_time > job.enqueued_at + datetime.timedelta(seconds=1):
        rows.append(("visible from", when(job.visible_time, now)))
    if job.started_at:
        rows.append(("started", when(job.started_at, now)))
        rows.append(("waited", duration(between(job.visible_time or job.enqueued_at, job.started_at))))
    if job.cancel_requested_at:
        rows.append(("cancel requested", when(job.cancel_requested_at, now)))
    if job.finished_at:
        rows.append(("finished", when(job.finished_at, now)))
        if job.started_at and job.state in (State.SUCCEEDED, State.FAILED, State.CANCELLED):
            rows.append(("run time", duration(between(job.started_at, job.finished_at))))
    if job.expires_time:
        rows.append(("expires", when(job.expires_time, now)))
    return _table(rows)


def limits(job: Job) -> SafeString:
    """Deliveries, executions and yields against their limits."""
    settings = get_settings()
    return _table([
        ("deliveries", f"{job.deliveries} of {job.max_deliveries}"),
        ("executions started", str(job.attempt)),
        ("yields", f"{job.yields} of {settings.max_yields}"),
    ])


def flow(job: Job, status: dict | None = None) -> str | SafeString:
    """Its concurrency key and rate limit, their use now, and whether they hold it back."""
    if job.concurrency_key is None and job.rate_limit is None and job.queue not in get_settings().queue_caps():
        return "-"
    status = status if status is not None else get_broker().flow_status()
    ready = job.state in (State.QUEUED, State.RETRYING)
    rows = []
    if job.concurrency_key is not None:
        use = status["keys"].get(job.concurrency_key, {"running": 0})
        limit = job.concurrency_limit or 1
        held = ready and use["running"] >= limit
        rows.append(("concurrency key", f"{job.concurrency_key}: {use['running']} of {limit} running"
                                        + (", this job waits for it" if held else "")))
    cap = status["queues"].get(job.queue)
    if cap is not None:
        held = ready and cap["running"] >= cap["cap"]
        rows.append(("queue cap", f"{cap['running']} of {cap['cap']} running" + (", this job waits" if held else "")))
    if job.rate_limit is not None:
        rate = status["rates"].get(f"task:{job.func}", {"next_start_in": 0})
        rows.append(("rate limit", f"{job.rate_limit}, next start allowed in {rate['next_start_in']} s"))
    return _table(rows)


def lease(job: Job, now: datetime.datetime | None = None) -> str | SafeString:
    """Who holds the job and until when, while it runs."""
    if job.state != State.RUNNING or not job.lease_owner:
        return "-"
    return _table([("held by", job.lease_owner), ("lease until", when(job.lease_until_time, now))])


def failed_executions(job: Job, now: datetime.datetime | None = None) -> str | SafeString:
    """The failed executions kept in the job's history, oldest first: when each started and its
    error, with its traceback folded (the cap: see :mod:`django_taskmq.policy.attempts`)."""
    kept = attempt_history.entries(job.attempt_log)
    if not kept:
        return "-"
    items = format_html_join("", "<li>execution {}, started {}: {}<details><summary>traceback</summary>{}</details></li>",
                             ((entry.get("attempt", "?"), _started(entry.get("started_at"), now),
                               entry.get("error") or "-", monospace(entry.get("traceback") or "-")) for entry in kept))
    older = attempt_history.dropped(job.attempt_log)
    note = format_html("<p>{} earlier failed execution(s) not kept.</p>", older) if older else ""
    return format_html("<ul style='margin: 0; padding-left: 1.2em;'>{}</ul>{}", items, note)


def _started(value: object, now: datetime.datetime | None) -> str:
    try:
        return when(datetime.datetime.fromisoformat(str(value)), now)
    except ValueError:
        return str(value)


def dead_letters(job: Job) -> str | SafeString:
    """Links to the job's dead letters, newest first."""
    letters = list(DeadLetter.objects.filter(job_id=job.pk).order_by("-failed_at", "-id")[:20])
    if not letters:
        return "-"
    return format_html("<ul style='margin: 0; padding-left: 1.2em;'>{}</ul>", format_html_join(
        "", "<li><a href='{}'>{}</a>: {} ({})</li>",
        ((reverse("admin:django_taskmq_deadletter_change", args=[d.pk]), when(d.failed_at), d.reason,
          f"replayed {d.replay_count}x" if d.replay_count else "waiting") for d in letters)))


def next_link(job: Job) -> str | SafeString:
    """The next link of a job queued before 0.2 with a chain in its package: what it calls and, once
    queued, a link to its job (a chain queued since is a workflow, shown as one)."""
    env = envelope(job)
    if isinstance(env, str):
        return "-"
    chain = env.options.get("chain") or []
    if not chain:
        return "-"
    func, args, kwargs = chain[0][0], chain[0][1], chain[0][2]
    if payload_access.may_see(job):
        args, kwargs = shown_call(tuple(args), kwargs, chain[0][3] if len(chain[0]) > 3 else {}, get_settings().redact)
        listed = [short_repr(a, 60) for a in args] + [f"{k}={short_repr(v, 60)}" for k, v in kwargs.items()]
    else:
        listed = ["…"] if args or kwargs else []
    call = f"{func}({', '.join(listed)})"
    more = f" then {len(chain) - 1} more link(s)" if len(chain) > 1 else ""
    found = _next_link_job(job, func) if job.state == State.SUCCEEDED else None
    if found is None:
        queued = "not queued: the chain stopped here" if job.state in (
            State.FAILED, State.DEAD, State.EXPIRED, State.CANCELLED) else "queued when this job succeeds"
        return format_html("{}{} ({})", call, more, queued)
    return format_html("{}{}: <a href='{}'>job {}</a> ({})", call, more,
                       reverse("admin:django_taskmq_job_change", args=[found.pk]), found.pk, found.get_state_display())


def _next_link_job(job: Job, func: str) -> Job | None:
    """Find the job queued for the next link: ``func``, created just after this job finished
    (job ids start with their creation time, so this is a range of the primary key)."""
    if job.finished_at is None:
        return None
    low, high = (_id_at(job.finished_at + offset) for offset in NEXT_LINK_WINDOW)
    return (Job.objects.filter(pk__gte=low, pk__lt=high, func=func).exclude(pk=job.pk).order_by("pk")
            .only("id", "state").first())


def _id_at(moment: datetime.datetime) -> str:
    return f"{int(moment.timestamp() * 1_000_000):014x}"


def group(job: Job) -> str | SafeString:
    """The job's group, linked to the list of its jobs."""
    if not job.group:
        return "-"
    url = reverse("admin:django_taskmq_job_changelist") + "?" + urlencode({"group": job.group})
    count = Job.objects.filter(group=job.group).count()
    return format_html("<a href='{}'>{}</a> ({} job{})", url, job.group, count, "" if count == 1 else "s")


def workflow(job: Job) -> str | SafeString:
    """The workflow the job is a step of, linked to its page, with the step's name; else ``-``."""
    found = (WorkflowStep.objects.using(job._state.db).filter(job_id=job.pk)
             .values_list("name", "workflow_id", "workflow__name").first())
    if found is None:
        return "-"
    step, workflow_id, name = found
    url = reverse("admin:django_taskmq_workflow_change", args=[workflow_id])
    return format_html("<a href='{}'>{}</a> (step {})", url, name or workflow_id, step)


def durable_steps(job: Job, now: datetime.datetime | None = None) -> str | SafeString:
    """A durable job's steps (their values, verified), its sleeps and waits with their times, the
    signals sent to it and not taken yet, and a link to send one; ``-`` for other jobs."""
    steps = list(JobStep.objects.using(job._state.db).filter(job_id=job.pk).order_by("id")[:200])
    pending = list(JobSignal.objects.using(job._state.db).filter(job_id=job.pk, consumed=False).order_by("id")[:50])
    if not steps and not pending:
        return "-"
    allowed = payload_access.may_see(job)
    rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                            ((s.name, s.get_kind_display(), _step_state(s, now), _step_value(s, allowed))
                             for s in steps))
    if allowed and any(s.result_package for s in steps) and _encrypted(job):
        payload_access.seen(job)
    parts = [format_html("<table style='margin: 0;'><tr><th>step</th><th>kind</th><th>state</th><th>value</th></tr>"
                         "{}</table>", rows)]
    if pending:
        parts.append(format_html("<p>signals kept for a later wait: {}</p>",
                                 ", ".join(f"{p.name} ({when(p.sent_at, now)})" for p in pending)))
    if job.state not in FINAL_STATES:
        url = reverse("admin:django_taskmq_job_signal", args=[job.pk])
        parts.append(format_html("<p><a class='button' href='{}'>Send a signal</a></p>", url))
    return format_html("{}" * len(parts), *parts)


def _step_state(step: JobStep, now: datetime.datetime | None) -> str:
    if step.done:
        return f"done {when(step.finished_at, now)}" if step.finished_at else "done"
    waits = f"waits for the signal {step.signal_name!r}" if step.kind == StepKind.WAIT else "sleeps"
    until = f" until {when(step.wake_time, now)}" if step.wake_at not in (None, NEVER_WAKES) else ""
    return waits + until


def _step_value(step: JobStep, allowed: bool) -> str | SafeString:
    """A step's (or a signal's) value as :func:`result` shows a result: to users who may see payloads."""
    if step.result_package is None:
        return "-"
    withheld, value = _opened(step.result_package, allowed, "value")
    if withheld is not None:
        return withheld
    return monospace(short_repr(redact(value, get_settings().redact), 200))


def _encrypted(job: Job) -> bool:
    env = envelope(job)
    return not isinstance(env, str) and bool(env.options.get("encrypt"))


def _table(rows: list[tuple[str, str]]) -> SafeString:
    return format_html("<table style='margin: 0;'>{}</table>", format_html_join(
        "", "<tr><th style='padding: 1px 12px 1px 0; font-weight: normal;'>{}</th><td style='padding: 1px 0;'>{}</td></tr>",
        rows))
