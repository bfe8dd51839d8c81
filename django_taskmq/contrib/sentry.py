"""Report failed jobs to Sentry: ``TASKMQ['error_reporter'] = 'django_taskmq.contrib.sentry.report'``.

The project initialises ``sentry-sdk`` as usual (``sentry_sdk.init(dsn=...)`` in its settings);
each failed execution becomes one event with the job's tags (``taskmq.task``, ``taskmq.queue``,
``taskmq.priority``, ``taskmq.attempt``, ``taskmq.job_id``, ``taskmq.state``) and a ``taskmq``
context. The task's arguments are sent only by a reporter made with ``send_arguments=True``
(``report_with_arguments``, or your own ``Reporter(...)`` named by the setting): they may hold
personal data. Even then, the names ``TASKMQ['redact']`` lists are masked (in the context and in
the frames' local variables), and a job with encrypted arguments sends none of them: neither in
the context nor in any frame's local variables.
"""

from __future__ import annotations

from typing import Any

from ..conf import get_settings
from ..policy.redaction import redact
from ..observability.reporting import FailedJob

try:
    from sentry_sdk.integrations.logging import ignore_logger
except ImportError:  # sentry-sdk is not installed: the reporter says so when called
    pass
else:
    # The reporter sends each failure with its traceback; the log record of a job's final failure
    # (an ERROR of django_taskmq.jobs) would be a second event for it (Celery's integration ignores
    # its job logger for the same reason).
    ignore_logger("django_taskmq.jobs")


class Reporter:
    """An error reporter ``(exc, job)`` that sends each failure to Sentry as one event."""

    def __init__(self, send_arguments: bool = False) -> None:
        self.send_arguments = send_arguments

    def __call__(self, exc: BaseException, job: FailedJob) -> Any:
        import sentry_sdk

        with sentry_sdk.new_scope() as scope:
            for name, value in tags(job).items():
                scope.set_tag(name, value)
            scope.set_context("taskmq", context(job, self.send_arguments))
            if not self.send_arguments or job.encrypted:
                # The task's frame holds its arguments as local variables (include_local_variables).
                scope.add_event_processor(without_local_variables)
            else:
                scope.add_event_processor(redacted_local_variables)
            # Grouped by task and exception, as Sentry groups a web view's errors by view.
            return sentry_sdk.capture_exception(exc)

    def flush(self, timeout: float) -> None:
        """Send the events still buffered (a worker calls it as it ends; see ``reporting.close``)."""
        import sentry_sdk

        sentry_sdk.flush(timeout=timeout)


def tags(job: FailedJob) -> dict[str, str]:
    """The tags of a failed job's event (strings: Sentry's tags are)."""
    return {"taskmq.task": job.task, "taskmq.queue": job.queue, "taskmq.priority": str(job.priority),
            "taskmq.attempt": str(job.attempt), "taskmq.job_id": job.id, "taskmq.state": job.state}


def context(job: FailedJob, send_arguments: bool = False) -> dict[str, Any]:
    """The ``taskmq`` context of a failed job's event; the arguments only with ``send_arguments``."""
    data: dict[str, Any] = {"job_id": job.id, "task": job.task, "queue": job.queue, "priority": job.priority,
                            "attempt": job.attempt, "max_deliveries": job.max_deliveries, "state": job.state,
                            "final": job.final, "cluster": job.cluster}
    if send_arguments:
        data["args"] = list(job.args)
        data["kwargs"] = dict(job.kwargs)
    return data


def without_local_variables(event: Any, hint: Any = None) -> Any:
    """Drop the local variables of every frame of ``event``'s exceptions (they hold the arguments)."""
    for exception in (event.get("exception") or {}).get("values") or ():
        for frame in (exception.get("stacktrace") or {}).get("frames") or ():
            frame.pop("vars", None)
    return event


def redacted_local_variables(event: Any, hint: Any = None) -> Any:
    """Mask the local variables of ``event``'s frames that ``TASKMQ['redact']`` names (and such
    keys inside the dicts they hold); drop those of django_taskmq's own frames, which hold the
    whole call (its envelope) in reprs that no name masks."""
    names = get_settings().redact
    for exception in (event.get("exception") or {}).get("values") or ():
        for frame in (exception.get("stacktrace") or {}).get("frames") or ():
            if str(frame.get("module") or "").startswith("django_taskmq"):
                frame.pop("vars", None)
            elif isinstance(frame.get("vars"), dict):
                frame["vars"] = redact(frame["vars"], names)
    return event


#: The reporter to name in ``TASKMQ['error_reporter']``: the job's arguments are not sent.
report = Reporter()
#: The same, sending the job's arguments in the ``taskmq`` context.
report_with_arguments = Reporter(send_arguments=True)
