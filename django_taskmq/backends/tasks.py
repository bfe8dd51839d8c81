"""A backend for Django's tasks framework: ``django.tasks`` (Django 6.0+) or the ``django-tasks``
backport (module ``django_tasks``, Django 5.2), on top of django_taskmq.

    TASKS = {"default": {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend"}}

Any valid Django task runs: every priority (-100..100, mapped onto ours by :func:`to_taskmq`),
``takes_context`` (a :class:`TaskContext` built by :meth:`TaskMQBackend.task_context` in the
worker), coroutine functions (run with ``async_to_sync`` in the worker), ``run_after``, queues.
Results are read from the Job (its signed, verified result); ``task_started`` is sent in the
worker, ``task_finished`` where the outcome is recorded (the monitor, or the caller in sync mode).
"""

from __future__ import annotations

import datetime
import sys
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings as django_settings
from django.core import checks
from django.utils import timezone

try:  # Django 6.0+
    from django.utils.json import normalize_json
except ImportError:  # the django-tasks backport
    from django_tasks.utils import normalize_json
try:  # Django 6.0+
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

from ..conf import get_settings
from ..exceptions import ConfigError
from ..runtime.loading import is_django_task, resolve
from ..options import TASK_OPTIONS, check_names, validate_options
from ..policy import attempts as history
from ..policy.priority import MAX_PRIORITY
from ..policy.states import JobState as State
from ..signals import post_execute, pre_execute
from ..envelope import verify

if TYPE_CHECKING:
    from ..models import Job

# Nothing here imports django_taskmq's models or API at import time: TASKS may name this backend in
# a project that defines Django tasks in a module Django imports while it loads the apps (an app's
# __init__ or apps.py), where @task builds the backend before any model can be imported. The
# methods that need them import them when called.

__all__ = ["TaskMQBackend", "to_taskmq", "to_django", "check_queues", "connect"]

DJANGO_MIN_PRIORITY, DJANGO_MAX_PRIORITY = -100, 100

STATUS = {
    State.WAITING: TaskResultStatus.READY,  # a workflow step waiting for its dependencies
    State.QUEUED: TaskResultStatus.READY,
    State.RETRYING: TaskResultStatus.READY,
    State.SUSPENDED: TaskResultStatus.READY,  # a durable task that sleeps or waits
    State.RUNNING: TaskResultStatus.RUNNING,
    State.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    State.FAILED: TaskResultStatus.FAILED,
    State.DEAD: TaskResultStatus.FAILED,
    State.EXPIRED: TaskResultStatus.FAILED,
    State.CANCELLED: TaskResultStatus.FAILED,
}
FINISHED = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}
# Options TASKS[alias]["OPTIONS"] may set for every task, or per task under "tasks": queue and
# priority come from the task itself.
BACKEND_OPTIONS = tuple(o for o in TASK_OPTIONS if o not in ("queue", "priority"))


