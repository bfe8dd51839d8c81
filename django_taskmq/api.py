"""The public enqueue and result API: ``async_task``, ``enqueue_many``, ``result``, ``fetch``."""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from .brokers import get_broker
from .conf import COUNTER_MAX, Settings, get_settings
from .envelope import Envelope
from .exceptions import ConfigError
from .ids import new_id
from .models import FINAL_STATES, Job, State
from .policy.backoff import Retry
from .policy.priority import validate_priority
from .signing import sign

DELAY_MAX = 10 * 366 * 86400.0  # ten years: a longer delay is a mistake, not a plan
OPTIONS = frozenset({
    "queue", "priority", "key", "delay", "eta", "expires_at", "timeout", "max_deliveries", "ack_failure",
    "retry", "hook", "on_dead", "group", "task_name", "sync", "chain",
})


def func_path(func: Any, what: str = "func") -> str:
    """Return the dotted path a worker imports for ``func`` (a callable, a Task or a path)."""
    from .tasks import Task

    if isinstance(func, Task):
        return func.path
    if isinstance(func, str):
        return check_path(func, what)
    if isinstance(func, type) and issubclass(func, Task):
        return f"{func.__module__}.{func.__qualname__}"
    if callable(func):
        qualname = getattr(func, "__qualname__", "")
        module = getattr(func, "__module__", None)
        if not module or not qualname or "<" in qualname or module == "__main__":
            raise ConfigError(f"{what} {func!r} cannot be imported by a worker: use a module-level function")
        return f"{module}.{qualname}"
    raise ConfigError(f"{what} must be a callable or a dotted path, got {func!r}")


PATH_MAX = 255  # Job.func and Schedule.func


def check_path(path: str, what: str = "func") -> str:
    """Return ``path`` if it imports, in this process, as a callable; else raise ConfigError."""
    from .execution import resolve, runnable

    if len(path) > PATH_MAX:
        raise ConfigError(f"{what} {path[:40]!r}... is {len(path)} characters long; at most {PATH_MAX} fit")
    if "." not in path.strip(".") or any(not part.isidentifier() for part in path.split(".")):
        raise ConfigError(f"{what} {path!r} is not a dotted path like 'app.tasks.send'")
    try:
        target = resolve(path)
    except Exception as exc:
        raise ConfigError(f"{what} {path!r} cannot be imported: {type(exc).__name__}: {exc}") from exc
    if not runnable(target):
        raise ConfigError(f"{what} {path!r} is a {type(target).__name__}, not a callable")
    return path


def _finite(name: str, value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")


def _epoch(name: str, value: Any) -> float:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ConfigError(f"{name} must be an aware datetime (or epoch seconds), got a naive one")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be an aware datetime or epoch seconds, got {value!r}")
    _finite(name, float(value))
    return float(value)


def _positive(name: str, value: Any, integer: bool = False, allow_zero: bool = False,
              maximum: float | None = None) -> Any:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ConfigError(f"{name} must be a {'positive integer' if integer else 'positive number'}, got {value!r}")
    _finite(name, value)
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name} must be a {'positive integer' if integer else 'positive number'}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {value!r}")
    return value


