"""Durable tasks in the database: the steps a job's runs have done (``JobStep``), the signals sent
to it (``JobSignal``), and the suspension of a run that sleeps or waits: the job ``SUSPENDED``,
outside the claim's index of ready jobs, until the lease sweep (:func:`wake_due`) or its signal
makes it ``QUEUED`` again.

Every write a run makes is fenced: it first locks the job's row under the run's lease token
(``SELECT ... FOR UPDATE``; SQLite's write lock), so a superseded run writes nothing, a step is
written once, and a signal and a suspension that race are ordered by the row lock: whichever
commits second sees the other (the statements after the lock read a fresh snapshot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from ...exceptions import ConfigError, LeaseLost
from ...models import NEVER_WAKES, Job, JobSignal, JobStep, StepKind
from ...policy.states import JobState
from ..base import Reservation, StepRecord
from .sql import GIVE, JOB, RUNNING, SUSPEND, WAKE, chunks, marks

# The functions take the ORM broker (its alias, connection, clock) as ``broker``; not imported for
# its type, since the broker imports this module.
OrmBroker = Any

#: Seconds ahead of their wake time that the lease sweep makes suspended jobs claimable (they stay
#: invisible until then): more than the sweeps' interval (the pusher's, about a second).
WAKE_AHEAD = 3.0
STEPS = JobStep._meta.db_table
SIGNALS = JobSignal._meta.db_table
FINAL = frozenset(s.value for s in JobState.FINAL)


def _hold(broker: OrmBroker, reservation: Reservation) -> None:
    """Lock the job's row while ``reservation`` holds it, else raise LeaseLost (call inside a transaction)."""
    held = (Job.objects.using(broker.alias).select_for_update()
            .filter(pk=reservation.job_id, lease_token=reservation.token, state=JobState.RUNNING.value)
            .values_list("id", flat=True).first())
    if held is None:
        raise LeaseLost(f"job {reservation.job_id}: lease lost (token {reservation.token} no longer holds it)")


def steps(broker: OrmBroker, job_id: str) -> list[StepRecord]:
    rows = (JobStep.objects.using(broker.alias).filter(job_id=job_id).order_by("id")
            .values_list("name", "kind", "digest", "result_package", "wake_at", "signal_name", "done"))
    return [StepRecord(*row) for row in rows]


def save_step(broker: OrmBroker, reservation: Reservation, record: StepRecord) -> None:
    with broker.write_transaction():
        _hold(broker, reservation)
        JobStep.objects.using(broker.alias).create(
            job_id=reservation.job_id, name=record.name, kind=record.kind, digest=record.digest,
            result_package=record.result, wake_at=record.wake_at, signal_name=record.signal, done=record.done,
            finished_at=timezone.now() if record.done else None,
        )


def finish_step(broker: OrmBroker, reservation: Reservation, name: str, result: str | None = None) -> None:
    with broker.write_transaction():
        _hold(broker, reservation)
        JobStep.objects.using(broker.alias).filter(job_id=reservation.job_id, name=name, done=False).update(
            done=True, result_package=result, finished_at=timezone.now())


def take_signal(broker: OrmBroker, reservation: Reservation, name: str, signal: str) -> tuple[bool, str | None]:
    with broker.write_transaction():
        _hold(broker, reservation)
        sent = (JobSignal.objects.using(broker.alias)
                .filter(job_id=reservation.job_id, name=signal, consumed=False).order_by("id")
                .values_list("id", "payload_package").first())
        if sent is None:
            return False, None
        JobSignal.objects.using(broker.alias).filter(pk=sent[0]).update(consumed=True)
        changed = JobStep.objects.using(broker.alias).filter(job_id=reservation.job_id, name=name).update(
            done=True, result_package=sent[1], finished_at=timezone.now())
        if not changed:  # the signal came before the task reached its wait
            JobStep.objects.using(broker.alias).create(
                job_id=reservation.job_id, name=name, kind=StepKind.WAIT, signal_name=signal, done=True,
                result_package=sent[1], finished_at=timezone.now())
        return True, sent[1]