def to_taskmq(priority: int) -> int:
    """Map a Django priority (-100..100) onto django_taskmq's (-9..9), monotonically.

    ``sign(p) * ceil(|p| * 9 / 100)``: 0 stays 0, 1..11 -> 1, 12..22 -> 2, ..., 89..100 -> 9 (and
    the same below zero), so a higher Django priority never lands in a lower band.
    """
    magnitude = -(-abs(priority) * MAX_PRIORITY // DJANGO_MAX_PRIORITY)
    return magnitude if priority >= 0 else -magnitude


def to_django(priority: int) -> int:
    """Return the highest Django priority of the band ``priority`` (-9..9) is: the inverse of
    :func:`to_taskmq` for jobs enqueued through our API."""
    magnitude = abs(priority) * DJANGO_MAX_PRIORITY // MAX_PRIORITY
    return magnitude if priority >= 0 else -magnitude


class TaskMQBackend(BaseTaskBackend):
    """Enqueue Django tasks as django_taskmq jobs; a ``qcluster`` runs them.

    ``OPTIONS`` may hold django_taskmq task options (``retry``, ``timeout``, ``max_deliveries``,
    ``ack_failure``, ...) applied to every task of this backend, and ``"tasks": {"app.tasks.f":
    {...}}`` for one task's own (they win).
    """

    supports_defer = True
    supports_get_result = True
    supports_priority = True
    supports_async_task = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.queues_given = "QUEUES" in params
        if not self.queues_given:
            self.queues = set()  # TASKMQ['queues'] is the list of valid queues
        options = dict(self.options)
        per_task = options.pop("tasks", None) or {}
        try:
            self.q_options = self._check_options(options, "OPTIONS")
            self.task_options = {path: self._check_options(dict(o), f"OPTIONS['tasks'][{path!r}]")
                                 for path, o in per_task.items()}
        except ConfigError as exc:
            raise InvalidTask(f"TASKS[{alias!r}]: {exc}") from None

    @staticmethod
    def _check_options(options: dict, where: str) -> dict:
        check_names(options, BACKEND_OPTIONS, f"{where}: ")
        validate_options(options)
        return options

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Django's system check of this backend: its jobs live in django_taskmq's tables, so the app
        must be installed (``taskmq.E051``)."""
        messages = list(super().check(**kwargs))
        if not apps.is_installed("django_taskmq"):
            messages.append(checks.Error(
                f"TASKS[{self.alias!r}] uses TaskMQBackend, but 'django_taskmq' is not in INSTALLED_APPS",
                hint="Add 'django_taskmq' to INSTALLED_APPS (and run migrate): its jobs are stored in its tables.",
                id="taskmq.E051"))
        return messages

    def validate_task(self, task) -> None:
        if getattr(task.func, "taskmq_task", False):  # Django's @task above ours: Django would say "not a function"
            raise InvalidTask(f"{task.func.path}: Django's @task got a django_taskmq task; for a durable Django "
                              "task put @durable above @task")
        super().validate_task(task)  # Django's range, context argument, run_after, QUEUES
        try:
            get_settings().check_queue(task.queue_name)
        except ConfigError as exc:
            raise InvalidTask(str(exc)) from None

    def enqueue(self, task, args, kwargs) -> TaskResult:
        """Store the call as a job; in sync mode run it here, after ``task_enqueued`` (Django's order).

        Every check (Django's own JSON check of the arguments among them) runs before the insert:
        a call that raises stores nothing.
        """
        self.validate_task(task)
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        # A durable task's own options (@durable(...)) come between the backend's and the task's OPTIONS.
        options = {**self.q_options, **getattr(task.func, "taskmq_options", {}),
                   **self.task_options.get(task.module_path, {}),
                   "queue": task.queue_name, "priority": to_taskmq(task.priority),
                   "django_priority": task.priority, "eta": task.run_after,
                   "django_run_after": task.run_after.isoformat() if task.run_after is not None else None}
        from ..api import async_task, run_sync

        # Run inline only once task_enqueued has gone: a receiver sees the job READY, as Django's
        # ImmediateBackend sends it.
        job_id = async_task(task.module_path, *args, q_options={**options, "sync": False}, **kwargs)
        result = self.get_result(job_id)
        task_enqueued.send(type(self), task_result=result)
        if get_settings().sync:
            run_sync(job_id)
            result = self.get_result(job_id)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        from ..models import Job

        job = Job.objects.using(get_settings().database).filter(pk=result_id).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result(job)

    def _result(self, job: "Job", running: datetime.datetime | None = None) -> TaskResult:
        """The TaskResult of ``job``; ``running`` is the start of the execution under way (in a worker)."""
        # The path comes from the signed package, never from the plain ``func`` column: a row
        # written into the table must not make this process import a module of its choice.
        envelope = verify(job.payload, get_settings().name)
        try:
            task = resolve(envelope.func)
        except (ImportError, AttributeError):
            raise TaskResultDoesNotExist(f"{job.id}: its task {envelope.func} cannot be imported") from None
        if not is_django_task(task):
            raise TaskResultDoesNotExist(f"{job.id} is not a Django task")
        priority = envelope.options.get("django_priority")
        if priority is None:  # enqueued through our API: the task's own if it is in the band
            priority = task.priority if to_taskmq(task.priority) == job.priority else to_django(job.priority)
        status = STATUS[State(job.state)]
        attempts = job.attempt
        # The first execution's start (started_at is the latest's; a row from before migration 0008
        # has only that one).
        started, last = job.first_started_at or job.started_at, job.started_at
        if running is not None:
            attempts, status, last = attempts + 1, TaskResultStatus.RUNNING, running
            started = started or running
        finished = job.finished_at if status in FINISHED else None
        if status == TaskResultStatus.FAILED and finished is None:
            finished = job.started_at or job.enqueued_at  # expired or cancelled before it ran
        run_after = envelope.options.get("django_run_after")
        result = TaskResult(
            task=task.using(priority=priority, queue_name=job.queue, backend=self.alias,
                            run_after=datetime.datetime.fromisoformat(run_after) if run_after else None),
            id=job.id,
            status=status,
            enqueued_at=job.enqueued_at,
            started_at=started,
            finished_at=finished,
            last_attempted_at=last,
            args=list(envelope.args),
            kwargs=dict(envelope.kwargs),
            backend=self.alias,
            errors=_errors(job),
            worker_ids=[job.cluster or job.lease_owner or ""] * attempts,
        )
        if job.state == State.SUCCEEDED:
            object.__setattr__(result, "_return_value", job.result)  # verified: envelope.verify_result
        return result

    def task_context(self, job_id: str) -> TaskContext:
        """Return the :class:`TaskContext` of the execution of ``job_id`` starting now (in a worker)."""
        from ..models import Job

        job = Job.objects.using(get_settings().database).get(pk=job_id)
        return TaskContext(task_result=self._result(job, running=timezone.now()))


def _errors(job: "Job") -> list[TaskError]:
    """One TaskError per failed execution of ``job``, oldest first (the newest ``policy.attempts.KEEP``).

    They come from the job's attempt history; the newest one carries the job's own traceback,
    which is kept at full size. A job without a history (its failures recorded before migration
    0008, or an error that was no execution: a lease that ran out) reports its last error alone,
    unless it succeeded.
    """
    entries = history.entries(job.attempt_log)
    if not entries:
        if job.error and job.state != State.SUCCEEDED:
            return [TaskError(exception_class_path=_exception_path(job.error), traceback=job.traceback)]
        return []
    errors = [TaskError(exception_class_path=_exception_path(str(e.get("error") or "")),
                        traceback=str(e.get("traceback") or "")) for e in entries]
    if entries[-1].get("attempt") == job.attempt and job.traceback:
        errors[-1] = TaskError(exception_class_path=errors[-1].exception_class_path, traceback=job.traceback)
    return errors


def _exception_path(error: str) -> str:
    """Return the exception class path an error line starts with ("pkg.Error: message").

    The error is plain text (a task chooses its message; anyone who can write the table chooses
    the column), so nothing is imported here: a class of a module this process has not loaded is
    reported as ``builtins.Exception``.
    """
    name = error.split(":", 1)[0].strip()
    if "." not in name:
        name = f"builtins.{name}"
    module_name, _, attr = name.rpartition(".")
    found = getattr(sys.modules.get(module_name), attr, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return name
    return "builtins.Exception"


def _backend_of(func: str | None) -> TaskMQBackend | None:
    """Return our backend of the Django task ``func`` names, or None (another kind of task)."""
    if not func:
        return None
    try:
        target = resolve(func)
    except ImportError:
        return None
    if not is_django_task(target):
        return None
    backend = target.get_backend()
    return backend if isinstance(backend, TaskMQBackend) else None


def send_task_started(sender: Any, job_id: str, func: str, **kwargs: Any) -> None:
    """``pre_execute`` receiver (in the worker): send ``task_started`` for a Django task."""
    backend = _backend_of(func)
    if backend is not None and task_started.has_listeners():
        task_started.send(type(backend), task_result=backend.task_context(job_id).task_result)


def send_task_finished(sender: Any, job_id: str, func: str | None, **kwargs: Any) -> None:
    """``post_execute`` receiver (where the outcome was recorded): send ``task_finished`` once a
    Django task finished (SUCCESSFUL or FAILED; a failed attempt waiting for its retry is READY)."""
    backend = _backend_of(func)  # imports the task's module first: its receivers count too
    if backend is None or not task_finished.has_listeners():
        return
    try:
        result = backend.get_result(job_id)
    except TaskResultDoesNotExist:
        return
    if result.status in FINISHED:
        task_finished.send(type(backend), task_result=result)


def connect() -> None:
    """Connect the receivers that send Django's ``task_started`` and ``task_finished``."""
    pre_execute.connect(send_task_started, dispatch_uid="taskmq_django_task_started")
    post_execute.connect(send_task_finished, dispatch_uid="taskmq_django_task_finished")


def check_queues(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Warn when a TaskMQBackend's ``QUEUES`` and ``TASKMQ['queues']`` differ."""
    messages: list[checks.CheckMessage] = []
    try:
        ours = set(get_settings().queues)
    except ConfigError:
        return messages  # taskmq.E001 says why
    for alias, params in (getattr(django_settings, "TASKS", None) or {}).items():
        path = params.get("BACKEND", "")
        if not path.startswith(__name__) or "QUEUES" not in params:
            continue
        theirs = set(params["QUEUES"])
        if theirs != ours:
            messages.append(checks.Warning(
                f"TASKS[{alias!r}]['QUEUES'] and TASKMQ['queues'] differ: only in QUEUES: "
                f"{sorted(theirs - ours)}; only in TASKMQ['queues']: {sorted(ours - theirs)}",
                hint="A task on a queue only in QUEUES is refused (InvalidTask); one only in TASKMQ['queues'] "
                     "cannot be named by a Django task. List the same queues, or leave QUEUES out.",
                id="taskmq.W050"))
    return messages

