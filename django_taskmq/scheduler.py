"""Schedules: ``schedule()`` creates one; ``tick()`` (run by each cluster's sentinel) fires the due ones.

A tick locks what it reads (``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL, the write lock of
``BEGIN IMMEDIATE`` on SQLite) and moves ``next_run`` in the same transaction as the enqueue, so a
due time fires once even with several clusters on one database.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from .runtime.allowed_tasks import check_allowed
from .api import async_task
from .brokers import Broker, get_broker
from .brokers.clock import as_datetime
from .conf import Settings, get_settings
from .encryption import SCHEDULE, MissingKey, Sealed, Undecryptable
from .exceptions import ConfigError
from .models import Schedule
from .runtime.binding import bind, path_signature
from .options import OPTIONS, check_schedule_options, func_path, validate_options
from .policy import cron as cron_policy

logger = logging.getLogger(__name__)
#: The key of a schedule's ``kwargs`` that holds its encrypted arguments (never a Python name).
SEALED = "$encrypted"


def schedule(func: Any, *args: Any, name: str | None = None, schedule_type: str = Schedule.ONCE,
             minutes: int | None = None, cron: str | None = None, repeats: int = -1,
             next_run: datetime.datetime | None = None, queue: str | None = None, priority: int = 0,
             catch_up: bool | None = None, hook: Any = None, intended_date_kwarg: str | None = None,
             q_options: dict | None = None, tz: str | None = None, **kwargs: Any) -> Schedule:
    """Create (or replace, by ``name``) a schedule; return it. Bad arguments raise ConfigError.

    ``tz`` names the IANA time zone (``"Europe/Berlin"``) in which daily and longer steps and cron
    expressions are read, across daylight-saving changes; by default the project's ``TIME_ZONE``.

    ``hook`` is each run's hook; ``intended_date_kwarg`` names a keyword argument that receives the
    run's due time (ISO 8601); ``q_options`` holds more ``async_task`` options for each run
    (``timeout``, ``group``, ``cached``, ...; JSON values).
    """
    return save_schedule(func, args, kwargs, name=name, schedule_type=schedule_type, minutes=minutes, cron=cron,
                         repeats=repeats, next_run=next_run, queue=queue, priority=priority, catch_up=catch_up,
                         hook=hook, intended_date_kwarg=intended_date_kwarg, q_options=q_options, tz=tz)


def save_schedule(func: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
                  name: str | None = None, schedule_type: str = Schedule.ONCE, minutes: int | None = None,
                  cron: str | None = None, repeats: int = -1, next_run: datetime.datetime | None = None,
                  queue: str | None = None, priority: int = 0, catch_up: bool | None = None, hook: Any = None,
                  intended_date_kwarg: str | None = None, q_options: dict | None = None, tz: str | None = None,
                  replace: bool = True) -> Schedule:
    """:func:`schedule` with the call's arguments given as a list and a dict, so that any keyword
    argument name is the function's. ``replace=False`` refuses a name already taken (ConfigError)."""
    kwargs = dict(kwargs or {})
    settings = get_settings()
    path = check_allowed(func_path(func), settings)
    validate_options({"queue": queue, "priority": priority}, settings)
    # A hook is called with every finished job: like func, only an allowed function may be named.
    hook = check_allowed(func_path(hook, "hook"), settings) if hook is not None else None
    if intended_date_kwarg is not None and (not isinstance(intended_date_kwarg, str)
                                            or not intended_date_kwarg.isidentifier()):
        raise ConfigError(f"intended_date_kwarg must be a keyword argument name, got {intended_date_kwarg!r}")
    options = check_schedule_options(dict(q_options or {}), settings)
    try:
        kind = cron_policy.ScheduleType(schedule_type)
    except ValueError:
        raise ConfigError(f"schedule_type {schedule_type!r} is not one of {[t.value for t in cron_policy.ScheduleType]}") from None
    cron_policy.validate(kind, minutes, cron)
    if tz is not None:
        cron_policy.zone(tz)
    if next_run is not None and timezone.is_naive(next_run):
        raise ConfigError("next_run must be an aware datetime")
    # Each run's call, bound now (its due time stands in for intended_date_kwarg's value).
    due = {intended_date_kwarg: ""} if intended_date_kwarg else {}
    bind(path_signature(path), args, {**kwargs, **due}, path, OPTIONS)
    try:
        json.dumps([list(args), kwargs, options])
    except TypeError as exc:
        raise ConfigError(f"schedule arguments must be JSON-serialisable: {exc}") from None
    args, kwargs = stored_arguments(args, kwargs, options, settings)
    first = next_run or broker_now()
    if next_run is None and kind is cron_policy.ScheduleType.CRON:  # the expression's next match, not now
        first = cron_policy.next_after(kind, first, cron=cron, tz=Schedule(tz=tz or "").zone()) or first
    name = name or f"{path}-{timezone.now().timestamp():.0f}"
    return get_broker().store_schedule(
        name, dict(func=path, args=list(args), kwargs=kwargs, schedule_type=kind.value, minutes=minutes,
                   cron=cron, repeats=repeats, next_run=first, queue=queue,
                   priority=priority, catch_up=catch_up, hook=hook, intended_date_kwarg=intended_date_kwarg,
                   options=options, tz=tz or ""),
        replace=replace)


