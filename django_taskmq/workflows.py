"""Workflows: jobs that wait for each other (fan-out, fan-in, any DAG), built and queued at once.

::

    wf = Workflow(name="report-42")
    a = wf.add("app.tasks.fetch", 1, name="fetch-1")
    b = wf.add("app.tasks.fetch", 2, name="fetch-2")
    c = wf.add("app.tasks.merge", after=[a, b])
    wf.add("app.tasks.cleanup", after=[c], run_on_failure=True)
    workflow_id = wf.enqueue()

Every step is a job from the start, ``WAITING`` until its dependencies are satisfied; the database
counts them (``brokers/orm/workflows.py``), the rules are ``policy/workflow.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .brokers import get_broker, workflow_rows
from .brokers.workflow_rows import StepCall
from .conf import get_settings
from .exceptions import ConfigError
from .models import Job, State, WorkflowEdge, WorkflowStep
from .models import Workflow as WorkflowRecord
from .options import CALL_OPTIONS, JobTemplate, func_path, validate_options
from .policy import workflow as rules
from .policy.ids import new_id

__all__ = ["Workflow", "WorkflowInfo", "StepInfo", "workflow", "cancel_workflow", "Chain", "async_chain"]

# Options a step may not take: they decide whether its job exists or runs now, which the workflow
# decides (see the "Workflows" page of the docs).
STEP_REFUSED = ("sync", "key", "unique_key", "unique_for", "unique_replace")


class Workflow:
    """A graph of steps to queue at once with :meth:`enqueue`: all of them or none.

    ``name`` is shown in the admin. Steps run as soon as the steps they wait for (``after``)
    have succeeded; see :meth:`add`. ``key`` is the workflow's idempotency key: within
    ``TASKMQ['idempotency_ttl']`` a second workflow with the same key is not queued, and its
    :meth:`enqueue` returns the first one's id.
    """

    def __init__(self, name: str = "", key: str | None = None) -> None:
        if not isinstance(name, str) or len(name) > 200:
            raise ConfigError(f"a workflow's name must be a string of at most 200 characters, got {name!r}")
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= rules.KEY_MAX):
            raise ConfigError(f"a workflow's key must be a string of 1..{rules.KEY_MAX} characters, got {key!r}")
        self.name = name
        self.key = key
        #: The workflow's id, known before it is queued (its steps' packages carry it).
        self.id = new_id()
        self.steps: dict[str, StepCall] = {}
        #: Each step's job id (by step name), once :meth:`enqueue` queued them.
        self.job_ids: dict[str, str] = {}
        self.queued = False

    def add(self, func: Callable | str, *args: Any, name: str | None = None, after: Iterable[str] | None = None,
            run_on_failure: bool = False, q_options: dict | None = None, **kwargs: Any) -> str:
        """Add ``func(*args, **kwargs)`` as a step; return its name (``name``, or a new one).

        ``after``: the names of the steps it waits for; it runs once they all SUCCEEDED, or, with
        ``run_on_failure=True``, once they all ended, however. A name may be of a step added
        later (checked by :meth:`enqueue`). A step takes the options of
        :func:`~django_taskmq.async_task` (queue, priority, retry, timeout, flow control...) as
        keywords, or in ``q_options`` when the function has an argument of that name.
        """
        if q_options is not None and not isinstance(q_options, dict):
            raise ConfigError(f"q_options must be a dict, got {q_options!r}")
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in CALL_OPTIONS and k not in (q_options or {})}
        options.update(q_options or {})
        return self.add_call(func, args, kwargs, options, name=name, after=after, run_on_failure=run_on_failure)

    def add_call(self, func: Callable | str, args: Iterable[Any] = (), kwargs: dict | None = None,
                 options: dict | None = None, *, name: str | None = None, after: Iterable[str] | None = None,
                 run_on_failure: bool = False) -> str:
        """:meth:`add` with the function's arguments and the options apart (no name is taken for
        an option); what chains and ``async_iter`` build their steps with."""
        if name is None:
            name = f"step-{len(self.steps) + 1}"
            while name in self.steps:
                name += "'"
        rules.check_name(name, self.steps, ConfigError)
        if not isinstance(run_on_failure, bool):
            raise ConfigError(f"run_on_failure must be True or False, got {run_on_failure!r}")
        options = {k: v for k, v in (options or {}).items() if v is not None}
        refused = sorted(k for k in STEP_REFUSED if k in options)
        if refused:
            hint = " (give the workflow a key: Workflow(key=...))" if "key" in refused else ""
            raise ConfigError(f"a workflow step does not take {', '.join(refused)}: the workflow decides when "
                              f"its jobs exist and run{hint}")
        # Checked here, at the call, like async_task's: a bad queue or retry fails at add().
        template = JobTemplate(func, {**options, "workflow": self.id}, get_settings())
        template.bind(args, kwargs or {})  # and so does a call its function cannot take
        self.steps[name] = StepCall(template, tuple(args), dict(kwargs or {}), rules.check_after(after, ConfigError),
                                    run_on_failure)
        return name

    def enqueue(self, sync: bool | None = None) -> str:
        """Queue every step in one transaction; return the workflow's id.

        Raises :class:`~django_taskmq.ConfigError` for an empty workflow, a name in ``after`` that
        is no step, or a cycle; nothing is queued then. With ``sync`` (default:
        ``TASKMQ['sync']``) the steps run here, one after another, before this returns.
        """
        if sync is not None and not isinstance(sync, bool):
            raise ConfigError(f"sync must be True or False, got {sync!r}")
        if self.queued:
            raise ConfigError(f"workflow {self.id} was queued already; build a new Workflow to queue another")
        steps = rules.order({name: step.after for name, step in self.steps.items()}, ConfigError)
        settings = get_settings()
        if settings.opentelemetry:  # one producer span for the workflow; every step runs in its trace
            from .observability import tracing

            with tracing.enqueue(f"workflow {self.name or self.id}", settings.default_queue, 0,
                                 batch=len(self.steps)) as (span, carrier):
                queued = self._enqueue(steps, settings, sync, carrier)
                tracing.enqueued(span, queued)
            return queued
        return self._enqueue(steps, settings, sync)

    def _enqueue(self, steps: list[str], settings: Any, sync: bool | None, trace: dict | None = None) -> str:
        workflow_id = self.id
        ids, rows, edges = workflow_rows.rows(self.steps, trace)
        broker = get_broker()
        with broker.atomic(write=True):
            holder = broker.enqueue_workflow({"id": workflow_id, "name": self.name}, rows, edges, key=self.key)
        self.queued = True
        if holder != workflow_id:  # the key's workflow: nothing was queued
            return holder
        self.job_ids = ids
        if settings.sync if sync is None else sync:
            # Each step after the ones it waits for: by then it is ready (or was cancelled, and
            # running it does nothing).
            from .api import run_sync

            for name in steps:
                run_sync(ids[name])
        return workflow_id


@dataclass(frozen=True)
class StepInfo:
    """One step of a workflow as :func:`workflow` reads it."""

    name: str
    job_id: str
    state: str
    after: tuple[str, ...]
    run_on_failure: bool
    error: str
    job: Job | None = field(repr=False, default=None)

    @property
    def result(self) -> Any:
        """The step's result once it SUCCEEDED (verified before it is unpickled), else None."""
        return self.job.result if self.job is not None and self.state == State.SUCCEEDED else None


