"""Enqueue options: their names, their checks, and the job template that turns a call into a row.

A leaf of the producer side: ``api``, ``tasks``, ``chains``, the scheduler and the recorder (for a
chain queued before 0.2, :mod:`.legacy_chains`) all build jobs here, and it imports none of them.
"""

from __future__ import annotations

import datetime
import inspect
import math
import time
from typing import Any

from .runtime.binding import bind, nearest, path_signature
from .conf import COUNTER_MAX, Settings
from .envelope import Envelope, seal_arguments, sign
from .exceptions import ConfigError
from .policy.ids import new_id
from .runtime.loading import callable_for, is_task, is_task_class, resolve, runnable
from .policy.backoff import Retry
from .policy.flow import check_key, check_limit, parse_rate
from .policy.priority import validate_priority
from .policy.states import JobState
from .policy.times import FromNow
from .policy.unique import Unique, parse_unique

DELAY_MAX = 10 * 366 * 86400.0  # ten years: a longer delay is a mistake, not a plan
# The one list of enqueue options. A @task or Task class may fix the TASK_OPTIONS as defaults;
# async_task takes every one of them as a keyword (a chain is a workflow: Chain, async_chain).
TASK_OPTIONS = ("queue", "priority", "retry", "timeout", "max_deliveries", "ack_failure", "hook", "on_dead",
                "concurrency_key", "concurrency_limit", "rate_limit", "encrypt")
CALL_OPTIONS = (*TASK_OPTIONS, "key", "delay", "eta", "expires_at", "group", "task_name", "sync", "cached", "save",
                "unique_key", "unique_for", "unique_replace")
# "workflow" (its id) is set by Workflow; "django_priority" is the Django task's own priority (-100..100),
# which the django.tasks backend stores in the package so that TaskResult reports it, as it does
# "django_run_after" (the task's run_after, ISO 8601: exact, where epoch seconds lose a microsecond).
OPTIONS = frozenset({*CALL_OPTIONS, "django_priority", "django_run_after", "workflow"})


def check_names(given: Any, known: Any, where: str = "") -> None:
    """Raise ConfigError naming each name of ``given`` that is not in ``known``, with the nearest known one."""
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    named = []
    for name in unknown:
        close = nearest(str(name), known)
        named.append(f"{name!r} (did you mean {close!r}?)" if close else repr(name))
    raise ConfigError(f"{where}unknown option(s) {', '.join(named)}; known: {sorted(known)}")


def func_path(func: Any, what: str = "func") -> str:
    """Return the dotted path a worker imports for ``func`` (a callable, a Task or a path)."""
    if is_task(func):
        return func.path
    if isinstance(func, str):
        return check_path(func, what)
    if is_task_class(func):
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


