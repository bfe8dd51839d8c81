"""Job, DeadLetter, Schedule and the bookkeeping tables of the ORM broker.

Times the broker compares on its hot path (``visible_at``, ``expires_at``, ``lease_until``) are
epoch seconds (floats), so the claim compares plain numbers on every engine; times people read
(``enqueued_at``, ``started_at``, ``finished_at``, ``failed_at``) are Django datetimes.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .runtime.allowed_tasks import check_allowed
from .conf import get_settings
from .exceptions import BadPackage, ConfigError, UnreadableResult
from .policy import cron as cron_policy
from .policy.cron import ScheduleType
from .policy.states import JobState
from .policy.workflow import WorkflowState
from .options import check_schedule_options
from .envelope import verify, verify_result


class State(models.TextChoices):
    WAITING = JobState.WAITING.value, _("waiting")
    QUEUED = JobState.QUEUED.value, _("queued")
    RUNNING = JobState.RUNNING.value, _("running")
    RETRYING = JobState.RETRYING.value, _("retrying")
    SUSPENDED = JobState.SUSPENDED.value, _("sleeping or waiting")
    SUCCEEDED = JobState.SUCCEEDED.value, _("succeeded")
    FAILED = JobState.FAILED.value, _("failed")
    DEAD = JobState.DEAD.value, _("dead")
    EXPIRED = JobState.EXPIRED.value, _("expired")
    CANCELLED = JobState.CANCELLED.value, _("cancelled")


# Derived from the pure state table, so the queries and policy.states cannot drift apart.
READY_STATES = sorted(State(s.value) for s in JobState.READY)
FINAL_STATES = sorted(State(s.value) for s in JobState.FINAL)


def _from_epoch(value: float | None) -> datetime.datetime | None:
    if value is None:
        return None
    return datetime.datetime.fromtimestamp(value, tz=datetime.UTC)


class Job(models.Model):
    """One task: its state record and, with the ORM broker, the message itself."""

    id = models.CharField(primary_key=True, max_length=32, editable=False)
    func = models.CharField(_("function"), max_length=255)
    task_name = models.CharField(_("task name"), max_length=255)
    payload = models.TextField(_("signed package"))
    queue = models.CharField(max_length=100)
    priority = models.SmallIntegerField(default=0)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    attempt = models.PositiveIntegerField(_("executions started"), default=0)
    deliveries = models.PositiveIntegerField(default=0)
    yields = models.PositiveIntegerField(default=0)
    max_deliveries = models.PositiveIntegerField(default=5)
    key = models.CharField(_("idempotency key"), max_length=255, null=True, blank=True)
    visible_at = models.FloatField(_("visible at (epoch s)"))
    expires_at = models.FloatField(_("expires at (epoch s)"), null=True, blank=True)
    lease_owner = models.CharField(max_length=64, null=True, blank=True)
    lease_token = models.CharField(max_length=32, null=True, blank=True)
    lease_until = models.FloatField(_("lease until (epoch s)"), null=True, blank=True)
    enqueued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    # When the first execution started (started_at is the latest's); NULL until one ran.
    first_started_at = models.DateTimeField(_("first execution started"), null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The return value as a signed package (see envelope.py): read through ``result``, which
    # verifies before it unpickles, so a row written straight into the table runs no code.
    result_package = models.TextField(_("signed result"), null=True, blank=True, editable=False)
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    # One entry per failed execution, the newest 20 (policy/attempts.py); NULL until one failed.
    cancel_requested_at = models.DateTimeField(_("cancellation requested"), null=True, blank=True, editable=False)
    attempt_log = models.JSONField(_("failed executions"), null=True, blank=True, editable=False)
    group = models.CharField(max_length=100, null=True, blank=True)
    cluster = models.CharField(max_length=100, null=True, blank=True)
    # Flow control (see policy/flow.py): at most concurrency_limit running jobs per key; the
    # rate limit of the job's task ("10/s"), shared by every job of that task.
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    rate_limit = models.CharField(max_length=20, null=True, blank=True)
    # The latest progress report of a running job (progress.py), written by its worker; read through
    # ``progress``, which hides a report of an earlier delivery.
    progress_report = models.JSONField(_("progress"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        # Apart from view_job: the arguments and results a job page shows (see docs/security.rst).
        permissions = [("view_job_payload", _("Can view job payload"))]
        indexes = [
            # The claim walks this small index: only ready rows are in it, however many
            # millions of finished rows the table holds.
            models.Index(
                fields=["queue", "-priority", "id"],
                condition=Q(state__in=READY_STATES),
                name="taskmq_job_ready",
            ),
            models.Index(fields=["lease_until"], condition=Q(state=State.RUNNING), name="taskmq_job_leased"),
            # The sweep that wakes durable jobs whose sleep ends (or whose wait times out) soon.
            models.Index(fields=["visible_at"], condition=Q(state=State.SUSPENDED), name="taskmq_job_suspended"),
            models.Index(fields=["lease_owner"], condition=Q(state=State.RUNNING), name="taskmq_job_owner"),
            models.Index(fields=["finished_at"], condition=Q(state=State.SUCCEEDED), name="taskmq_job_succeeded"),
            # The dashboard's and the metrics' failures of the last hour (FAILED and DEAD jobs).
            models.Index(fields=["finished_at"], condition=Q(state__in=[State.FAILED, State.DEAD]),
                         name="taskmq_job_failed"),
            # Retention: the expired and cancelled jobs, oldest first.
            models.Index(fields=["finished_at"], condition=Q(state__in=[State.EXPIRED, State.CANCELLED]),
                         name="taskmq_job_ended"),
            models.Index(fields=["group"], condition=Q(group__isnull=False), name="taskmq_job_group"),
            models.Index(fields=["state", "queue"], name="taskmq_job_state_queue"),
            # Counting the running jobs of a key: only running keyed rows are in it.
            models.Index(fields=["concurrency_key"], condition=Q(state=State.RUNNING, concurrency_key__isnull=False),
                         name="taskmq_job_key_running"),
        ]

    def __str__(self) -> str:
        return f"{self.task_name} [{self.id}]"

    @property
    def progress(self) -> dict[str, Any] | None:
        """The latest progress report of this job's latest delivery: ``{"done", "total", "message",
        "updated_at"}``, or None (see ``current_job().set_progress``)."""
        from .policy.progress import read

        return read(self.progress_report, self.deliveries)

    @property
    def success(self) -> bool:
        return self.state == State.SUCCEEDED

    @property
    def result(self) -> Any:
        """The task's return value (None when there is none).

        Raises :class:`~django_taskmq.exceptions.UnreadableResult` when the stored result fails
        verification (a forged or tampered row) or no longer unpickles.
        """
        if self.result_package is None:
            return None
        cached = self.__dict__.get("_result")
        if cached is not None and cached[0] is self.result_package:
            return cached[1]
        value = verify_result(self.result_package, get_settings().name)
        self.__dict__["_result"] = (self.result_package, value)
        return value

    @property
    def result_error(self) -> str:
        """Why the stored result cannot be read ("" when it can, or when there is none)."""
        try:
            self.result
        except UnreadableResult as exc:
            return f"unreadable result: {exc}"
        return ""

    # -- django-q2's Task names, so code written for it (hooks, fetch()) reads a Job unchanged --
    @property
    def name(self) -> str:
        """django-q2's ``Task.name``: the task name (``task_name``)."""
        return self.task_name

    @property
    def started(self) -> datetime.datetime | None:
        """django-q2's ``Task.started``: when the task was enqueued (``enqueued_at``)."""
        return self.enqueued_at

    @property
    def stopped(self) -> datetime.datetime | None:
        """django-q2's ``Task.stopped``: when the last execution finished (``finished_at``)."""
        return self.finished_at

    @property
    def attempt_count(self) -> int:
        """django-q2's ``Task.attempt_count``: the executions recorded (``attempt``)."""
        return self.attempt

    def time_taken(self) -> float | None:
        """django-q2's ``Task.time_taken()``: seconds from enqueue to finish, queue wait included."""
        if self.enqueued_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.enqueued_at).total_seconds()

    @property
    def args(self) -> tuple | None:
        """The call's positional arguments, read from the verified package (None if it does not verify)."""
        envelope = self._envelope()
        return envelope.args if envelope is not None else None

    @property
    def kwargs(self) -> dict | None:
        """The call's keyword arguments, read from the verified package (None if it does not verify)."""
        envelope = self._envelope()
        return envelope.kwargs if envelope is not None else None

    @property
    def hook(self) -> str | None:
        """The dotted path of the job's hook, read from the verified package."""
        envelope = self._envelope()
        return envelope.options.get("hook") if envelope is not None else None

    def _envelope(self) -> Any:
        try:
            return verify(self.payload, get_settings().name)
        except BadPackage:
            return None

    def group_result(self, failures: bool = False) -> list | None:
        """django-q2's ``Task.group_result()``: the results of this job's group (with ``failures``, the
        errors of its failed jobs too), in enqueue order; None without a group."""
        if not self.group:
            return None
        jobs = Job.objects.using(get_settings().database).filter(group=self.group).order_by("id")
        if failures:
            return [j.result if j.state == State.SUCCEEDED else j.error for j in jobs.filter(state__in=FINAL_STATES)]
        return [j.result for j in jobs.filter(state=State.SUCCEEDED)]

    def group_count(self, failures: bool = False) -> int | None:
        """django-q2's ``Task.group_count()``: how many of its group's jobs finished (with ``failures``,
        how many failed or died); None without a group."""
        if not self.group:
            return None
        states = [State.FAILED, State.DEAD] if failures else FINAL_STATES
        return Job.objects.using(get_settings().database).filter(group=self.group, state__in=states).count()

    @property
    def visible_time(self) -> datetime.datetime | None:
        return _from_epoch(self.visible_at)

    @property
    def expires_time(self) -> datetime.datetime | None:
        return _from_epoch(self.expires_at)

    @property
    def lease_until_time(self) -> datetime.datetime | None:
        return _from_epoch(self.lease_until)


