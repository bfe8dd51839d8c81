"""The public enqueue and result API: ``async_task``, ``enqueue_many``, ``result``, ``fetch``, ``cancel``; pausing a
queue: ``pause_queue``, ``resume_queue``, ``paused_queues``.

The producer side. Option checks and the job template live in :mod:`.options`; running a job
inline (sync mode) lives in :mod:`.runtime.inline`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from .runtime import cached_results, inline
from .brokers import get_broker
from .exceptions import ConfigError
from .conf import get_settings
from .models import FINAL_STATES, Job, State
from .options import CALL_OPTIONS, OPTIONS, JobTemplate
from .policy.backoff import Retry
from .signals import pre_enqueue

logger = logging.getLogger(__name__)


def async_task(func: Callable | str, *args: Any, queue: str | None = None, priority: int | None = None,
               key: str | None = None, delay: float | None = None, eta: Any = None, expires_at: Any = None,
               timeout: float | None = None, max_deliveries: int | None = None, ack_failure: bool | None = None,
               retry: Retry | None = None, hook: Callable | str | None = None,
               on_dead: Callable | str | None = None, group: str | None = None,
               task_name: str | None = None, sync: bool | None = None,
               concurrency_key: str | Callable[..., str] | None = None, concurrency_limit: int | None = None,
               rate_limit: str | None = None, cached: bool | float | None = None, save: bool | None = None,
               unique_key: str | None = None, unique_for: Iterable[str] | None = None,
               unique_replace: bool | None = None, encrypt: bool | Iterable[str] | None = None,
               q_options: dict | None = None, **kwargs: Any) -> str:
    """Enqueue ``func(*args, **kwargs)``; return the job id.

    ``func`` is a callable, a ``@task`` or a dotted path. Options whose names collide with the
    function's own keyword arguments go in ``q_options``: as in django-q2, a keyword argument named
    like an option that ``q_options`` also holds is passed to the function. Inside the
    caller's ``transaction.atomic()`` the job exists only if that transaction commits. With
    ``key``, a second call within ``TASKMQ['idempotency_ttl']`` returns the first job's id and
    enqueues nothing. With ``unique_key``, a second call while the key's job is in one of the
    states of ``unique_for`` (default: queued or retrying, before it runs) returns that job's id and
    enqueues nothing; ``unique_replace=True`` gives the waiting job this call's arguments and time
    instead (a debounce). ``cached`` (True, or seconds) also keeps the result in the Django cache
    (``TASKMQ['cache']``); ``save=False`` keeps none in the database. ``encrypt=True`` (or a list of
    keyword argument names) stores the arguments and the result encrypted with
    ``TASKMQ['encryption_keys']`` (see :doc:`/security`). Bad options raise
    :class:`~django_taskmq.ConfigError` here, at the call.
    """
    arguments = locals()
    given = {name: arguments[name] for name in CALL_OPTIONS}
    if q_options is None:
        q_options = {}
    if not isinstance(q_options, dict):
        raise ConfigError(f"q_options must be a dict, got {q_options!r}")
    options = {}
    for name, value in given.items():
        if name in q_options:
            if value is not None:  # the function's own argument, not the option
                kwargs[name] = value
        elif value is not None:
            options[name] = value
    # None means "not given" (Task.apply_async names options this way to keep kwargs for the function).
    options.update({k: v for k, v in q_options.items() if v is not None or k not in OPTIONS})
    settings = get_settings()
    template = JobTemplate(func, options, settings)
    if settings.opentelemetry:  # only then is opentelemetry imported
        from .observability import tracing

        common: dict[str, Any] = template.common
        with tracing.enqueue(common["task_name"], common["queue"], common["priority"]) as (span, carrier):
            job_id = _enqueue(template, args, kwargs, options, settings, carrier)
            tracing.enqueued(span, job_id)
        return job_id
    return _enqueue(template, args, kwargs, options, settings)


def _enqueue(template: JobTemplate, args: tuple, kwargs: dict, options: dict, settings: Any,
             trace: dict | None = None) -> str:
    values = template.values(args, kwargs, trace)
    if pre_enqueue.has_listeners():  # only then is a model instance worth building
        job = Job(**values)
        pre_enqueue.send(sender=Job, job=job)  # receivers may change the job's fields
        values = {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}
    unique = template.unique
    if unique is None:  # the common call: the contract's two-argument form
        job_id = get_broker().enqueue(values, key=values["key"])
    else:
        job_id = get_broker().enqueue(values, key=values["key"], unique=unique)
    run_inline = options.get("sync")
    if run_inline is None:
        run_inline = settings.sync
    if run_inline and job_id == values["id"]:
        run_sync(job_id)
    return job_id


def enqueue_many(func: Callable | str, calls: Iterable[Any], **options: Any) -> list[str]:
    """Enqueue many calls of ``func`` at once; return their ids in order.

    Each item of ``calls`` is an args tuple/list, or a ``(args, kwargs)`` pair given as a dict
    ``{"args": (...), "kwargs": {...}}``. Options apply to every call (no idempotency ``key``, no
    coalescing ``unique_key``).
    """
    if options.get("key") is not None:
        raise ConfigError("enqueue_many does not take key: idempotency keys are per call, use async_task")
    taken = sorted(name for name in ("unique_key", "unique_for", "unique_replace") if options.get(name) is not None)
    if taken:
        raise ConfigError(f"enqueue_many does not take {', '.join(taken)}: coalescing keys are per call, use async_task")
    settings = get_settings()
    template = JobTemplate(func, options, settings)
    if settings.opentelemetry:  # one producer span for the batch
        from .observability import tracing

        calls = list(calls)
        common: dict[str, Any] = template.common
        with tracing.enqueue(common["task_name"], common["queue"], common["priority"], batch=len(calls)) as (_, carrier):
            return _enqueue_many(template, calls, options, settings, carrier)
    return _enqueue_many(template, calls, options, settings)


def _enqueue_many(template: JobTemplate, calls: Iterable[Any], options: dict, settings: Any,
                  trace: dict | None = None) -> list[str]:
    rows = []
    for call in calls:
        if isinstance(call, dict):
            args, kwargs = tuple(call.get("args", ())), dict(call.get("kwargs", {}))
        elif isinstance(call, (tuple, list)):
            args, kwargs = tuple(call), {}
        else:
            args, kwargs = (call,), {}
        rows.append(template.values(args, kwargs, trace))
    ids = get_broker().enqueue_many(rows)
    if options.get("sync", settings.sync):
        for job_id in ids:
            run_sync(job_id)
    return ids


def cancel(job_id: str) -> bool:
    """Cancel the job ``job_id``, whichever cluster runs it; return False when it has finished (or
    does not exist).

    A job that waits (queued, delayed or retrying) ends ``CANCELLED`` at once and never runs. A job
    that runs is asked to stop: the request is stored with the job, and the cluster that holds it
    sees it within about a second. The task then finds ``current_job().cancelled`` True (and
    ``current_job().raise_if_cancelled()`` raises :class:`~django_taskmq.JobCancelled`); a coroutine
    task gets :class:`asyncio.CancelledError`. A task still running ``TASKMQ['cancel_grace']``
    seconds later is interrupted like a task past its timeout. The job ends ``CANCELLED`` (unless it
    finished first) and is never retried; its hook runs and ``post_execute`` says ``cancelled``.
    """
    if not isinstance(job_id, str) or not job_id:
        raise ConfigError(f"cancel() takes a job id (a non-empty string), got {job_id!r}")
    broker = get_broker()
    with broker.atomic(write=True):
        return bool(broker.cancel([job_id]) or broker.request_cancel([job_id]))


def run_sync(job_id: str, reraise: bool = False) -> bool:
    """Run a stored job inline, through the same unpack/execute/record path the cluster uses; return
    False when it was not ready to run. With ``reraise``, raise what the task raised once its
    outcome is recorded."""
    return inline.run(job_id, get_broker(), get_settings(), reraise=reraise)


def fetch(job_id: str, wait: float = 0, cached: bool = False) -> Job | None:
    """Return the Job, waiting up to ``wait`` milliseconds for it to finish (like django-q2).

    With ``cached``, the job's record in the Django cache (see the ``cached`` option), an unsaved
    Job, or None while there is none.
    """
    deadline = time.monotonic() + wait / 1000
    settings = get_settings()
    while True:
        if cached:
            job = cached_results.fetch(job_id, settings)
        else:
            job = Job.objects.using(settings.database).filter(pk=job_id).first()
        if (job is not None and job.state in FINAL_STATES) or time.monotonic() >= deadline:
            return job
        time.sleep(0.01)


def result(job_id: str, wait: float = 0, cached: bool = False) -> Any:
    """Return the result of a SUCCEEDED job (None otherwise), waiting up to ``wait`` ms.

    With ``cached``, from the job's record in the Django cache.
    """
    job = fetch(job_id, wait, cached)
    return job.result if job is not None and job.state == State.SUCCEEDED else None


def result_group(group: str, failures: bool = False, cached: bool = False) -> list[Any]:
    """Return the results of a group's jobs in enqueue order (with ``failures``, errors too).

    With ``cached``, from the group's records in the Django cache, in the order they finished.
    """
    settings = get_settings()
    if cached:
        finished = cached_results.fetch_group(group, settings)
    else:
        finished = list(Job.objects.using(settings.database).filter(group=group, state__in=FINAL_STATES)
                        .order_by("id"))
    if failures:
        return [j.result if j.state == State.SUCCEEDED else j.error for j in finished]
    return [j.result for j in finished if j.state == State.SUCCEEDED]


def count_group(group: str, failures: bool = False, cached: bool = False) -> int:
    """Return how many jobs of a group succeeded (with ``failures``: failed or died)."""
    states = [State.FAILED, State.DEAD] if failures else [State.SUCCEEDED]
    if cached:
        return sum(1 for j in cached_results.fetch_group(group, get_settings()) if j.state in states)
    return Job.objects.using(get_settings().database).filter(group=group, state__in=states).count()


# Pausing a queue for every cluster (was django_taskmq.pausing). The pause is a row (QueuePause),
# so it holds for every cluster on every host and survives restarts; see docs/operators.rst.


def pause_queue(name: str, by: str = "") -> bool:
    """Pause the queue ``name`` (one of ``TASKMQ['queues']``, else ConfigError) for every cluster
    within about a second; ``by`` says who (logged and kept). Return False when it was paused already."""
    get_settings().check_queue(name)
    changed = get_broker().pause_queue(name, by)
    if changed:
        logger.info("queue %s paused%s: no cluster claims from it until it is resumed", name, f" by {by}" if by else "")
    return changed


def resume_queue(name: str, by: str = "") -> bool:
    """Resume the queue ``name``; return False when it was not paused."""
    get_settings().check_queue(name)
    changed = get_broker().resume_queue(name)
    if changed:
        logger.info("queue %s resumed%s", name, f" by {by}" if by else "")
    return changed


def paused_queues() -> frozenset[str]:
    """Return the names of the queues paused now."""
    return get_broker().paused_queues()