def validate_options(options: dict[str, Any], settings: Settings | None = None) -> dict[str, Any]:
    """Check enqueue options; return them normalised. Raise ConfigError naming the option.

    Without ``settings`` the queue name is not checked against ``TASKMQ['queues']``.
    """
    unknown = set(options) - OPTIONS
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}")
    out = dict(options)
    if out.get("queue") is not None:
        queue = out["queue"]
        if not isinstance(queue, str):
            raise ConfigError(f"queue must be a string, got {queue!r}")
        if settings is not None and queue not in settings.queues:
            raise ConfigError(f"unknown queue {queue!r}: add it to TASKMQ['queues'] (known: {sorted(settings.queues)})")
    if out.get("priority") is not None:
        out["priority"] = validate_priority(out["priority"], ConfigError)
    if out.get("key") is not None and (not isinstance(out["key"], str) or not 0 < len(out["key"]) <= 255):
        raise ConfigError(f"key must be a string of 1..255 characters, got {out['key']!r}")
    if out.get("delay") is not None:
        _positive("delay", out["delay"], allow_zero=True, maximum=DELAY_MAX)
    if out.get("eta") is not None:
        if out.get("delay") is not None:
            raise ConfigError("pass either delay or eta, not both")
        out["eta"] = _epoch("eta", out["eta"])
    if out.get("expires_at") is not None:
        out["expires_at"] = _epoch("expires_at", out["expires_at"])
        if out.get("eta") is not None and out["expires_at"] <= out["eta"]:
            raise ConfigError(f"expires_at ({out['expires_at']}) must be after eta ({out['eta']}): "
                              f"the job would expire before it could run")
        if out.get("delay") and out["expires_at"] <= time.time() + out["delay"]:
            raise ConfigError(f"expires_at must be after now + delay ({out['delay']} s): "
                              f"the job would expire before it could run")
    if out.get("timeout") is not None:
        _positive("timeout", out["timeout"])
    if out.get("max_deliveries") is not None:
        _positive("max_deliveries", out["max_deliveries"], integer=True, maximum=COUNTER_MAX)
    for flag in ("ack_failure", "sync"):
        if out.get(flag) is not None and not isinstance(out[flag], bool):
            raise ConfigError(f"{flag} must be True or False, got {out[flag]!r}")
    if out.get("retry") is not None:
        retry = out["retry"]
        if isinstance(retry, dict):
            retry = Retry.from_dict(retry)  # an unknown key is a ConfigError, not a TypeError
        if not isinstance(retry, Retry):
            raise ConfigError(f"retry must be a Retry, got {retry!r}")
        out["retry"] = retry
    for name in ("hook", "on_dead"):
        if out.get(name) is not None:
            out[name] = func_path(out[name], name)
    for name in ("group", "task_name"):
        if out.get(name) is not None and (not isinstance(out[name], str) or not 0 < len(out[name]) <= 100):
            raise ConfigError(f"{name} must be a string of 1..100 characters, got {out[name]!r}")
    return out