def suspend(broker: OrmBroker, reservation: Reservation, wake_at: float | None, signal: str) -> JobState | None:
    """Give the job back until ``wake_at`` (broker epoch; None: until its signal): SUSPENDED, or QUEUED
    for later when it wakes before the next sweeps would wake it, or QUEUED now when its signal was
    sent already. A job whose cancellation was requested ends CANCELLED instead."""
    with broker.write_transaction() as cursor:
        try:
            _hold(broker, reservation)
        except LeaseLost:
            return None
        cancelled = (Job.objects.using(broker.alias).filter(pk=reservation.job_id)
                     .values_list("cancel_requested_at", flat=True).first())
        if cancelled is not None:
            ended = broker.end_cancelled(reservation, "JobCancelled: cancelled while it slept or waited")
            return JobState.CANCELLED if ended else None
        # (Read after the row lock: a signal sent meanwhile has committed, and this read sees it.)
        signalled = bool(signal) and JobSignal.objects.using(broker.alias).filter(
            job_id=reservation.job_id, name=signal, consumed=False).exists()
        wake = NEVER_WAKES if wake_at is None else float(wake_at)
        move, visible, params = SUSPEND, "%s", [wake]
        if signalled:  # its signal came while it ran: given back as a deferral (not a delivery), visible now
            move, (visible, params) = GIVE, broker.clock.at(0)
        elif wake <= broker.now() + WAKE_AHEAD:  # it wakes before the sweep would wake it: the same, for later
            move = GIVE
        # The delivery its claim counted is given back: a sleep is neither a delivery nor an execution.
        cursor.execute(
            f"UPDATE {JOB} SET state = {move.to}, visible_at = {visible}, deliveries = deliveries - 1, "
            "lease_owner = NULL, lease_token = NULL, lease_until = NULL "
            f"WHERE id = %s AND lease_token = %s AND state = {RUNNING}",
            [*params, reservation.job_id, reservation.token],
        )
        return move.target if cursor.rowcount else None


def wake_due(broker: OrmBroker, ahead: float) -> int:
    """Make the suspended jobs that wake within ``ahead`` seconds claimable (QUEUED, still visible
    only from their wake time): the sweep runs about once a second, the claim keeps the time exact."""
    due, due_args = broker.clock.at(ahead)
    where = f"state = '{JobState.SUSPENDED.value}' AND visible_at <= {due}"
    with broker.connection.cursor() as cursor:
        if not broker.dialect.locks_scanned_rows:
            cursor.execute(f"UPDATE {JOB} SET state = {WAKE.to} WHERE {where}", due_args)
            return cursor.rowcount
        # InnoDB would lock every suspended row the UPDATE scans (a signal or a cancel would wait):
        # a plain read finds the due ones, then they are updated by primary key, rechecked.
        cursor.execute(f"SELECT id FROM {JOB} WHERE {where}", due_args)
        ids = [row[0] for row in cursor.fetchall()]
        woken = 0
        for part in chunks(ids):
            cursor.execute(f"UPDATE {JOB} SET state = {WAKE.to} WHERE {where} AND id IN ({marks(len(part))})",
                           [*due_args, *part])
            woken += cursor.rowcount
        return woken


def send_signal(broker: OrmBroker, job_id: str, signal: str, payload: str | None) -> bool:
    with broker.write_transaction() as cursor:
        state = (Job.objects.using(broker.alias).select_for_update().filter(pk=job_id)
                 .values_list("state", flat=True).first())
        if state is None:
            raise ConfigError(f"send_signal(): there is no job {job_id!r}")
        if state in FINAL:
            raise ConfigError(f"send_signal(): job {job_id} has ended ({state}); nothing can wait for {signal!r}")
        JobSignal.objects.using(broker.alias).create(job_id=job_id, name=signal, payload_package=payload)
        now, now_args = broker.clock.at(0)
        cursor.execute(
            f"UPDATE {JOB} SET state = {WAKE.to}, visible_at = {now} WHERE id = %s AND state IN {WAKE.sources} "
            f"AND EXISTS (SELECT 1 FROM {STEPS} WHERE job_id = %s AND signal_name = %s AND done = %s)",
            [*now_args, job_id, job_id, signal, False],
        )
        return bool(cursor.rowcount)


def suspended(broker: OrmBroker) -> dict[str, int]:
    """Jobs that sleep and jobs that wait for a signal now (suspended, with a sleep or wait not done)."""
    counts = {str(StepKind.SLEEP): 0, str(StepKind.WAIT): 0}
    rows = (JobStep.objects.using(broker.alias)
            .filter(done=False, job__state=JobState.SUSPENDED.value).values_list("kind", flat=True))
    for kind in rows:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def delete_for(cursor: Any, among: str, args: Sequence[Any]) -> None:
    """Delete the steps and signals of the jobs ``among`` (a ``job_id IN`` condition) selects."""
    cursor.execute(f"DELETE FROM {STEPS} WHERE {among}", list(args))
    cursor.execute(f"DELETE FROM {SIGNALS} WHERE {among}", list(args))


def wake_by_test_clock(broker: OrmBroker, clock_now: float) -> list[str]:
    """Make ready now the jobs whose sleep, or wait with a timeout, a test clock at ``clock_now`` has
    passed (``django_taskmq.testing.frozen_clock``); return their ids. As the sweep does when the real
    time comes (SUSPENDED -WAKE-> QUEUED), but visible at once: the test's time is not the database's."""
    alias = broker.alias
    due = list(JobStep.objects.using(alias)
               .filter(done=False, wake_at__lte=clock_now,
                       job__state__in=[JobState.SUSPENDED.value, JobState.QUEUED.value])
               .values_list("job_id", flat=True).distinct())
    Job.objects.using(alias).filter(
        pk__in=due, state__in=[JobState.SUSPENDED.value, JobState.QUEUED.value]).update(
        state=JobState.QUEUED.value, visible_at=broker.now())
    return due
