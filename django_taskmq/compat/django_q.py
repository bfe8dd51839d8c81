"""django-q2's task API (``django_q.tasks``) on django_taskmq: change the import, keep the calls.

    from django_taskmq.compat.django_q import async_task, result, fetch, schedule, Chain, Iter

Every name takes django-q2's arguments and gives back what django-q2 gives: task ids are strings;
``fetch`` returns a :class:`~django_taskmq.models.Job`, which answers django-q2's ``Task`` members
(``success``, ``result``, ``started``, ``stopped``, ``time_taken()``, ``group_result()``, ...).
Options go to :func:`django_taskmq.async_task` under their names here (``cluster`` becomes the
queue); ``broker`` is accepted and ignored with a :class:`CompatWarning`. Where a behaviour cannot
be matched, the call raises :class:`~django_taskmq.ConfigError` or warns, saying why;
``docs/django_q2.rst`` lists every difference.

A task "has a result" here as in django-q2 once an execution of it was recorded: it succeeded, or
it failed (acknowledged, dead-lettered, or failed once and waiting for its retry). ``result()`` of
a failure is its error text, as django-q2 returns the error in ``Task.result``.
"""

from __future__ import annotations

import datetime
import re
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from .. import api, scheduler
from ..runtime import cached_results
from ..runtime.binding import nearest
from ..brokers import get_broker
from ..workflows import Chain as _Chain
from ..workflows import run_links
from ..conf import Settings, get_settings
from ..exceptions import ConfigError
from ..policy.ids import new_id
from ..models import FINAL_STATES, Imported, Job, Schedule, State
from ..options import OPTIONS, func_path
from ..policy import cron as cron_policy

__all__ = [
    "AsyncTask", "Chain", "CompatWarning", "Iter", "Schedule", "async_chain", "async_iter", "async_task",
    "count_group", "delete_cached", "delete_group", "fetch", "fetch_group", "get_broker", "queue_size",
    "result", "result_group", "schedule",
]

# django-q2's option keywords of async_task (task_name aside: it is always taken, keyword first).
Q_KEYS = ("hook", "group", "save", "sync", "cached", "ack_failure", "timeout", "cluster", "broker", "chain")
# Recorded at least once, as django-q2 saves a Task for every execution: finished, or failed and
# waiting for its retry.
DONE = [*FINAL_STATES, State.RETRYING]
ITER = re.compile(r"^iter-(\d+)-[0-9a-f]{24}$")


class CompatWarning(UserWarning):
    """A django-q2 argument that is accepted but cannot do here what it did there."""


def _warn(message: str) -> None:
    warnings.warn(message, CompatWarning, stacklevel=3)


def _ignore_broker(broker: Any) -> None:
    if broker is not None:
        _warn("the broker argument is ignored: django_taskmq's broker is TASKMQ['database']")


def _cached(cached: Any, settings: Settings) -> bool:
    return bool(settings.cached if cached is None else cached)