class JobTemplate:
    """The validated options of one enqueue call, ready to stamp out jobs for many argument sets.

    Validation and option arithmetic happen once here, not once per job (``enqueue_many``).
    """

    def __init__(self, func: Any, options: dict[str, Any], settings: Settings) -> None:
        from .tasks import Task

        if isinstance(func, type) and issubclass(func, Task):
            func = func()  # the class form: its attributes are the defaults
        if isinstance(func, Task):
            options = {**func.defaults(), **options}
            if func.name != func.path:
                options.setdefault("task_name", func.name)
        self.path = func_path(func)
        self.options = options = validate_options(options, settings)
        self.settings = settings
        retry: Retry | None = options.get("retry")
        # A per-call max_deliveries replaces the setting; the Retry policy in force can only lower it.
        max_deliveries = options.get("max_deliveries") or settings.max_deliveries
        effective_retry = retry if retry is not None else settings.retry
        if effective_retry.max_attempts is not None:
            max_deliveries = min(max_deliveries, effective_retry.max_attempts)
        run_options = {
            "timeout": options.get("timeout", settings.timeout),
            "retry": retry.to_dict() if retry is not None else None,
            "ack_failure": options.get("ack_failure"),
            "hook": options.get("hook"),
            "on_dead": options.get("on_dead"),
            "chain": options.get("chain"),
        }
        self.run_options = {k: v for k, v in run_options.items() if v is not None}
        self.expires_at = options.get("expires_at")
        self.common = dict(
            func=self.path,
            task_name=options.get("task_name") or self.path,
            queue=options.get("queue") or settings.default_queue,
            priority=options.get("priority") or 0,
            max_deliveries=max_deliveries,
            key=options.get("key"),
            expires_at=self.expires_at,
            group=options.get("group"),
        )

    def values(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """Return the column values (by attribute name) of a new job for one call."""
        now = time.time()
        envelope = Envelope(func=self.path, args=tuple(args), kwargs=dict(kwargs), options=self.run_options)
        expired = self.expires_at is not None and self.expires_at <= now
        return dict(
            self.common,
            id=new_id(),
            payload=sign(envelope, self.settings.name, self.settings.compress, self.settings.max_package_size),
            state=State.EXPIRED if expired else State.QUEUED,
            visible_at=self.options.get("eta") or now + (self.options.get("delay") or 0),
        )

    def job(self, args: tuple, kwargs: dict) -> Job:
        """Return an unsaved Job for one call."""
        return Job(**self.values(args, kwargs))


def async_task(func: Callable | str, *args: Any, queue: str | None = None, priority: int | None = None,
               key: str | None = None, delay: float | None = None, eta: Any = None, expires_at: Any = None,
               timeout: float | None = None, max_deliveries: int | None = None, ack_failure: bool | None = None,
               retry: Retry | None = None, hook: Callable | str | None = None,
               on_dead: Callable | str | None = None, group: str | None = None,
               task_name: str | None = None, sync: bool | None = None, q_options: dict | None = None,
               **kwargs: Any) -> str:
    """Enqueue ``func(*args, **kwargs)``; return the job id.

    ``func`` is a callable, a ``@task`` or a dotted path. Options whose names collide with the
    function's own keyword arguments go in ``q_options``: as in django-q2, a keyword argument named
    like an option that ``q_options`` also holds is passed to the function. Inside the
    caller's ``transaction.atomic()`` the job exists only if that transaction commits. With
    ``key``, a second call within ``TASKMQ['idempotency_ttl']`` returns the first job's id and
    enqueues nothing. Bad options raise :class:`~django_taskmq.ConfigError` here, at the call.
    """
    from .signals import pre_enqueue

    given = dict(queue=queue, priority=priority, key=key, delay=delay, eta=eta, expires_at=expires_at,
                 timeout=timeout, max_deliveries=max_deliveries, ack_failure=ack_failure, retry=retry,
                 hook=hook, on_dead=on_dead, group=group, task_name=task_name, sync=sync)
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
    values = JobTemplate(func, options, settings).values(args, kwargs)
    job: Job | dict = values
    if pre_enqueue.has_listeners():  # only then is a model instance worth building
        job = Job(**values)
        pre_enqueue.send(sender=Job, job=job)
        values = {"id": job.id, "key": job.key}
    job_id = get_broker().enqueue(job, key=values["key"])
    run_inline = options.get("sync")
    if run_inline is None:
        run_inline = settings.sync
    if run_inline and job_id == values["id"]:
        run_sync(job_id)
    return job_id


def enqueue_many(func: Callable | str, calls: Iterable[Any], **options: Any) -> list[str]:
    """Enqueue many calls of ``func`` at once; return their ids in order.

    Each item of ``calls`` is an args tuple/list, or a ``(args, kwargs)`` pair given as a dict
    ``{"args": (...), "kwargs": {...}}``. Options apply to every call (no idempotency ``key``).
    """
    if options.get("key") is not None:
        raise ConfigError("enqueue_many does not take key: idempotency keys are per call, use async_task")
    settings = get_settings()
    template = JobTemplate(func, options, settings)
    rows = []
    for call in calls:
        if isinstance(call, dict):
            args, kwargs = tuple(call.get("args", ())), dict(call.get("kwargs", {}))
        elif isinstance(call, (tuple, list)):
            args, kwargs = tuple(call), {}
        else:
            args, kwargs = (call,), {}
        rows.append(template.values(args, kwargs))
    ids = get_broker().enqueue_values(rows)
    if options.get("sync", settings.sync):
        for job_id in ids:
            run_sync(job_id)
    return ids


def run_sync(job_id: str) -> None:
    """Run a stored job inline, through the same unpack/execute/record path the cluster uses."""
    from . import execution, recorder
    from .exceptions import BadPackage

    settings = get_settings()
    broker = get_broker()
    reservation = broker.reserve_job(job_id, settings.lease, owner="sync")
    if reservation is None:
        return
    try:
        message = execution.unpack(reservation, settings.name)
    except BadPackage as exc:
        broker.dead_letter_package(reservation, str(exc))
        return
    recorder.record([execution.seal(execution.execute(message), settings)], broker, settings)


def fetch(job_id: str, wait: float = 0) -> Job | None:
    """Return the Job, waiting up to ``wait`` milliseconds for it to finish (like django-q2)."""
    deadline = time.monotonic() + wait / 1000
    alias = get_settings().database
    while True:
        job = Job.objects.using(alias).filter(pk=job_id).first()
        if job is None or job.state in FINAL_STATES or time.monotonic() >= deadline:
            return job
        time.sleep(0.01)


def result(job_id: str, wait: float = 0) -> Any:
    """Return the result of a SUCCEEDED job (None otherwise), waiting up to ``wait`` ms."""
    job = fetch(job_id, wait)
    return job.result if job is not None and job.state == State.SUCCEEDED else None


def result_group(group: str, failures: bool = False) -> list[Any]:
    """Return the results of a group's jobs in enqueue order (with ``failures``, errors too)."""
    jobs = Job.objects.using(get_settings().database).filter(group=group).order_by("id")
    if failures:
        return [j.result if j.state == State.SUCCEEDED else j.error for j in jobs.filter(state__in=FINAL_STATES)]
    return [j.result for j in jobs.filter(state=State.SUCCEEDED)]


def count_group(group: str, failures: bool = False) -> int:
    """Return how many jobs of a group succeeded (with ``failures``: failed or died)."""
    jobs = Job.objects.using(get_settings().database).filter(group=group)
    if failures:
        return jobs.filter(state__in=[State.FAILED, State.DEAD]).count()
    return jobs.filter(state=State.SUCCEEDED).count()