def stored_arguments(args: Sequence[Any], kwargs: dict, options: dict, settings: Settings) -> tuple[list, dict]:
    """Return the ``args`` and ``kwargs`` a schedule stores with ``options``: those its ``encrypt``
    (or ``TASKMQ['encrypt_all']``) names sealed, with the first key (what was sealed before is
    opened first: saving a schedule again encrypts it with the new key of a rotation)."""
    args, kwargs = open_arguments(list(args), dict(kwargs), settings)
    encrypt = True if settings.encrypt_all else options.get("encrypt")
    return seal_arguments(args, kwargs, encrypt, settings) if encrypt else (args, kwargs)


def seal_arguments(args: list, kwargs: dict, encrypt: Any, settings: Settings) -> tuple[list, dict]:
    """Return a schedule's arguments as stored with ``encrypt`` (True, or keyword argument names):
    the ones it names moved, as encrypted JSON, into ``kwargs[SEALED]``."""
    if encrypt is True:
        hidden, args, kwargs = [args, kwargs], [], {}
    else:
        hidden = [[], {k: v for k, v in kwargs.items() if k in encrypt}]
        kwargs = {k: v for k, v in kwargs.items() if k not in encrypt}
    sealed = settings.keyring.encrypt(json.dumps(hidden).encode(), SCHEDULE)
    return args, {**kwargs, SEALED: f"{sealed.key}:{base64.urlsafe_b64encode(sealed.token).decode()}"}


def open_arguments(args: list, kwargs: dict, settings: Settings) -> tuple[list, dict]:
    """Return a schedule's stored arguments with those in ``kwargs[SEALED]`` decrypted back;
    raise ConfigError saying why they cannot be (the key id when it is not listed)."""
    if SEALED not in kwargs:
        return args, kwargs
    kwargs = dict(kwargs)
    value = kwargs.pop(SEALED)
    try:
        key, _, token = value.partition(":")
        plain = settings.keyring.decrypt(Sealed(key, base64.urlsafe_b64decode(token)), SCHEDULE)
        hidden_args, hidden_kwargs = json.loads(plain)
    except MissingKey as exc:
        raise ConfigError(f"its arguments are {exc}") from None
    except (Undecryptable, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"its encrypted arguments cannot be read: {exc}") from None
    return [*hidden_args, *args], {**kwargs, **hidden_kwargs}


def broker_now() -> datetime.datetime:
    """Return the broker's time now (the database's on a server engine): a schedule created to run
    "now" is due at once for every cluster, whatever this host's clock says."""
    return as_datetime(get_broker().now())


def tick(settings: Settings | None = None, now: datetime.datetime | None = None, *,
         broker: Broker | None = None) -> list[str]:
    """Fire every due schedule once; return the ids of the jobs it enqueued.

    A cluster passes its own ``settings`` and ``broker``; without them the project's are used.
    """
    settings = settings or get_settings()
    broker = broker or get_broker()
    # Due by the broker's clock (the database's): every cluster agrees on what is due, whatever
    # its host's clock says. The next due time is computed from it too.
    now = now or as_datetime(broker.now())
    fired = []
    with broker.atomic(write=True):
        for item in broker.due_schedules(now):
            try:
                # A savepoint per schedule: one broken schedule (edited in the admin, say) is
                # disabled and logged, and the others still fire.
                with broker.atomic():
                    fired.append(_fire(item, settings, now, broker))
            except DatabaseError:
                raise  # the database is away: leave every schedule as it is for the next tick
            except ConfigError as exc:
                logger.error("schedule %s cannot run (%s); disabled (repeats = 0)", item.name, exc)
                broker.disable_schedule(item.pk)
            except Exception:
                logger.exception("schedule %s cannot run; disabled (repeats = 0)", item.name)
                broker.disable_schedule(item.pk)
    return fired


def _fire(item: Schedule, settings: Settings, now: datetime.datetime, broker: Broker) -> str:
    """Enqueue one due schedule and move it to its next run; return the job id."""
    # The row is not signed: whoever can edit it chooses func and hook, so only allowed functions fire.
    check_allowed(item.func, settings)
    if item.hook:
        check_allowed(item.hook, settings)
    if not isinstance(item.args, list) or not isinstance(item.kwargs, dict):
        raise ConfigError(f"args must be a JSON list and kwargs a JSON object, got {item.args!r} and {item.kwargs!r}")
    args, kwargs = open_arguments(item.args, item.kwargs, settings)
    # A kwarg named like an enqueue option goes to the function: naming it in q_options (None
    # meaning "not given") tells async_task so.
    if item.intended_date_kwarg:
        kwargs[item.intended_date_kwarg] = item.next_run.isoformat()  # the run's due time, as django-q2 gives it
    options = {name: None for name in kwargs if name in OPTIONS}
    options.update(task_name=item.name)
    options.update(check_schedule_options(item.options or {}))
    options.update(queue=item.queue or None, priority=item.priority)
    if item.hook:
        options["hook"] = item.hook
    job_id = async_task(item.func, *args, q_options=options, **kwargs)
    item.last_job = job_id
    kind = cron_policy.ScheduleType(item.schedule_type)
    catch_up = settings.catch_up if item.catch_up is None else item.catch_up
    following = cron_policy.advance(kind, item.next_run, now, catch_up=catch_up, minutes=item.minutes, cron=item.cron,
                                   tz=item.zone())
    if item.repeats > 0:
        item.repeats -= 1
    if following is None:
        item.repeats = 0
    else:
        item.next_run = following
    broker.save_schedule(item, fields=["last_job", "next_run", "repeats"])
    return job_id