def _expiry(value: Any) -> float:
    """``expires_at`` as stored: an absolute time as the caller gave it, or a duration (a
    :class:`~datetime.timedelta`) counted from the broker's clock when the job is stored."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
        _finite("expires_at", seconds)
        if seconds <= 0:
            raise ConfigError(f"expires_at given as a duration must be positive, got {value!r}")
        return FromNow(seconds)
    return _epoch("expires_at", value)


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
    check_names(options, OPTIONS)
    out = dict(options)
    if out.get("queue") is not None:
        queue = out["queue"]
        if not isinstance(queue, str):
            raise ConfigError(f"queue must be a string, got {queue!r}")
        if settings is not None:
            settings.check_queue(queue)
    if out.get("priority") is not None:
        out["priority"] = validate_priority(out["priority"], ConfigError)
    if out.get("django_priority") is not None:
        value = out["django_priority"]
        if isinstance(value, bool) or not isinstance(value, int) or not -100 <= value <= 100:
            raise ConfigError(f"django_priority must be an integer in -100..100, got {value!r}")
    if out.get("django_run_after") is not None and not isinstance(out["django_run_after"], str):
        raise ConfigError(f"django_run_after must be an ISO 8601 string, got {out['django_run_after']!r}")
    if out.get("key") is not None and (not isinstance(out["key"], str) or not 0 < len(out["key"]) <= 255):
        raise ConfigError(f"key must be a string of 1..255 characters, got {out['key']!r}")
    unique = parse_unique(out.get("unique_key"), out.get("unique_for"), out.get("unique_replace"), ConfigError)
    if unique is not None and out.get("key") is not None:
        raise ConfigError("pass either key (idempotency: once per TTL) or unique_key (coalescing: while the "
                          "job waits), not both")
    if out.get("delay") is not None:
        _positive("delay", out["delay"], allow_zero=True, maximum=DELAY_MAX)
    if out.get("eta") is not None:
        if out.get("delay") is not None:
            raise ConfigError("pass either delay or eta, not both")
        out["eta"] = _epoch("eta", out["eta"])
    if out.get("expires_at") is not None:
        out["expires_at"] = _expiry(out["expires_at"])
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
    for flag in ("ack_failure", "sync", "save"):
        if out.get(flag) is not None and not isinstance(out[flag], bool):
            raise ConfigError(f"{flag} must be True or False, got {out[flag]!r}")
    if out.get("cached") is not None and not isinstance(out["cached"], bool):
        _positive("cached", out["cached"])  # True, False, or seconds to keep the result in the cache
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
    if out.get("concurrency_key") is not None and not callable(out["concurrency_key"]):
        check_key(out["concurrency_key"])
    if out.get("concurrency_limit") is not None:
        check_limit(out["concurrency_limit"])
    if out.get("rate_limit") is not None:
        out["rate_limit"] = str(parse_rate(out["rate_limit"]))
    for name in ("group", "task_name"):
        if out.get(name) is not None and (not isinstance(out[name], str) or not 0 < len(out[name]) <= 100):
            raise ConfigError(f"{name} must be a string of 1..100 characters, got {out[name]!r}")
    if out.get("encrypt") is not None:
        out["encrypt"] = _encrypt(out["encrypt"], settings)
    return out


def _encrypt(value: Any, settings: Settings | None) -> bool | tuple[str, ...]:
    """``encrypt``: True (every argument), False, or the names of the keyword arguments to encrypt."""
    if not isinstance(value, bool):
        if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)) or not value \
                or not all(isinstance(name, str) and name.isidentifier() for name in value):
            raise ConfigError(f"encrypt must be True, False or a list of argument names, got {value!r}")
        value = tuple(sorted(value))
    if value and settings is not None and not settings.encryption_keys:
        raise ConfigError("encrypt needs TASKMQ['encryption_keys']: list a key there (manage.py qkey prints one)")
    return value


def _first_position(path: str, names: tuple[str, ...]) -> int | None:
    """Return the position of the first parameter of ``path`` named in ``names`` that a call may pass
    by position (None: none, or no signature to read)."""
    try:
        parameters = list(inspect.signature(callable_for(path)).parameters.values())
    except (TypeError, ValueError, ImportError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return next((i for i, p in enumerate(parameters) if p.kind in positional and p.name in names), None)


# Options a schedule may not carry in Schedule.options: its own fields say them (queue, priority,
# hook, which the allow-list checks), they are absolute times (eta, expires_at), they make no sense
# for a scheduler tick (sync), or they name code and are not checked (on_dead).
NOT_SCHEDULE_OPTIONS = frozenset({"queue", "priority", "hook", "on_dead", "eta", "expires_at", "sync", "workflow"})


def check_schedule_options(options: Any, settings: Settings | None = None) -> dict[str, Any]:
    """Return ``options`` (a schedule's ``options``) if each run can enqueue with them; else raise ConfigError."""
    if not isinstance(options, dict):
        raise ConfigError(f"schedule options must be a dict of async_task options, got {options!r}")
    refused = sorted(set(options) & NOT_SCHEDULE_OPTIONS)
    if refused:
        raise ConfigError(f"schedule options may not hold {refused}: use the schedule's own fields (queue, "
                          f"priority, hook), or nothing (the others do not fit a repeated run)")
    validate_options(options, settings)
    return options


class JobTemplate:
    """The validated options of one enqueue call, ready to stamp out jobs for many argument sets.

    Validation and option arithmetic happen once here, not once per job (``enqueue_many``).
    """

    def __init__(self, func: Any, options: dict[str, Any], settings: Settings, check_calls: bool = True) -> None:
        if is_task_class(func):
            func = func()  # the class form: its attributes are the defaults
        if is_task(func):
            options = {**func.defaults(), **options}
            if func.name != func.path:
                options.setdefault("task_name", func.name)
        self.path = func_path(func)
        #: What each call is bound to (None: not bound; ``check_calls`` False, or nothing to inspect).
        self.signature = path_signature(self.path) if check_calls else None
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
            "workflow": options.get("workflow"),  # the workflow's id: the recorder counts the step's end
            "django_priority": options.get("django_priority"),
            "django_run_after": options.get("django_run_after"),
            # The recorder caches the result (seconds, or True: no expiry) and, with save=False,
            # stores none in the job; absent by default, so a plain job costs nothing more.
            "cached": (settings.cached if options.get("cached") is None else options["cached"]) or None,
            "save": False if options.get("save") is False else None,
            # True or the argument names: the package carries them encrypted, the result is encrypted.
            "encrypt": True if settings.encrypt_all else options.get("encrypt") or None,
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
            rate_limit=options.get("rate_limit"),
        )
        #: The coalescing key of every job of this template (None: none), for ``Broker.enqueue``.
        self.unique: Unique | None = parse_unique(options.get("unique_key"), options.get("unique_for"),
                                                  options.get("unique_replace"), ConfigError)
        self.key = options.get("concurrency_key")
        self.key_limit = options.get("concurrency_limit") or 1
        #: True, the names of the keyword arguments to encrypt, or False.
        self.encrypt: bool | tuple[str, ...] = True if settings.encrypt_all else options.get("encrypt") or False
        # Names are those of keyword arguments: one given by position would be stored in clear.
        self.secret_position = _first_position(self.path, self.encrypt) if isinstance(self.encrypt, tuple) else None

    def bind(self, args: Any, kwargs: dict) -> None:
        """Raise TypeError, as the function would, when it cannot take ``(*args, **kwargs)``: at the
        call, not in every delivery of a cluster."""
        bind(self.signature, tuple(args), kwargs, self.path, OPTIONS)

    def values(self, args: tuple, kwargs: dict, trace: dict | None = None) -> dict[str, Any]:
        """Return the column values (by attribute name) of a new job for one call; ``trace``: the
        W3C trace context to carry in the signed package (see :mod:`.tracing`)."""
        self.bind(args, kwargs)
        now = time.time()
        options = {**self.run_options, "trace": trace} if trace else self.run_options
        envelope = Envelope(func=self.path, args=tuple(args), kwargs=dict(kwargs), options=options)
        if self.encrypt:
            if self.secret_position is not None and len(args) > self.secret_position:
                raise ConfigError(f"{self.path}: an argument named in encrypt={self.encrypt!r} is passed by "
                                  f"position; pass it by keyword so that it is encrypted")
            envelope = seal_arguments(envelope, self.settings.keyring)
        expired = self.expires_at is not None and self.expires_at <= now
        key = self.key
        if callable(key):  # computed from the call's arguments (a task's default)
            try:
                key = check_key(key(*args, **kwargs))
            except ConfigError:
                raise
            except Exception as exc:  # the task's own function: any error is a bad argument here
                raise ConfigError(f"concurrency_key of {self.path} raised {type(exc).__name__}: {exc}") from exc
        return dict(
            self.common,
            concurrency_key=key,
            concurrency_limit=self.key_limit if key is not None else None,
            id=new_id(),
            payload=sign(envelope, self.settings.name, self.settings.compress, self.settings.max_package_size),
            state=JobState.EXPIRED.value if expired else JobState.QUEUED.value,
            # A delay counts from the broker's clock at the INSERT (the database's on a server
            # engine); an eta is the caller's absolute time.
            visible_at=self.options.get("eta") or FromNow(self.options.get("delay") or 0),
        )