class DeadLetter(models.Model):
    """One dead-lettered delivery of a job, with why it died; replayable."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dead_letters")
    queue = models.CharField(max_length=100)
    # The job's task name, copied when the letter is written: the admin searches letters by it
    # without a join to the job table (millions of rows).
    task_name = models.CharField(max_length=255, blank=True, default="")
    reason = models.TextField()
    error = models.TextField(_("last error"), blank=True, default="")
    deliveries = models.PositiveIntegerField(default=0)
    failed_at = models.DateTimeField(default=timezone.now)
    replayed_at = models.DateTimeField(null=True, blank=True)
    replay_count = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")
        ordering = ["-failed_at", "-id"]
        indexes = [
            models.Index(fields=["queue"], condition=Q(replayed_at__isnull=True), name="taskmq_dead_pending"),
            # The admin's list, newest first, a page at a time.
            models.Index(fields=["-failed_at", "-id"], name="taskmq_dead_failed_at"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} in {self.queue}: {self.reason}"


class Schedule(models.Model):
    """A task enqueued repeatedly: an interval type (as django-q2) or a cron expression."""

    TYPE_CHOICES = [(t.value, t.name.title()) for t in ScheduleType]
    ONCE = ScheduleType.ONCE.value
    MINUTES = ScheduleType.MINUTES.value
    HOURLY = ScheduleType.HOURLY.value
    DAILY = ScheduleType.DAILY.value
    WEEKLY = ScheduleType.WEEKLY.value
    BIWEEKLY = ScheduleType.BIWEEKLY.value
    MONTHLY = ScheduleType.MONTHLY.value
    BIMONTHLY = ScheduleType.BIMONTHLY.value
    QUARTERLY = ScheduleType.QUARTERLY.value
    YEARLY = ScheduleType.YEARLY.value
    CRON = ScheduleType.CRON.value

    name = models.CharField(max_length=100, unique=True)
    func = models.CharField(_("function"), max_length=255)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    schedule_type = models.CharField(max_length=2, choices=TYPE_CHOICES, default=ONCE)
    minutes = models.PositiveIntegerField(null=True, blank=True)
    cron = models.CharField(max_length=100, null=True, blank=True)
    repeats = models.IntegerField(default=-1, help_text=_("n = n times, -1 = forever"))
    next_run = models.DateTimeField(default=timezone.now, db_index=True)
    queue = models.CharField(max_length=100, null=True, blank=True)
    priority = models.SmallIntegerField(default=0)
    catch_up = models.BooleanField(null=True, blank=True, help_text=_("empty = TASKMQ['catch_up']"))
    last_job = models.CharField(max_length=32, null=True, blank=True)
    paused = models.BooleanField(default=False, help_text=_("a paused schedule does not fire until resumed"))
    hook = models.CharField(max_length=255, null=True, blank=True,
                            help_text=_("dotted path called with each finished job, as async_task's hook"))
    intended_date_kwarg = models.CharField(max_length=100, null=True, blank=True,
                                           help_text=_("keyword argument that receives the run's due time "
                                                       "(ISO 8601)"))
    options = models.JSONField(default=dict, blank=True,
                               help_text=_("more async_task options for each run, e.g. {\"timeout\": 30}"))
    tz = models.CharField(_("time zone"), max_length=64, blank=True, default="",
                          help_text=_("IANA name the schedule's times are read in, e.g. Europe/Berlin; "
                                      "empty = the project's TIME_ZONE"))

    def zone(self) -> datetime.tzinfo:
        """The time zone the schedule's wall-clock steps (daily and longer, cron) are computed in."""
        return cron_policy.zone(self.tz) if self.tz else timezone.get_current_timezone()

    def clean(self) -> None:
        """Refuse a function that schedules may not name, and a broken cron or interval."""
        errors = {}
        settings = get_settings()
        try:
            check_allowed(self.func, settings)
        except ConfigError as exc:
            errors["func"] = str(exc)
        try:
            cron_policy.validate(ScheduleType(self.schedule_type), self.minutes, self.cron)
        except (ConfigError, ValueError) as exc:
            errors["cron" if self.schedule_type == self.CRON else "minutes"] = str(exc)
        if self.queue:
            try:
                settings.check_queue(self.queue)
            except ConfigError as exc:
                errors["queue"] = str(exc)
        if self.hook:
            try:
                check_allowed(self.hook, settings)
            except ConfigError as exc:
                errors["hook"] = str(exc)
        if not isinstance(self.args, list):
            errors["args"] = f"args must be a JSON list, got {self.args!r}"
        if not isinstance(self.kwargs, dict):
            errors["kwargs"] = f"kwargs must be a JSON object, got {self.kwargs!r}"
        if self.tz:
            try:
                cron_policy.zone(self.tz)
            except ConfigError as exc:
                errors["tz"] = str(exc)
        if self.intended_date_kwarg and not self.intended_date_kwarg.isidentifier():
            errors["intended_date_kwarg"] = f"{self.intended_date_kwarg!r} is not a keyword argument name"
        try:
            check_schedule_options(self.options, settings)
        except ConfigError as exc:
            errors["options"] = str(exc)
        if errors:
            raise ValidationError(errors)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; a new cron schedule due now (the field's default) gets its ``next_run`` from its
        expression instead, as django-q2's does. A later ``next_run`` (the admin's form) is kept,
        and so is any given to :func:`~django_taskmq.schedule`."""
        now = timezone.now()
        due_now = isinstance(self.next_run, datetime.datetime) and timezone.is_aware(self.next_run) \
            and self.next_run <= now
        if self._state.adding and self.schedule_type == self.CRON and self.cron and due_now:
            try:
                self.next_run = cron_policy.next_after(ScheduleType.CRON, now, cron=self.cron,
                                                       tz=self.zone()) or self.next_run
            except (ConfigError, ValueError):
                pass  # a broken expression is the scheduler's to report: it disables the schedule
        super().save(*args, **kwargs)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["next_run"]

    def __str__(self) -> str:
        return self.name


class Imported(models.Model):
    """One row carried over from another task queue's tables (``manage.py qimport_djangoq``).

    ``source`` names the table (``django_q_schedule``, ``django_q_ormq``, ``django_q_task``),
    ``source_id`` the row (a schedule's id, a task's id) and ``target`` what it became here (a
    schedule's id, a job's id). A second import skips what is recorded here.
    """

    source = models.CharField(max_length=40)
    source_id = models.CharField(max_length=100)
    target = models.CharField(max_length=100)
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("imported row")
        constraints = [models.UniqueConstraint(fields=["source", "source_id"], name="taskmq_imported_once")]

    def __str__(self) -> str:
        return f"{self.source}:{self.source_id} -> {self.target}"


class FlowBucket(models.Model):
    """One rate limit's state, shared by every cluster: the moment its next start is allowed.

    ``key`` is ``task:<function path>`` or ``queue:<name>``; ``tat`` is the theoretical arrival
    time of the generic cell rate algorithm (epoch seconds).
    """

    key = models.CharField(primary_key=True, max_length=300)
    tat = models.FloatField(default=0.0)

    class Meta:
        verbose_name = _("rate limit")

    def __str__(self) -> str:
        return self.key


class QueueState(models.Model):
    """Per-queue ``served`` counter of the pick rule, shared by every cluster."""

    queue = models.CharField(primary_key=True, max_length=100)
    served = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = _("queue state")


class QueuePause(models.Model):
    """A queue no cluster claims from until it is resumed (``pause_queue``); enqueues still succeed."""

    queue = models.CharField(primary_key=True, max_length=100)
    paused_at = models.DateTimeField(default=timezone.now)
    paused_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        verbose_name = _("paused queue")

    def __str__(self) -> str:
        return self.queue


class OutcomeCount(models.Model):
    """The throughput rollup: the executions that succeeded and failed (ended FAILED or DEAD) per
    queue in each :data:`~django_taskmq.policy.throughput.SLOT` of seconds, added to in the
    transaction that records them. Retention and ``save_limit`` delete job rows; these stay (a day),
    so the dashboard's throughput does not fall when old jobs are pruned."""

    at = models.DateTimeField(_("slot start"))
    queue = models.CharField(max_length=100)
    succeeded = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = _("outcome count")
        constraints = [models.UniqueConstraint(fields=["at", "queue"], name="taskmq_outcome_slot")]

    def __str__(self) -> str:
        return f"{self.queue} at {self.at}: {self.succeeded} succeeded, {self.failed} failed"