# -- options ---------------------------------------------------------------------------------------
def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split django-q2 keywords as its async_task does: (its options, other q_options, the function's kwargs).

    An option comes from ``q_options`` when it holds it, else from the keywords; a keyword whose
    name ``q_options`` also holds goes to the function. ``task_name`` is always an option.
    """
    keywords = dict(kwargs)
    q_options = keywords.pop("q_options", None) or {}
    if not isinstance(q_options, dict):
        raise ConfigError(f"q_options must be a dict, got {q_options!r}")
    rest = dict(q_options)
    options: dict[str, Any] = {}
    task_name = keywords.pop("task_name", None) or rest.pop("task_name", None)
    if task_name:
        options["task_name"] = task_name
    for key in Q_KEYS:
        if key in rest:
            options[key] = rest.pop(key)
        elif key in keywords:
            options[key] = keywords.pop(key)
    return options, rest, keywords


def _ours(options: dict[str, Any], rest: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Return django_taskmq options for django-q2's ``options`` and the other ``q_options`` (``rest``)."""
    ours: dict[str, Any] = {}
    for key, value in rest.items():
        if key in OPTIONS and key != "chain":
            ours[key] = value  # one of ours (priority, delay, key, ...): passes through
        else:
            close = nearest(str(key), OPTIONS - {"chain"})
            hint = f" (did you mean {close!r}?)" if close and close != key else ""
            _warn(f"q_options[{key!r}] is not an option here; ignored{hint}")
    _ignore_broker(options.get("broker"))
    cluster = options.get("cluster")
    if cluster is not None and cluster != settings.name and ours.get("queue") is None:
        if cluster not in settings.queues:
            raise ConfigError(f"cluster {cluster!r} is a queue here, and it is not in TASKMQ['queues'] "
                              f"{sorted(settings.queues)}: add it there")
        ours["queue"] = cluster
    for key in ("hook", "save", "sync", "cached", "ack_failure", "timeout", "task_name"):
        if options.get(key) is not None:
            ours[key] = options[key]
    if options.get("group") is not None:
        ours["group"] = str(options["group"])  # django-q2 stores any label as text
    return ours


def _shadow(kwargs: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """Return q_options that send every keyword of ``kwargs`` to the function, even one named like an option."""
    return {**{name: None for name in kwargs if name in OPTIONS}, **ours}


def _link(link: Any) -> tuple[Any, tuple, dict]:
    if not isinstance(link, (tuple, list)):
        link = (link,)
    func = link[0]
    args = tuple(link[1]) if len(link) > 1 else ()
    kwargs = dict(link[2]) if len(link) > 2 else {}
    return func, args, kwargs


def chained_call(func: Any, args: tuple, fn_kwargs: dict[str, Any], ours: dict[str, Any], chain: Sequence[Any],
                 options: dict[str, Any], settings: Settings) -> list:
    """The links of ``func(*args, **fn_kwargs)`` (its options ``ours``) followed by django-q2's
    ``chain``, which shares its group, ``cached`` and ``sync`` (django-q2's ``options``) and, unless
    a link names its own, its queue, as django-q2 queues the chain after the task through the same
    broker: one workflow here (see :func:`async_task`)."""
    first = _Chain().append(func, *args, q_options=_shadow(fn_kwargs, ours), **fn_kwargs)
    rest = _links(chain, ours.get("group"), options.get("cached"), options.get("sync"), settings)
    if ours.get("queue") is not None:
        for _, _, _, link_options in rest:
            if link_options.get("queue") is None:
                link_options["queue"] = ours["queue"]
    return first.links + rest


def _links(chain: Sequence[Any], group: str | None, cached: Any, sync: Any, settings: Settings) -> list:
    """Turn django-q2's ``[(func, (args), {kwargs}), ...]`` into django_taskmq's chain links.

    Every link shares the chain's group, ``cached`` and ``sync``, as django-q2's async_chain gives them.
    """
    built = _Chain()
    for item in chain:
        func, args, kwargs = _link(item)
        options, rest, fn_kwargs = _split(kwargs)
        for key, value in (("group", group), ("cached", cached), ("sync", sync)):
            if value is not None:
                options.setdefault(key, value)
        options.pop("chain", None)
        built.append(func, *args, q_options=_shadow(fn_kwargs, _ours(options, rest, settings)), **fn_kwargs)
    return built.links


# -- enqueue ---------------------------------------------------------------------------------------
def async_task(func: Any, *args: Any, **kwargs: Any) -> str:
    """django-q2's ``async_task``: queue ``func(*args, **kwargs)``; return the task id.

    Options: ``hook``, ``group``, ``timeout``, ``save``, ``sync``, ``cached``, ``ack_failure``,
    ``task_name``, ``cluster`` (a queue here), ``chain``, ``broker`` (ignored, with a warning), as
    keywords or in ``q_options``; ``q_options`` may also hold django_taskmq's own options
    (``priority``, ``delay``, ``key``, ...).

    With ``chain``, the task and the chain's tasks are queued at once as one chain (a workflow, see
    :mod:`django_taskmq.workflows`): each runs once the one before it succeeded, and after a task that
    fails for good the rest end CANCELLED (django-q2 queues the chain after the task however it
    ended). The task's job id is returned.
    """
    settings = get_settings()
    options, rest, fn_kwargs = _split(kwargs)
    chain = options.pop("chain", None)
    ours = _ours(options, rest, settings)
    if chain:
        return run_links(chained_call(func, args, fn_kwargs, ours, chain, options, settings), ours.get("group"))
    if ours.get("sync") is not True:
        return api.async_task(func, *args, q_options=_shadow(fn_kwargs, ours), **fn_kwargs)
    # As django-q2's sync=True: run here and raise what the task raised. The failure is final (no
    # cluster is meant to retry it) unless ack_failure says otherwise. (TASKMQ['sync'] runs jobs
    # inline and records their failures without raising: a test suite's setting, see docs/django_q2.rst.)
    ours = {"ack_failure": True, **ours, "sync": False}
    job_id = api.async_task(func, *args, q_options=_shadow(fn_kwargs, ours), **fn_kwargs)
    api.run_sync(job_id, reraise=True)
    return job_id


def async_chain(chain: list, group: str | None = None, cached: Any = None, sync: Any = None,
                broker: Any = None) -> str:
    """django-q2's ``async_chain``: queue ``[(func, (args), {kwargs}), ...]`` one after another; return the group."""
    _ignore_broker(broker)
    settings = get_settings()
    if not chain:
        raise ConfigError("an empty chain cannot run")
    group = group or uuid.uuid4().hex
    run_links(_links(chain, group, cached, sync, settings), group)
    return group


def async_iter(func: Any, args_iter: Iterable[Any], **kwargs: Any) -> str:
    """django-q2's ``async_iter``: queue ``func`` once per item of ``args_iter``; return the iter's id.

    ``result(id)`` is the list of results in the order of ``args_iter`` once every call has a
    result. ``hook`` is dropped, as in django-q2.
    """
    settings = get_settings()
    calls = [item if isinstance(item, tuple) else (item,) for item in args_iter]
    options, rest, fn_kwargs = _split(kwargs)
    options.pop("hook", None)
    options.pop("group", None)
    options.pop("chain", None)
    ours = _ours(options, rest, settings)
    group = f"iter-{len(calls)}-{new_id()}"
    ours["group"] = group
    api.enqueue_many(func, [{"args": call, "kwargs": fn_kwargs} for call in calls], **ours)
    return group


# -- results -----------------------------------------------------------------------------------------
def _poll(get: Callable[[], Any], wait: float) -> Any:
    """Call ``get`` until it returns something, for up to ``wait`` ms (-1: for ever), as django-q2 waits."""
    start = time.monotonic()
    while True:
        value = get()
        if value is not None:
            return value
        if (time.monotonic() - start) * 1000 >= wait >= 0:
            return None
        time.sleep(0.01)


def _find(task_id: str, settings: Settings) -> Job | None:
    """Return the job of a task id: ours, a django-q2 id carried over by qimport_djangoq, or a task name."""
    jobs = Job.objects.using(settings.database)
    job = jobs.filter(pk=task_id).first()
    if job is not None:
        return job
    if re.fullmatch(r"[0-9a-f]{32}", task_id or ""):
        target = (Imported.objects.using(settings.database).filter(source__in=["django_q_ormq", "django_q_task"],
                                                                   source_id=task_id)
                  .values_list("target", flat=True).first())
        if target is not None:
            return jobs.filter(pk=target).first()
    if re.fullmatch(r"[0-9a-f]{24}", task_id or ""):
        return None  # one of our ids, not a name: no scan of the task names
    return jobs.filter(task_name=task_id).order_by("-id").first()


def _recorded(job: Job | None) -> Job | None:
    return job if job is not None and job.state in DONE else None


def _value(job: Any) -> Any:
    if job.state == State.SUCCEEDED:
        return job.result
    return job.error or str(job.state)


def fetch(task_id: str, wait: float = 0, cached: Any = None) -> Any:
    """django-q2's ``fetch``: the task (a Job) once it has a result, waiting up to ``wait`` ms (-1: for ever)."""
    settings = get_settings()
    cached = _cached(cached, settings)
    match = ITER.match(task_id or "")
    if match:
        return _poll(lambda: _iter_task(task_id, int(match.group(1)), cached, settings), wait)
    if cached:
        return _poll(lambda: cached_results.fetch(task_id, settings), wait)
    return _poll(lambda: _recorded(_find(task_id, settings)), wait)


def result(task_id: str, wait: float = 0, cached: Any = None) -> Any:
    """django-q2's ``result``: the return value (the error text of a failure), waiting up to ``wait`` ms."""
    task = fetch(task_id, wait, cached)
    if task is None:
        return None
    return task.result if isinstance(task, IterTask) else _value(task)


def _members(group: str, failures: bool, cached: bool, settings: Settings) -> list[Any]:
    if cached:
        return [j for j in cached_results.fetch_group(group, settings) if failures or j.state == State.SUCCEEDED]
    states = DONE if failures else [State.SUCCEEDED]
    return list(Job.objects.using(settings.database).filter(group=group, state__in=states).order_by("id"))


def _wait_for_count(group: str, count: int | None, wait: float, cached: bool) -> None:
    """django-q2's ``count``: block until the group has ``count`` results, or ``wait`` ms passed (0 or -1: for ever)."""
    if not count:
        return
    start = time.monotonic()
    while count_group(group, cached=cached) < count:
        if wait and (time.monotonic() - start) * 1000 >= wait >= 0:
            return
        time.sleep(0.01)


def fetch_group(group_id: str, failures: bool = True, wait: float = 0, count: int | None = None,
                cached: Any = None) -> Any:
    """django-q2's ``fetch_group``: the group's tasks with a result (a queryset of Jobs; a list when cached)."""
    settings = get_settings()
    cached = _cached(cached, settings)
    _wait_for_count(group_id, count, wait, cached)
    if cached:
        return _poll(lambda: _members(group_id, failures, True, settings) or None, wait)
    states = DONE if failures else [State.SUCCEEDED]
    jobs = Job.objects.using(settings.database).filter(group=group_id, state__in=states).order_by("id")
    return _poll(lambda: jobs.all() if jobs.exists() else None, wait)


def result_group(group_id: str, failures: bool = False, wait: float = 0, count: int | None = None,
                 cached: Any = None) -> list[Any] | None:
    """django-q2's ``result_group``: the group's results (with ``failures``, failures' error texts too)."""
    settings = get_settings()
    cached = _cached(cached, settings)
    _wait_for_count(group_id, count, wait, cached)
    return _poll(lambda: [_value(j) for j in _members(group_id, failures, cached, settings)] or None, wait)


def count_group(group_id: str, failures: bool = False, cached: Any = None) -> int:
    """django-q2's ``count_group``: how many of the group's tasks have a result (with ``failures``: failed)."""
    settings = get_settings()
    members = _members(group_id, True, True, settings) if _cached(cached, settings) else None
    if members is not None:
        return sum(1 for j in members if not failures or j.state != State.SUCCEEDED)
    states = [s for s in DONE if s != State.SUCCEEDED] if failures else DONE
    return Job.objects.using(settings.database).filter(group=group_id, state__in=states).count()


def delete_group(group_id: str, tasks: bool = False, cached: Any = None) -> int | None:
    """django-q2's ``delete_group``: take the label off the group's finished tasks, or delete them (``tasks``)."""
    settings = get_settings()
    if _cached(cached, settings):
        cached_results.delete_group(group_id, settings)
        return None
    return get_broker().forget_group(group_id, delete=tasks)


def delete_cached(task_id: str, broker: Any = None) -> None:
    """django-q2's ``delete_cached``: delete a task's result from the cache."""
    _ignore_broker(broker)
    cached_results.delete([task_id], get_settings())


def queue_size(broker: Any = None) -> int:
    """django-q2's ``queue_size``: the tasks waiting and visible now, in every queue (running ones not counted)."""
    _ignore_broker(broker)
    return sum(row["ready"] for row in get_broker().stats())


class IterTask:
    """The collated result of an ``async_iter``, read like django-q2's Task of the iter."""

    def __init__(self, group: str, members: list[Job]) -> None:
        self.id = self.name = group
        self.group = None
        self.func = members[0].func if members else None
        self.members = members
        self.success = all(j.state == State.SUCCEEDED for j in members)
        self.result = [_value(j) for j in members]
        self.started = min((j.enqueued_at for j in members if j.enqueued_at), default=None)
        self.stopped = max((j.finished_at for j in members if j.finished_at), default=None)

    def time_taken(self) -> float | None:
        if self.started is None or self.stopped is None:
            return None
        return (self.stopped - self.started).total_seconds()


def _iter_task(group: str, count: int, cached: bool, settings: Settings) -> IterTask | None:
    members = sorted(_members(group, True, cached, settings), key=lambda j: j.id)
    return IterTask(group, members) if len(members) >= count else None


# -- schedules -----------------------------------------------------------------------------------------
def schedule(func: Any, *args: Any, name: str | None = None, hook: Any = None, schedule_type: str = Schedule.ONCE,
             minutes: int | None = None, repeats: int = -1, next_run: datetime.datetime | None = None,
             cron: str | None = None, cluster: str | None = None, intended_date_kwarg: str | None = None,
             q_options: dict | None = None, **kwargs: Any) -> Schedule:
    """django-q2's ``schedule``: create a schedule; a name already taken raises IntegrityError, as there.

    Arguments are stored as JSON. A CRON schedule first runs at the expression's next match, as in
    django-q2; a naive ``next_run`` is read in the current time zone, with a warning.
    """
    settings = get_settings()
    if name and Schedule.objects.using(settings.database).filter(name=name).exists():
        raise IntegrityError("A schedule with the same name already exists.")
    path = func_path(func)
    name = name or f"{path[:60]}-{new_id()}"
    options, rest, _ = _split({"q_options": dict(q_options or {})})
    if rest.pop("broker_name", None) is not None:
        _warn("q_options['broker_name'] is ignored: use cluster (a queue here)")
    if options.pop("sync", None) is not None:
        _warn("q_options['sync'] is ignored in a schedule: a scheduled task never runs inside the scheduler")
    q_cluster = options.pop("cluster", None)
    ours = _ours({**options, "cluster": cluster if cluster is not None else q_cluster}, rest, settings)
    queue = ours.pop("queue", None)
    hook = hook if hook is not None else ours.pop("hook", None)
    ours.pop("hook", None)
    ours.pop("task_name", None)  # a scheduled task is named after its schedule
    ours.setdefault("group", name)  # django-q2 groups a schedule's tasks under its name
    if schedule_type == Schedule.MINUTES and minutes is None:
        minutes = 1  # what django-q2 uses
    now = scheduler.broker_now()
    if next_run is not None and timezone.is_naive(next_run):
        _warn(f"next_run {next_run} is naive: read in the current time zone {timezone.get_current_timezone_name()}")
        next_run = timezone.make_aware(next_run)
    if schedule_type == Schedule.CRON:
        cron_policy.validate(Schedule.CRON, minutes, cron)
        next_run = cron_policy.next_after(Schedule.CRON, now, cron=cron, tz=timezone.get_current_timezone())
    return scheduler.save_schedule(path, args, kwargs, name=name, schedule_type=schedule_type, minutes=minutes,
                                   cron=cron, repeats=repeats, next_run=next_run or now, queue=queue, hook=hook,
                                   intended_date_kwarg=intended_date_kwarg, q_options=ours, replace=False)


# -- classes ---------------------------------------------------------------------------------------------
class Chain:
    """django-q2's ``Chain``: tasks run one after another, under one group."""

    def __init__(self, chain: list | None = None, group: str | None = None, cached: Any = None, sync: Any = None,
                 broker: Any = None) -> None:
        _ignore_broker(broker)
        self.chain = list(chain or [])
        self.group = group or ""
        self.cached = get_settings().cached if cached is None else cached
        self.sync = sync
        self.started = False

    def append(self, func: Any, *args: Any, **kwargs: Any) -> int:
        """Add a task (async_task's arguments); return the chain's length."""
        self.chain.append((func, args, kwargs))
        if self.started:
            delete_group(self.group)
            self.started = False
        return self.length()

    def run(self) -> str:
        """Queue the chain; return its group."""
        self.group = async_chain(list(self.chain), group=self.group or None, cached=self.cached, sync=self.sync)
        self.started = True
        return self.group

    def result(self, wait: float = 0) -> list | None:
        """The chain's results once every task has one (``wait`` ms, 0 or -1: for ever)."""
        if self.started:
            return result_group(self.group, wait=wait, count=self.length(), cached=self.cached)
        return None

    def fetch(self, failures: bool = True, wait: float = 0) -> Any:
        """The chain's tasks once every task has a result."""
        if self.started:
            return fetch_group(self.group, failures=failures, wait=wait, count=self.length(), cached=self.cached)
        return None

    def current(self) -> int | None:
        """How many tasks of the chain have a result."""
        return count_group(self.group, cached=self.cached) if self.started else None

    def length(self) -> int:
        return len(self.chain)


class Iter:
    """django-q2's ``Iter``: one function called with many argument sets."""

    def __init__(self, func: Any = None, args: list | None = None, kwargs: dict | None = None, cached: Any = None,
                 sync: Any = None, broker: Any = None) -> None:
        _ignore_broker(broker)
        self.func = func
        self.args = list(args or [])
        self.kwargs = dict(kwargs or {})
        self.id = ""
        self.cached = get_settings().cached if cached is None else cached
        self.sync = sync
        self.started = False

    def append(self, *args: Any) -> int:
        """Add an argument set; return how many there are."""
        self.args.append(args)
        self.started = False
        return self.length()

    def run(self) -> str:
        """Queue every call; return the iter's id."""
        options = {**self.kwargs, "cached": self.cached, "sync": self.sync}
        self.id = async_iter(self.func, self.args, **{k: v for k, v in options.items() if v is not None})
        self.started = True
        return self.id

    def result(self, wait: float = 0) -> list | None:
        return result(self.id, wait=wait, cached=self.cached) if self.started else None

    def fetch(self, wait: float = 0) -> Any:
        return fetch(self.id, wait=wait, cached=self.cached) if self.started else None

    def length(self) -> int:
        return len(self.args)


class AsyncTask:
    """django-q2's ``AsyncTask``: a task kept in one object; change it and ``run()`` it again."""

    def __init__(self, func: Any, *args: Any, **kwargs: Any) -> None:
        self.id = ""
        self.started = False
        self.func = func
        self.args = args
        self.kwargs = kwargs

    def _get(self, key: str, default: Any = None) -> Any:
        source = self.kwargs["q_options"] if "q_options" in self.kwargs else self.kwargs
        return source.get(key, default)

    def _set(self, key: str, value: Any) -> None:
        target = self.kwargs["q_options"] if "q_options" in self.kwargs else self.kwargs
        target[key] = value
        self.started = False

    broker = property(lambda self: self._get("broker"), lambda self, value: self._set("broker", value))
    sync = property(lambda self: self._get("sync"), lambda self, value: self._set("sync", value))
    save = property(lambda self: self._get("save"), lambda self, value: self._set("save", value))
    hook = property(lambda self: self._get("hook"), lambda self, value: self._set("hook", value))
    group = property(lambda self: self._get("group"), lambda self, value: self._set("group", value))
    cached = property(lambda self: self._get("cached", get_settings().cached),
                      lambda self, value: self._set("cached", value))

    def run(self) -> str:
        self.id = async_task(self.func, *self.args, **self.kwargs)
        self.started = True
        return self.id

    def result(self, wait: float = 0) -> Any:
        return result(self.id, wait=wait, cached=self.cached) if self.started else None

    def fetch(self, wait: float = 0) -> Any:
        return fetch(self.id, wait=wait, cached=self.cached) if self.started else None

    def result_group(self, failures: bool = False, wait: float = 0, count: int | None = None) -> Any:
        if self.started and self.group:
            return result_group(self.group, failures=failures, wait=wait, count=count, cached=self.cached)
        return None

    def fetch_group(self, failures: bool = True, wait: float = 0, count: int | None = None) -> Any:
        if self.started and self.group:
            return fetch_group(self.group, failures=failures, wait=wait, count=count, cached=self.cached)
        return None
