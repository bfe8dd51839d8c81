"""Helpers of the broker contract suite: they reach the broker only through its own methods.

``put`` and ``put_many`` build a job's values exactly as ``async_task`` and ``enqueue_many`` do
(``options.JobTemplate``: the same option checks, signed package, FromNow delay) and hand them to
``broker.enqueue`` / ``broker.enqueue_many``, so a test enqueues into the broker it was given,
whichever that is. ``ack`` records one success as the recorder does (``Broker.ack_many``). ``job``, ``jobs``, ``states`` and ``letters`` read back through ``Broker.jobs``
and ``Broker.dead_letters``; ``run`` runs one stored job here, as sync mode does, on that broker.

Packages for the pusher's checks: ``signed`` (a good one), ``forged`` (a pickle that would run code,
signed with a key the cluster does not know: it must never be loaded) and ``garbage`` (validly
signed bytes that are not a pickle). ``UNPICKLED`` lists what a forged pickle did when loaded.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.core import signing as django_signing

from django_taskmq.brokers.base import Ack, Broker, Reservation
from django_taskmq.envelope import Envelope, sign, sign_bytes
from django_taskmq.exceptions import LeaseLost
from django_taskmq.options import JobTemplate
from django_taskmq.policy.states import JobState

NOOP = "tests.tasks.noop"


def ack(broker: Broker, reservation: Reservation, result: Any = None) -> None:
    """Record one success through ``broker.ack_many``, as the recorder does; raise LeaseLost when
    the lease was lost (a holder's repeated ack changes nothing and raises nothing)."""
    if broker.ack_many([Ack(reservation, result)]):
        raise LeaseLost(f"job {reservation.job_id}: lease lost (token {reservation.token} no longer holds it)")


def put(broker: Broker, *args: Any, func: str = NOOP, payload: str | None = None, **options: Any) -> str:
    """Enqueue ``func(*args)`` with ``options`` (as ``async_task`` takes them) through
    ``broker.enqueue``; return the job id (the first job's, for a repeated idempotency ``key``;
    the holder's, for a coalescing ``unique_key`` that holds). ``payload`` replaces the signed
    package (a forged or broken one)."""
    template = JobTemplate(func, options, broker.settings)
    values = template.values(args, {})
    if payload is not None:
        values["payload"] = payload
    if template.unique is not None:
        return broker.enqueue(values, key=values["key"], unique=template.unique)
    return broker.enqueue(values, key=values["key"])


def put_many(broker: Broker, calls: Iterable[Sequence[Any]], func: str = NOOP, **options: Any) -> list[str]:
    """Enqueue one job per args tuple of ``calls`` through ``broker.enqueue_many``; return the ids in order."""
    template = JobTemplate(func, options, broker.settings)
    return broker.enqueue_many([template.values(tuple(args), {}) for args in calls])


def run(broker: Broker, job_id: str) -> None:
    """Run the stored job ``job_id`` in this process on ``broker``, as sync mode does (``inline.run``:
    ``reserve_job``, unpack, execute, record)."""
    from django_taskmq.runtime import inline

    inline.run(job_id, broker, broker.settings)


def jobs(broker: Broker, ids: Iterable[str]) -> dict[str, Any]:
    """The broker's state records of ``ids`` (those that exist), by id."""
    return broker.jobs(list(ids))


def job(broker: Broker, job_id: str) -> Any:
    """The broker's state record of one job (KeyError when it does not exist)."""
    return broker.jobs([job_id])[job_id]


def states(broker: Broker, ids: Iterable[str]) -> dict[str, JobState]:
    """The state of each job of ``ids`` that exists, by id."""
    return {i: JobState(j.state) for i, j in jobs(broker, ids).items()}


def delivery(broker: Broker, job_id: str) -> tuple[JobState, int, int, bool]:
    """(state, deliveries, yields, holds a lease token) of one job."""
    j = job(broker, job_id)
    return JobState(j.state), j.deliveries, j.yields, j.lease_token is not None


def letters(broker: Broker, queue: str | None = None) -> list[Any]:
    """The pending (not replayed) dead letters, of one queue or all, newest first."""
    return list(broker.dead_letters(queue))


# -- packages ------------------------------------------------------------------------------------

UNPICKLED: list[str] = []


def _unpickled(tag: str) -> None:
    UNPICKLED.append(tag)


class RunsOnUnpickle:
    """Unpickling this appends to ``UNPICKLED``: proof that a package was loaded."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpickled, ("unpickled",)


def signed(broker: Broker, *args: Any, func: str = "tests.tasks.add") -> str:
    """A genuine package of ``func(*args)`` for this broker's cluster name."""
    return sign(Envelope(func=func, args=args), broker.settings.name)


def forged(broker: Broker) -> str:
    """A package whose pickle runs code, signed with a key the cluster does not know."""
    body = django_signing.b64_encode(b"p" + pickle.dumps(RunsOnUnpickle())).decode()
    return django_signing.Signer(key="attacker-key", salt=f"django_taskmq.{broker.settings.name}").sign(body)


def garbage(broker: Broker) -> str:
    """Validly signed bytes that are not a pickle."""
    return sign_bytes(b"this is not a pickle", broker.settings.name)


@contextlib.contextmanager
def recorded(connection: Any) -> Iterator[list[tuple[str, list]]]:
    """The statements run on ``connection`` inside the block, with their parameters."""
    executed: list[tuple[str, list]] = []

    def record(execute, sql, params, many, context):
        executed.append((sql, list(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield executed


def sqlite_plan(connection: Any, sql: str, params: list) -> str:
    """SQLite's ``EXPLAIN QUERY PLAN`` of a statement, its steps joined by " | "."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return " | ".join(row[-1] for row in cursor.fetchall())