class TimingCount(models.Model):
    """The timing rollup behind the wait and run time histograms: per queue, task and
    :data:`~django_taskmq.policy.throughput.SLOT` of seconds, for one bucket of
    :data:`~django_taskmq.policy.distribution.BUCKETS` (its index; one past the last is +Inf), the
    final outcomes whose wait and whose run fell in it and their seconds (see
    :mod:`~django_taskmq.policy.timings`). Written with :class:`OutcomeCount`, kept as long."""

    at = models.DateTimeField(_("slot start"))
    queue = models.CharField(max_length=100)
    task_name = models.CharField(_("task name"), max_length=255)
    bucket = models.PositiveSmallIntegerField()
    waits = models.PositiveBigIntegerField(default=0)
    wait_seconds = models.FloatField(default=0.0)
    runs = models.PositiveBigIntegerField(default=0)
    run_seconds = models.FloatField(default=0.0)

    class Meta:
        verbose_name = _("timing count")
        constraints = [models.UniqueConstraint(fields=["at", "queue", "task_name", "bucket"],
                                               name="taskmq_timing_slot")]

    def __str__(self) -> str:
        return (f"{self.task_name} in {self.queue} at {self.at}, bucket {self.bucket}: "
                f"{self.waits} waits, {self.runs} runs")


