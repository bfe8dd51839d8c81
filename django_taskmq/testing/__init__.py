"""Testing a project's tasks without a cluster: what a block of code enqueued, and running it.

    from django_taskmq.testing import assert_enqueued, capture_jobs, drain

    with capture_jobs() as jobs:
        client.post("/signup/", {"email": "ada@example.com"})
    jobs.assert_enqueued("myapp.tasks.send_welcome", args=["ada@example.com"], queue="emails")
    drain()  # runs it here, as a cluster would

Jobs are the rows the code stored (in the test's transaction, under Django's ``TestCase``): the
assertions read them, and :func:`drain` runs the ready ones in the test process through the same
steps as a cluster's workers and monitor (retries without waiting for their backoff, a chain's and a
workflow's next jobs, hooks, signals, the dead-letter queue). :class:`TaskMQTestMixin` gives a
``TestCase`` the same as methods; the pytest plugin (``django_taskmq.testing.pytest_plugin``,
registered through the ``pytest11`` entry point) gives the ``taskmq_jobs`` fixture.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigError
from .clock import TestClock, frozen_clock, wake_due

__all__ = ["Enqueued", "Captured", "capture_jobs", "all_enqueued", "assert_enqueued", "refute_enqueued", "drain",
           "TaskMQTestMixin", "TestClock", "frozen_clock"]

ANY: Any = object()  # the default of a criterion: not compared
MAX_RUNS = 10_000  # drain()'s guard against a task that enqueues itself for ever


@dataclass(frozen=True)
class Enqueued:
    """One stored job as a test reads it: the call from its verified package, and its row."""

    id: str
    func: str
    args: tuple
    kwargs: dict
    queue: str
    priority: int
    state: str
    job: Any  # the django_taskmq.models.Job

    def __str__(self) -> str:
        return (f"{self.func}(args={list(self.args)!r}, kwargs={self.kwargs!r}) queue={self.queue!r} "
                f"priority={self.priority} state={self.state}")


def _read(jobs: Iterable[Any]) -> list[Enqueued]:
    from ..conf import get_settings
    from ..envelope import verify

    name = get_settings().name
    found = []
    for job in jobs:
        envelope = verify(job.payload, name)  # never unpickled unless signed
        found.append(Enqueued(job.id, envelope.func, tuple(envelope.args), dict(envelope.kwargs), job.queue,
                              job.priority, job.state, job))
    return found


def _jobs(after: str | None = None, until: str | None = None) -> list[Enqueued]:
    from ..conf import get_settings
    from ..models import Job

    rows = Job.objects.using(get_settings().database).order_by("id")
    if after is not None:
        rows = rows.filter(id__gt=after)
    if until is not None:
        rows = rows.filter(id__lt=until)
    return _read(rows)


def _path(task: Any) -> str:
    from ..options import func_path

    return func_path(task, "task")


def _matches(found: Enqueued, path: str | None, args: Any, kwargs: Any, queue: Any, priority: Any) -> bool:
    return ((path is None or found.func == path)
            and (args is ANY or found.args == tuple(args))
            and (kwargs is ANY or found.kwargs == dict(kwargs))
            and (queue is ANY or found.queue == queue)
            and (priority is ANY or found.priority == priority))


def _describe(path: str | None, args: Any, kwargs: Any, queue: Any, priority: Any) -> str:
    parts = [f"{name}={value!r}" for name, value in (("args", args), ("kwargs", kwargs), ("queue", queue),
                                                     ("priority", priority)) if value is not ANY]
    return f"{path or 'any task'}({', '.join(parts)})"


def _listing(jobs: list[Enqueued]) -> str:
    return "\n".join(f"  {j}" for j in jobs) if jobs else "  (none)"


def _check_count(count: int | None) -> None:
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ConfigError(f"count must be a non-negative integer, got {count!r}")


def _assert(jobs: list[Enqueued], task: Any, args: Any, kwargs: Any, queue: Any, priority: Any,
            count: int | None) -> list[Enqueued]:
    _check_count(count)
    path = _path(task)
    matching = [j for j in jobs if _matches(j, path, args, kwargs, queue, priority)]
    if (count is None and not matching) or (count is not None and len(matching) != count):
        wanted = "at least one job" if count is None else f"{count} job(s)"
        raise AssertionError(f"expected {wanted} {_describe(path, args, kwargs, queue, priority)}, found "
                             f"{len(matching)}; enqueued:\n{_listing(jobs)}")
    return matching


def _refute(jobs: list[Enqueued], task: Any, args: Any, kwargs: Any, queue: Any, priority: Any) -> None:
    path = _path(task) if task is not None else None
    matching = [j for j in jobs if _matches(j, path, args, kwargs, queue, priority)]
    if matching:
        raise AssertionError(f"expected no job {_describe(path, args, kwargs, queue, priority)}, found "
                             f"{len(matching)}:\n{_listing(matching)}")


class Captured:
    """The jobs stored since :func:`capture_jobs` began (until its block ended), oldest first.

    Job ids sort by creation time and this process makes them strictly increasing, so "stored
    in the block" is "id between two ids made at its edges": jobs ``drain()`` enqueues (a chain's
    next link) count while the block lasts.
    """

    def __init__(self) -> None:
        from ..policy.ids import new_id

        self._after: str = new_id()
        self._until: str | None = None

    def _close(self) -> None:
        from ..policy.ids import new_id

        self._until = new_id()

    @property
    def jobs(self) -> list[Enqueued]:
        """Every job captured, read from the database now (states as they are now)."""
        return _jobs(self._after, self._until)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Enqueued]:
        return iter(self.jobs)

    def assert_enqueued(self, task: Any, args: Any = ANY, kwargs: Any = ANY, queue: Any = ANY, priority: Any = ANY,
                        count: int | None = None) -> list[Enqueued]:
        """:func:`assert_enqueued` among the captured jobs."""
        return _assert(self.jobs, task, args, kwargs, queue, priority, count)

    def refute_enqueued(self, task: Any = None, args: Any = ANY, kwargs: Any = ANY, queue: Any = ANY,
                        priority: Any = ANY) -> None:
        """:func:`refute_enqueued` among the captured jobs."""
        _refute(self.jobs, task, args, kwargs, queue, priority)

    def drain(self, queue: str | Iterable[str] | None = None, with_scheduled: bool = False) -> list[Enqueued]:
        """:func:`drain` (every ready job, captured or not)."""
        return drain(queue, with_scheduled)


@contextlib.contextmanager
def capture_jobs() -> Iterator[Captured]:
    """Capture the jobs the block enqueues: ``with capture_jobs() as jobs: ...``; ``jobs`` still
    reads them after the block (the same rows, their states as they are then)."""
    captured = Captured()
    try:
        yield captured
    finally:
        captured._close()


def all_enqueued(task: Any = None, queue: Any = ANY) -> list[Enqueued]:
    """Every job in the database (of ``task`` and ``queue`` when given), oldest first."""
    path = _path(task) if task is not None else None
    return [j for j in _jobs() if _matches(j, path, ANY, ANY, queue, ANY)]


def assert_enqueued(task: Any, args: Any = ANY, kwargs: Any = ANY, queue: Any = ANY, priority: Any = ANY,
                    count: int | None = None) -> list[Enqueued]:
    """Assert a job of ``task`` (a function, a ``@task``, a Django task or a dotted path) is stored,
    with these ``args`` (a list or tuple), ``kwargs``, ``queue`` and ``priority`` when given;
    ``count``: exactly that many such jobs. Return the matching jobs; raise AssertionError listing
    what is stored when it fails."""
    return _assert(_jobs(), task, args, kwargs, queue, priority, count)


def refute_enqueued(task: Any = None, args: Any = ANY, kwargs: Any = ANY, queue: Any = ANY,
                    priority: Any = ANY) -> None:
    """Assert no job matches (``task`` None: of any task); raise AssertionError listing those that do."""
    _refute(_jobs(), task, args, kwargs, queue, priority)


def _ready(queues: set[str] | None, with_scheduled: bool) -> list[str]:
    """The ids of the jobs a cluster would run (queued, or retrying: its backoff is not waited
    for), highest priority first; a job delayed into the future only ``with_scheduled``."""
    from ..brokers import get_broker
    from ..conf import get_settings
    from ..models import Job, State

    rows = Job.objects.using(get_settings().database).filter(state__in=[State.QUEUED, State.RETRYING])
    if queues is not None:
        rows = rows.filter(queue__in=queues)
    if not with_scheduled:
        rows = rows.exclude(state=State.QUEUED, visible_at__gt=get_broker().now())
    return list(rows.order_by("-priority", "id").values_list("id", flat=True))


def drain(queue: str | Iterable[str] | None = None, with_scheduled: bool = False) -> list[Enqueued]:
    """Run what is ready (of ``queue`` when given) here, one job at a time, until nothing is; return
    the jobs that ran, in the order they ran (a job once per run), with their states after.

    A cluster's semantics: each job is reserved, unpacked, run and recorded by the steps a
    cluster's workers and monitor use, so a failure is retried (its backoff not waited for) until
    it dies into the dead-letter queue, a chain's next link and a workflow's next steps are queued
    and run in turn, hooks run and signals are sent. ``with_scheduled``: jobs delayed into the
    future (a ``delay``, an ``eta``, a ``Defer``) run too. Raises RuntimeError after ``MAX_RUNS``
    runs (a task that enqueues itself for ever).

    Durable tasks run here skip their sleeps; under :func:`frozen_clock` they sleep until the clock
    is advanced past their wake time, and each round first readies the jobs it has passed.
    """
    from ..api import run_sync
    from ..conf import get_settings
    from ..models import Job

    queues = None if queue is None else ({queue} if isinstance(queue, str) else set(queue))
    rows = Job.objects.using(get_settings().database)
    ran: list[str] = []
    unreservable: set[str] = set()  # ready, but a cluster would not run them either (no deliveries left)
    while True:
        wake_due()  # under a frozen_clock(): the jobs whose sleep it has passed
        ready = [i for i in _ready(queues, with_scheduled) if i not in unreservable]
        if not ready:
            break
        if len(ran) >= MAX_RUNS:
            raise RuntimeError(f"drain() ran {MAX_RUNS} jobs and more are ready: does a task enqueue itself?")
        # One at a time, the first each round: what a job enqueues may come before the others.
        if run_sync(ready[0]):
            ran.append(ready[0])
        else:
            unreservable.add(ready[0])
    by_id = {j.id: j for j in _read(rows.filter(id__in=set(ran)))}
    return [by_id[job_id] for job_id in ran]


class TaskMQTestMixin:
    """A ``TestCase`` mixin: ``self.assertEnqueued(...)``, ``self.assertNotEnqueued(...)``,
    ``self.enqueued(...)``, ``self.captureJobs()``, ``self.drainJobs()`` and ``self.frozenClock()``.

    Under Django's ``TestCase`` jobs live in the test's transaction: each test starts with none.
    """

    assertEnqueued = staticmethod(assert_enqueued)
    assertNotEnqueued = staticmethod(refute_enqueued)
    enqueued: Callable[..., list[Enqueued]] = staticmethod(all_enqueued)
    captureJobs = staticmethod(capture_jobs)
    drainJobs = staticmethod(drain)
    frozenClock = staticmethod(frozen_clock)
