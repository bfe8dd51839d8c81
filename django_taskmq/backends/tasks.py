"""A ``django.tasks`` backend (Django 6.0+): Django's task API on top of django_taskmq.

    TASKS = {"default": {"BACKEND": "django_taskmq.backends.tasks.TaskMQBackend"}}

What maps: ``priority`` (must be in django_taskmq's -9..9; outside is ``InvalidTask``, never
clamped), ``queue_name`` (one of ``TASKMQ['queues']``), ``run_after`` (the job's ``eta``),
``get_result`` (from the Job row). What does not: ``takes_context`` tasks and coroutine tasks
are refused by ``validate_task``. Results are stored pickled, as every django_taskmq result.
"""

from __future__ import annotations

from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.utils.module_loading import import_string

from ..api import async_task
from ..conf import get_settings
from ..exceptions import ConfigError
from ..models import Job, State
from ..policy.priority import MAX_PRIORITY, MIN_PRIORITY
from ..signing import verify

STATUS = {
    State.QUEUED: TaskResultStatus.READY,
    State.RETRYING: TaskResultStatus.READY,
    State.RUNNING: TaskResultStatus.RUNNING,
    State.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    State.FAILED: TaskResultStatus.FAILED,
    State.DEAD: TaskResultStatus.FAILED,
    State.EXPIRED: TaskResultStatus.FAILED,
    State.CANCELLED: TaskResultStatus.FAILED,
}


class TaskMQBackend(BaseTaskBackend):
    """Enqueue ``django.tasks`` tasks as django_taskmq jobs; a ``qcluster`` runs them."""

    supports_defer = True
    supports_get_result = True
    supports_priority = True
    supports_async_task = False

    def __init__(self, alias, params):
        super().__init__(alias, params)
        if "QUEUES" not in params:
            self.queues = set()  # TASKMQ['queues'] is the list of valid queues

    def validate_task(self, task) -> None:
        super().validate_task(task)
        if task.takes_context:
            raise InvalidTask("django_taskmq does not pass a TaskContext: use django_taskmq.current_job() instead.")
        if not MIN_PRIORITY <= task.priority <= MAX_PRIORITY:
            raise InvalidTask(f"django_taskmq priorities are {MIN_PRIORITY}..{MAX_PRIORITY}, got {task.priority}.")
        try:
            get_settings().check_queue(task.queue_name)
        except ConfigError as exc:
            raise InvalidTask(str(exc)) from None

    def enqueue(self, task, args, kwargs) -> TaskResult:
        self.validate_task(task)
        options = {"queue": task.queue_name, "priority": task.priority, "eta": task.run_after}
        job_id = async_task(task.module_path, *args, q_options=options, **kwargs)
        return self.get_result(job_id)

    def get_result(self, result_id: str) -> TaskResult:
        job = Job.objects.using(get_settings().database).filter(pk=result_id).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        task = import_string(job.func)
        if not hasattr(task, "using"):
            raise TaskResultDoesNotExist(f"{result_id} is not a django.tasks task")
        envelope = verify(job.payload, get_settings().name)
        errors = []
        if job.error and job.state != State.SUCCEEDED:
            errors.append(TaskError(exception_class_path=_exception_path(job.error), traceback=job.traceback))
        result = TaskResult(
            task=task.using(priority=job.priority, queue_name=job.queue, backend=self.alias),
            id=job.id,
            status=STATUS[job.state],
            enqueued_at=job.enqueued_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            last_attempted_at=job.started_at,
            args=list(envelope.args),
            kwargs=dict(envelope.kwargs),
            backend=self.alias,
            errors=errors,
            worker_ids=[job.cluster or ""] * job.attempt,
        )
        object.__setattr__(result, "_return_value", job.result)
        return result


def _exception_path(error: str) -> str:
    """Return the exception class path an error line starts with ("pkg.Error: message")."""
    name = error.split(":", 1)[0].strip()
    if "." not in name:
        name = f"builtins.{name}"
    try:
        import_string(name)
    except ImportError:
        return "builtins.Exception"
    return name