class Chore(models.Model):
    """Upkeep that one cluster at a time does for all (deleting old jobs): who holds it, until when
    (epoch seconds, renewed while the holder runs), and what it did."""

    name = models.CharField(primary_key=True, max_length=50)
    owner = models.CharField(max_length=100, blank=True, default="")
    until = models.FloatField(default=0.0)
    deleted = models.BigIntegerField(_("rows deleted"), default=0)
    last_run = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("chore")

    def __str__(self) -> str:
        return self.name


class IdempotencyKey(models.Model):
    """An idempotency key and the job it created, until ``expires_at`` (epoch seconds)."""

    key = models.CharField(primary_key=True, max_length=255)
    job_id = models.CharField(max_length=32)
    expires_at = models.FloatField()

    class Meta:
        verbose_name = _("idempotency key")


class UniqueKey(models.Model):
    """A coalescing key (``async_task(unique_key=...)``), the job that holds it, and the job states
    (comma-separated, e.g. ``QUEUED,RETRYING``) during which it holds. One row per distinct key:
    a row whose job left those states, or is gone, is taken over by the key's next enqueue."""

    key = models.CharField(primary_key=True, max_length=255)
    job_id = models.CharField(max_length=32)
    states = models.CharField(max_length=64)

    class Meta:
        verbose_name = _("coalescing key")


