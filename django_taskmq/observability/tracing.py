"""OpenTelemetry traces (``TASKMQ['opentelemetry'] = True``; needs ``opentelemetry-api``).

* Producer: ``async_task()`` (and everything built on it: ``@task.delay``, ``django.tasks``,
  schedules, workflows and chains) runs inside a ``PRODUCER`` span ``taskmq enqueue <task>`` and stores that
  span's W3C trace context (``traceparent``, ``tracestate``) in the envelope's options, inside the
  signed package.
* Consumer: the worker runs the task inside a ``CONSUMER`` span ``taskmq run <task>`` whose parent
  is the stored context, so the execution joins the trace of the request that enqueued it, on
  whichever host. Every delivery (a retry, a redelivery after a crash, a replay from the dead
  letters) has its own span under the same parent, with ``taskmq.attempt``, and a link to the
  enqueue span (the creation context, as the messaging conventions ask).

Only the API is used: the project installs and configures the SDK and its exporter. This module
imports ``opentelemetry`` when a function of it is first called, and callers call it only when the
setting is on, so a project without it imports nothing and pays one settings lookup per job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .. import __version__

SYSTEM = "taskmq"
#: The key of the trace context in the envelope's options.
OPTION = "trace"


_tracers: dict[int, Any] = {}  # tracer provider's id -> our tracer (get_tracer makes a new one at each call)


def _tracer() -> Any:
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    tracer = _tracers.get(id(provider))
    if tracer is None:
        tracer = _tracers[id(provider)] = provider.get_tracer("django_taskmq", __version__)
    return tracer


@contextlib.contextmanager
def enqueue(task: str, queue: str, priority: int, batch: int | None = None) -> Iterator[tuple[Any, dict[str, str]]]:
    """A producer span around an enqueue; yields ``(span, carrier)``: put the carrier (the W3C
    trace context of the span) in the envelope's options under :data:`OPTION`."""
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "send", "messaging.operation.name": "enqueue",
        "messaging.destination.name": queue, "taskmq.task": task, "taskmq.queue": queue,
        "taskmq.priority": priority,
    }
    if batch is not None:
        attributes["messaging.batch.message_count"] = batch
    with _tracer().start_as_current_span(f"taskmq enqueue {task}", kind=SpanKind.PRODUCER,
                                         attributes=attributes) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield span, carrier


def enqueued(span: Any, job_id: str) -> None:
    """Name the job an enqueue span made (the id is known once the job exists)."""
    span.set_attribute("messaging.message.id", job_id)
    span.set_attribute("taskmq.job_id", job_id)


def run(message: Any, execute: Callable[[Any], Any]) -> Any:
    """Run ``execute(message)`` inside a consumer span whose parent is the context stored at enqueue;
    return its outcome, recorded on the span (status, and the exception on failure)."""
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    r, envelope = message.reservation, message.envelope
    task = envelope.options.get("task_name") or envelope.func
    carrier = envelope.options.get(OPTION)
    parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
    # As the messaging conventions ask of a "process" span, each delivery also links to the
    # creation context: a backend that shows links but not remote parents still finds the enqueue.
    created = trace.get_current_span(parent).get_span_context() if parent is not None else None
    links = [Link(created, {"taskmq.attempt": r.deliveries})] if created is not None and created.is_valid else []
    attributes = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process", "messaging.operation.name": "run",
        "messaging.destination.name": r.queue, "messaging.message.id": r.job_id,
        "taskmq.job_id": r.job_id, "taskmq.task": envelope.func, "taskmq.queue": r.queue,
        "taskmq.priority": r.priority, "taskmq.attempt": r.deliveries, "taskmq.deliveries": r.deliveries,
    }
    with _tracer().start_as_current_span(f"taskmq run {task}", context=parent, kind=SpanKind.CONSUMER,
                                         attributes=attributes, links=links, record_exception=False,
                                         set_status_on_exception=True) as span:
        outcome = execute(message)
        status = outcome.status.value
        span.set_attribute("taskmq.outcome", status)
        if status in ("failure", "reject", "timeout", "crash", "unstorable"):
            kind, _, text = (outcome.error or status).partition(": ")
            span.add_event("exception", {"exception.type": kind, "exception.message": text,
                                         "exception.stacktrace": outcome.traceback or ""})
            span.set_status(Status(StatusCode.ERROR, outcome.error or status))
        return outcome


@contextlib.contextmanager
def attached(carrier: dict[str, str]) -> Iterator[None]:
    """Make the trace context stored in ``carrier`` the current one inside the block (the monitor
    enqueues the next link of a chain queued by release 0.2 in its predecessor's trace)."""
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


def flush(timeout: float = 5.0) -> None:
    """Export the spans the SDK still buffers (a worker ends with ``os._exit``: no ``atexit``)."""
    from opentelemetry import trace

    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if callable(force_flush):
        force_flush(int(timeout * 1000))