@dataclass(frozen=True)
class WorkflowInfo:
    """A workflow's state (``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``CANCELLED``) and its steps by name."""

    id: str
    name: str
    state: str
    created_at: Any
    finished_at: Any
    steps: dict[str, StepInfo]


def workflow(workflow_id: str) -> WorkflowInfo | None:
    """Return the state of the workflow ``workflow_id`` and of each of its steps, or None."""
    _check_id(workflow_id)
    alias = get_settings().database
    record = WorkflowRecord.objects.using(alias).filter(pk=workflow_id).first()
    if record is None:
        return None
    steps = list(WorkflowStep.objects.using(alias).filter(workflow_id=workflow_id).order_by("job_id"))
    jobs = Job.objects.using(alias).in_bulk([s.job_id for s in steps])
    names = {s.job_id: s.name for s in steps}
    after: dict[str, list[str]] = {s.job_id: [] for s in steps}
    for upstream, downstream in (WorkflowEdge.objects.using(alias).filter(workflow_id=workflow_id)
                                 .order_by("id").values_list("upstream", "downstream")):
        after[downstream].append(names[upstream])
    infos = {}
    for s in steps:
        job = jobs.get(s.job_id)
        infos[s.name] = StepInfo(s.name, s.job_id, job.state if job else "DELETED", tuple(after[s.job_id]),
                                 s.run_on_failure, job.error if job else "", job)
    return WorkflowInfo(record.id, record.name, record.state, record.created_at, record.finished_at, infos)