class Cluster(models.Model):
    """The heartbeat a running cluster publishes (read by ``qinfo`` and the admin)."""

    id = models.CharField(primary_key=True, max_length=64)
    name = models.CharField(max_length=100)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    state = models.CharField(max_length=20)
    workers = models.IntegerField(default=0)
    queues = models.JSONField(default=list)
    counts = models.JSONField(default=dict)
    started_at = models.DateTimeField(default=timezone.now)
    beat_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("cluster")
        ordering = ["name", "host"]

    def __str__(self) -> str:
        return f"{self.name}@{self.host}:{self.pid}"


class WorkflowStates(models.TextChoices):
    RUNNING = WorkflowState.RUNNING.value, _("running")
    SUCCEEDED = WorkflowState.SUCCEEDED.value, _("succeeded")
    FAILED = WorkflowState.FAILED.value, _("failed")
    CANCELLED = WorkflowState.CANCELLED.value, _("cancelled")


class Workflow(models.Model):
    """A graph of jobs (``django_taskmq.Workflow``): its steps wait for each other in the database.

    ``open_steps`` counts the steps that have not ended; the transaction that ends the last one
    sets ``state`` (see ``policy/workflow.py``) and ``finished_at``. A replay reopens it."""

    id = models.CharField(primary_key=True, max_length=32, editable=False)
    name = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=10, choices=WorkflowStates.choices, default=WorkflowStates.RUNNING)
    open_steps = models.PositiveIntegerField(_("steps not ended"), default=0)
    cancelled = models.BooleanField(_("cancel requested"), default=False)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        indexes = [models.Index(fields=["state", "created_at"], name="taskmq_workflow_state")]

    def __str__(self) -> str:
        return self.name or self.id


class WorkflowStep(models.Model):
    """A job of a workflow: its name in the graph and what it still waits for.

    ``waiting_for`` counts the dependencies not yet satisfied; the job leaves WAITING in the
    transaction that brings it to 0. ``ended`` says its own end was counted in the workflow
    (so that recording it twice, by two paths, counts once); ``cancelled_by`` is the step whose
    end cancelled it, which a replay of that step undoes."""

    job = models.OneToOneField(Job, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False,
                               related_name="workflow_step")
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=100)
    waiting_for = models.PositiveIntegerField(default=0)
    run_on_failure = models.BooleanField(default=False)
    ended = models.BooleanField(default=False)
    cancelled_by = models.CharField(max_length=32, null=True, blank=True)

    class Meta:
        verbose_name = _("workflow step")
        constraints = [models.UniqueConstraint(fields=["workflow", "name"], name="taskmq_step_name")]
        indexes = [models.Index(fields=["cancelled_by"], condition=Q(cancelled_by__isnull=False),
                                name="taskmq_step_cancelled_by")]

    def __str__(self) -> str:
        return self.name


class WorkflowEdge(models.Model):
    """``downstream`` waits for ``upstream`` (job ids); ``done`` once the upstream's end satisfied it."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="edges")
    upstream = models.CharField(max_length=32, db_index=True)
    downstream = models.CharField(max_length=32, db_index=True)
    done = models.BooleanField(default=False)

    class Meta:
        verbose_name = _("workflow dependency")


class StepKind(models.TextChoices):
    STEP = "step", _("step")
    SLEEP = "sleep", _("sleep")
    WAIT = "wait", _("wait for a signal")


#: The wake time of a wait without a timeout (9999-12-31, epoch s): only its signal makes it visible.
NEVER_WAKES = 253402300799.0


class JobStep(models.Model):
    """What a durable task has done, kept so that a later run of its job does not do it again
    (see ``durable_context.py``): a step's signed result, a sleep's wake time, a wait's deadline and the
    signal's payload. Written once, by the delivery that holds the job's lease."""

    # No database constraint: retention deletes jobs by raw statements, which delete these first.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, db_constraint=False, related_name="steps")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=5, choices=StepKind.choices, default=StepKind.STEP)
    # SHA-256 of the step's arguments: the same name reached with other arguments is an error.
    digest = models.CharField(max_length=64, blank=True, default="")
    # Read through ``result``, which verifies before it unpickles.
    result_package = models.TextField(_("signed result"), null=True, blank=True, editable=False)
    wake_at = models.FloatField(_("wakes at (epoch s)"), null=True, blank=True)
    signal_name = models.CharField(_("waits for signal"), max_length=100, blank=True, default="")
    done = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("durable step")
        verbose_name_plural = _("durable steps")
        ordering = ["job", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="taskmq_jobstep_name")]
        # Counting the jobs that sleep or wait (qinfo, metrics).
        indexes = [models.Index(fields=["kind"], condition=Q(done=False), name="taskmq_jobstep_pending")]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.name}"

    @property
    def result(self) -> Any:
        """The step's stored value (None when there is none); raises :class:`UnreadableResult`
        when it fails verification."""
        if self.result_package is None:
            return None
        return verify_result(self.result_package, get_settings().name)

    @property
    def wake_time(self) -> datetime.datetime | None:
        return _from_epoch(self.wake_at)


class JobSignal(models.Model):
    """A signal sent to a job (``django_taskmq.send_signal``): kept until a ``ctx.wait_for`` of
    that name takes it, so a signal sent before the task reaches its wait is not lost."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, db_constraint=False, related_name="signals")
    name = models.CharField(max_length=100)
    payload_package = models.TextField(_("signed payload"), null=True, blank=True, editable=False)
    sent_at = models.DateTimeField(default=timezone.now)
    consumed = models.BooleanField(default=False)

    class Meta:
        verbose_name = _("signal")
        verbose_name_plural = _("signals")
        ordering = ["job", "id"]
        indexes = [models.Index(fields=["job", "name"], condition=Q(consumed=False), name="taskmq_signal_pending")]

    def __str__(self) -> str:
        return f"{self.name} -> {self.job_id}"