def cancel_workflow(workflow_id: str) -> int:
    """Cancel the steps of ``workflow_id`` that have not ended; return how many.

    Waiting and queued steps end ``CANCELLED`` at once; running ones are asked to stop, as
    :func:`~django_taskmq.cancel` does. The workflow ends ``CANCELLED`` once its last step ended.
    """
    _check_id(workflow_id)
    broker = get_broker()
    with broker.atomic(write=True):
        return broker.cancel_workflow(workflow_id)


def _check_id(workflow_id: object) -> None:
    if not isinstance(workflow_id, str) or not workflow_id:
        raise ConfigError(f"a workflow id is a non-empty string, got {workflow_id!r}")


# Chains (was django_taskmq.chains): a chain is a workflow underneath, every link a step waiting for
# the one before it. A link that fails for good ends the chain: the links after it end CANCELLED.


class Chain:
    """Build a chain with :meth:`append`, start it with :meth:`run`."""

    def __init__(self, chain: list | None = None, group: str | None = None, **options: Any) -> None:
        self.links: list[tuple[str, tuple, dict, dict]] = []
        self.group = group
        self.options = options
        for link in chain or []:
            if not isinstance(link, (tuple, list)):
                link = (link,)
            func, args, kwargs = (*link, (), {})[:3] if len(link) == 1 else (*link, {})[:3]
            self.append(func, *args, **kwargs)

    def append(self, func: Any, *args: Any, q_options: dict | None = None, **kwargs: Any) -> Chain:
        """Add a link: ``func(*args, **kwargs)`` with per-link options in ``q_options``."""
        options = {**self.options, **(q_options or {})}
        if self.group:
            options.setdefault("group", self.group)
        validate_options(options, get_settings())  # a later link's bad queue fails here, at the call
        self.links.append((func_path(func), tuple(args), dict(kwargs), options))
        return self

    def run(self) -> str:
        """Queue the chain (every link at once, each waiting for the one before); return the
        first link's job id."""
        if not self.links:
            raise ConfigError("an empty chain cannot run")
        return run_links(self.links, self.group)


def run_links(links: list[tuple[str, tuple, dict, dict]], group: str | None = None, sync: bool | None = None) -> str:
    """Queue ``links`` (``(func path, args, kwargs, options)``) as a workflow, each waiting for
    the one before; return the first link's job id. Links run inline when ``sync`` is True, or,
    when it is None, when the first link's options say ``sync`` (django-q2's ``async_chain(sync=True)``)."""
    flow = Workflow(name=f"chain {group}" if group else "chain")
    previous: list[str] = []
    for number, (func, args, kwargs, options) in enumerate(links, 1):
        options = dict(options)
        link_sync = options.pop("sync", None)
        sync = link_sync if sync is None else sync
        previous = [flow.add_call(func, args, kwargs, options, name=f"link-{number}", after=previous)]
    flow.enqueue(sync=sync)
    return flow.job_ids["link-1"]


def async_chain(chain: list, group: str | None = None, **options: Any) -> str:
    """Queue a chain given as a list of ``(func, args, kwargs)`` tuples; return the first job id."""
    return Chain(chain, group=group, **options).run()
