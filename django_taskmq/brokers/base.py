"""The broker contract every engine implements (the ORM broker is the first).

Times are seconds. The times a broker stores and compares for its own decisions (leases,
visibility, expiry, retries, heartbeats, schedules) are its clock's: on a server database the
database's own, read by the statement that uses them (see :mod:`.clock`); a caller gives durations
(``delay``, ``lease``), and reads the broker's time with :meth:`Broker.now`. Every write that ends or changes a delivery is fenced by the reservation's
lease token: a holder whose lease ran out (and was reclaimed) gets :class:`LeaseLost` and
changes nothing.
"""

from __future__ import annotations

import abc
import datetime
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple, Protocol

from ..conf import Settings
from ..policy.states import JobState
from ..policy.unique import Unique


class Reservation(NamedTuple):
    """One delivery of a message, owned until its lease runs out.

    A named tuple: it crosses process boundaries many times per task, and tuples pickle fastest.
    """

    job_id: str
    queue: str
    priority: int
    deliveries: int
    yields: int
    token: str
    owner: str = ""
    max_deliveries: int = 0
    payload: str = ""


class Ack(NamedTuple):
    """A successful run to record with :meth:`Broker.ack_many`."""

    reservation: Reservation
    result: Any = None
    started_at: Any = None
    finished_at: Any = None


class StepRecord(NamedTuple):
    """What one run of a durable task did, kept for the runs after it (see :mod:`django_taskmq.runtime.durable_context`).

    ``kind`` is "step" (``result``: its signed value), "sleep" (``wake_at``: the broker's epoch it
    wakes at) or "wait" (``signal``: the name it waits for, ``wake_at``: its deadline or None,
    ``result``: the signal's signed payload). ``done``: a sleep or wait that is over.
    """

    name: str
    kind: str
    digest: str = ""
    result: str | None = None
    wake_at: float | None = None
    signal: str = ""
    done: bool = True


class Waker(Protocol):
    """Sleeps an idle pusher until work may have arrived (see :meth:`Broker.waker`)."""

    woken: bool

    def wait(self, timeout: float, pipe: Any = None) -> None:
        """Sleep up to ``timeout`` seconds, less if work may have arrived or ``pipe`` is readable;
        afterwards ``woken`` says whether the broker signalled new work."""

    def hears_every_insert(self) -> bool:
        """True when every job stored from now on will end the next :meth:`wait` at once (the store
        announces them); the pusher then waits without looking for work first."""


class Broker(abc.ABC):
    """Stores messages and hands them out under leases, in pick order.

    The contract is what the cluster and the operator's actions claim and write: every write that
    changes a job, a schedule, a dead letter or their bookkeeping is a member here, and nothing
    outside ``brokers/`` writes those rows (``tests/unit/test_architecture.py`` checks it). The
    reads declared here are the ones the cluster decides on and the operator's commands act on
    (:meth:`jobs`, :meth:`dead_letters`, :meth:`stats`, :meth:`flow_status`, :meth:`count_finished`),
    which the contract suite checks on every broker.

    Other reads are plain ORM queries on :mod:`django_taskmq.models`, outside this contract: a
    job's result and status (``fetch``, ``result``, ``Job.result``, the ``django.tasks`` backend),
    workflow info, monitoring and metrics, the admin's lists and pages, the health view. A broker
    that kept its rows elsewhere could not serve them, and this class does not pretend it could.
    Schedules, workflows and durable steps are the ORM's too: their members have defaults that refuse.

    The cluster, the recorder, the scheduler, the API, the admin and the commands use a broker
    only through the members declared here. A broker owns its transactions: callers that need
    several writes to commit together ask for :meth:`atomic`, never open one themselves.
    """

    settings: Settings
    #: Seconds between the sweeps of expired leases that :meth:`reserve` does itself (0: every call).
    reclaim_every: float = 1.0

    # -- transactions and connections ---------------------------------------------------------
    @abc.abstractmethod
    def atomic(self, *, write: bool = False) -> AbstractContextManager[None]:
        """Return a context in which this broker's writes commit together or not at all.

        Nested, it is a savepoint: an error inside rolls back only the inner block. ``write``
        takes the write lock up front where the engine has one (SQLite), so a block that reads
        before it writes waits for other writers instead of failing.
        """

    def bookkeeping(self) -> AbstractContextManager[None]:
        """Return a context for the cluster's own commits: recording outcomes, renewing leases,
        giving work back, pruning, heartbeats; never a caller's enqueue.

        With ``TASKMQ['durable_outcomes']`` False, the commits of such a block need not wait for
        the disk flush where the store can say so per transaction. Entered inside a transaction
        (the caller's), it changes nothing. This default changes nothing.
        """
        return nullcontext()

    @abc.abstractmethod
    def close(self) -> None:
        """Drop this process's connection (after an error; the next call reconnects)."""

    def connect(self) -> None:
        """Open this process's connection now, so that the first real call does not wait for it.

        Optional: a broker without a connection to open does nothing. Raises what connecting
        raises (the store is away); later calls try again.
        """

    def dedicate(self) -> None:
        """Say that this process uses its connection for this broker's statements only (the
        pusher's, which runs no task code): the broker may tune the store's session for them.
        Optional: this default does nothing."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Return a short name of the store for messages ("postgresql 'jobs' at db:5432")."""

    @abc.abstractmethod
    def waker(self, burst: bool = False) -> Waker:
        """Return a :class:`Waker` for an idle pusher of this process (``burst``: of a ``--burst``
        cluster, whose naps are short)."""

    # -- enqueue ----------------------------------------------------------------------------
    @abc.abstractmethod
    def enqueue(self, job: Mapping[str, Any], key: str | None = None, unique: Unique | None = None) -> str:
        """Store one job (its column values by attribute name); return its id.

        With ``key``: within the idempotency TTL, return the id of the job that key already made
        and store nothing, also when callers race.

        With ``unique`` (a coalescing key; never together with ``key``): while the job that holds
        ``unique.key`` is in one of the states the key was taken for, store nothing and return
        that job's id; with ``unique.replace`` that job, if it has not started, first takes this
        job's ``payload``, ``visible_at`` and (if given) ``expires_at``. Once the holder left those
        states (or is gone), this job is stored and holds the key for ``unique.states``. Callers
        that race never store two jobs for one key.
        """

    @abc.abstractmethod
    def enqueue_many(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """Store many jobs (column values by attribute name) in few statements; return their ids."""

    # -- reserve ----------------------------------------------------------------------------
    @abc.abstractmethod
    def reserve(self, queues: Sequence[str], limit: int, lease: float, owner: str,
                above: int | None = None, cluster: str | None = None) -> list[Reservation]:
        """Reserve up to ``limit`` ready messages of ``queues`` in pick order for ``lease`` seconds,
        held by ``owner`` (a sentinel's id) of the cluster named ``cluster`` (stored as ``Job.cluster``).

        Each reserved message counts one delivery. Expired leases are reclaimed first (at most
        every :attr:`reclaim_every` seconds); an expired
        message is marked EXPIRED and a message past ``max_deliveries`` goes to the DLQ instead of
        being returned. ``above`` limits the claim to priorities greater than it (a full buffer
        looking for urgent work only).
        """

    @abc.abstractmethod
    def flow_wait(self) -> float | None:
        """Seconds until a rate limit that held back a job in the last claim opens (None: none did).

        A pusher with nothing to claim sleeps no longer than this.
        """

    @abc.abstractmethod
    def flow_status(self) -> dict[str, Any]:
        """Return what flow control holds now: ``keys`` (running, limit, waiting per concurrency
        key in use), ``queues`` (running against each queue's cap) and ``rates`` (seconds until
        each rate limit allows its next start)."""

    @abc.abstractmethod
    def reserve_job(self, job_id: str, lease: float, owner: str) -> Reservation | None:
        """Reserve one given job if it is ready and has deliveries left (sync mode)."""

    @abc.abstractmethod
    def has_ready(self, queues: Sequence[str], above: int | None = None) -> bool:
        """Return True when a visible ready message waits in ``queues`` (above a priority)."""

    @abc.abstractmethod
    def reclaim_expired(self) -> int:
        """Put messages whose lease ran out back for redelivery; return how many. The same sweep
        makes durable jobs whose sleep or wait ends within a few seconds claimable again."""

    # -- ending or changing a delivery (fenced by the lease token) ----------------------------
    @abc.abstractmethod
    def ack_many(self, acks: Iterable[Ack]) -> list[Reservation]:
        """Record successes (one or many, in few statements); return the reservations whose lease
        was lost. A holder's repeated ack changes nothing and is not lost."""

    @abc.abstractmethod
    def count_outcomes(self, counts: Mapping[tuple[datetime.datetime, str], tuple[int, int]]) -> None:
        """Add to the throughput rollup (see :mod:`~django_taskmq.policy.throughput`): per (slot
        start, queue), ``(succeeded, failed)``. Called in the transaction that records the outcomes."""

    @abc.abstractmethod
    def time_outcomes(self, finished: Mapping[str, datetime.datetime]) -> None:
        """Add to the timing rollup (see :mod:`~django_taskmq.policy.timings`) the wait and run
        times of the jobs ``{job id: finished at}`` that just ended SUCCEEDED, FAILED or DEAD,
        read from their rows; a job that never started is not timed. Called in the transaction
        that records the outcomes, before anything can prune their rows."""

    @abc.abstractmethod
    def settle(self, reservation: Reservation, *, requeue: bool = True, delay: float = 0, error: str = "",
               traceback: str = "", started_at: datetime.datetime | None = None) -> JobState | None:
        """Record a failed execution and return the job's new state.

        RETRYING (visible after ``delay``) while deliveries are left; DEAD when they are used up
        or ``requeue`` is False. None when this holder already recorded it. Raises LeaseLost.
        """

    @abc.abstractmethod
    def fail(self, reservation: Reservation, error: str, traceback: str = "",
             started_at: datetime.datetime | None = None, finished_at: datetime.datetime | None = None) -> bool:
        """Acknowledge a failure (``ack_failures``): the job ends FAILED, no redelivery."""

    @abc.abstractmethod
    def defer(self, reservation: Reservation, delay: float = 0) -> bool:
        """Put an unstarted or deferring message back, visible after ``delay``; not a delivery."""

    @abc.abstractmethod
    def defer_many(self, reservations: Sequence[Reservation]) -> int:
        """Put many unstarted reservations back at once (a graceful stop); return how many."""

    @abc.abstractmethod
    def return_interrupted(self, reservations: Sequence[Reservation], reason: str) -> int:
        """Put back reservations whose execution was interrupted from outside before it could end
        (a stop's ``stop_timeout``), as :meth:`defer_many` does: QUEUED and visible at once, the
        delivery given back, no execution counted; ``reason`` becomes the job's error. Return how many."""

    @abc.abstractmethod
    def yield_reservation(self, reservation: Reservation, delay: float = 0) -> bool:
        """Give an unstarted message back so higher priority work runs first; not a delivery.

        Returns False (and keeps the reservation) once the message has yielded ``max_yields`` times.
        """

    @abc.abstractmethod
    def report_progress(self, reservation: Reservation, report: Mapping[str, Any]) -> bool:
        """Store ``report`` as the held job's progress (``Job.progress_report``); return False when
        the job is no longer held under this lease (the report is dropped, nothing raised)."""

    @abc.abstractmethod
    def extend_leases(self, owner: str, job_ids: Sequence[str], seconds: float) -> int:
        """Renew the leases ``owner`` still holds on ``job_ids``; return how many."""

    @abc.abstractmethod
    def dead_letter(self, reservation: Reservation, reason: str, error: str = "", traceback: str = "",
                    started_at: datetime.datetime | None = None) -> bool:
        """Move the message to its queue's DLQ with ``reason``; its job becomes DEAD.

        With ``started_at`` the delivery ran (it counts as an execution); without ``error`` the
        job keeps its last error and the letter carries it.
        """

    @abc.abstractmethod
    def dead_letter_package(self, reservation: Reservation, reason: str) -> bool:
        """Dead-letter a package that failed to verify or unpickle (it never ran)."""

    # -- the DLQ and operator actions -----------------------------------------------------------
    @abc.abstractmethod
    def dead_letters(self, queue: str | None = None) -> Any:
        """Return the DLQ entries not yet replayed (of one queue or all), newest first."""

    @abc.abstractmethod
    def replay_dead(self, dead_letter_id: int, queue: str | None = None, priority: int | None = None) -> str:
        """Requeue a dead-lettered job (same id, deliveries and yields reset); return its id.

        Raises ConfigError when the letter does not exist, was replayed, or its job is no longer dead.
        """

    @abc.abstractmethod
    def replay_all(self, queue: str | None = None) -> int:
        """Replay every pending DLQ entry whose job is dead (of one queue or all); return how many."""

    @abc.abstractmethod
    def purge_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        """Delete the pending DLQ entries (of one queue, or these ids) and their dead jobs; return how many."""

    @abc.abstractmethod
    def cancel(self, job_ids: Sequence[str]) -> int:
        """Cancel the jobs of ``job_ids`` that have not started; return how many."""

    @abc.abstractmethod
    def request_cancel(self, job_ids: Sequence[str]) -> int:
        """Ask whichever cluster runs the RUNNING jobs of ``job_ids`` to stop them; return how many.

        Stored with the job (a repeated request keeps the first time): the holder finds it with
        :meth:`cancel_requested` and records the end with :meth:`end_cancelled`.
        """

    @abc.abstractmethod
    def cancel_requested(self, job_ids: Sequence[str]) -> list[str]:
        """Return the ids among ``job_ids`` (held by the caller) whose cancellation was requested."""

    @abc.abstractmethod
    def end_cancelled(self, reservation: Reservation, error: str, traceback: str = "",
                      started_at: datetime.datetime | None = None,
                      finished_at: datetime.datetime | None = None) -> bool:
        """Record that a held job stopped on a cancellation request: it ends CANCELLED, never retried.

        With ``started_at`` it ran (an execution counts); without, it was cancelled before it started.
        Raises LeaseLost.
        """

    @abc.abstractmethod
    def retry_jobs(self, job_ids: Sequence[str], queue: str | None = None, priority: int | None = None) -> int:
        """Requeue the jobs of ``job_ids`` that ended FAILED, DEAD, EXPIRED or CANCELLED; return how many.

        Same id, deliveries and yields reset, history kept (attempts, last error); optionally into
        ``queue`` at ``priority``; an expiry already past is cleared. The pending dead letters of a
        requeued DEAD job are marked replayed. Jobs in any other state are left as they are.
        """

    @abc.abstractmethod
    def forget_group(self, group: str, delete: bool = False) -> int:
        """Take the label ``group`` off its finished jobs, or with ``delete`` delete them (and their
        dead letters); return how many. Jobs that have not finished keep their group."""

    # -- the cluster's upkeep -------------------------------------------------------------------
    @abc.abstractmethod
    def prune(self, keep: int, batch: int = 1000) -> int:
        """Delete the oldest SUCCEEDED jobs beyond the newest ``keep``, at most ``batch``; return how many."""

    @abc.abstractmethod
    def prune_keys(self, batch: int = 1000) -> int:
        """Delete idempotency keys whose TTL ran out, at most ``batch``; return how many."""

    def prune_workflows(self, batch: int = 100) -> int:
        """Delete ended workflows none of whose steps' jobs is left (retention took them), at most
        ``batch``, with their steps and edges; return how many. This default has none."""
        return 0

    @abc.abstractmethod
    def paused_queues(self) -> frozenset[str]:
        """Return the queues paused now (no cluster claims from them)."""

    @abc.abstractmethod
    def pause_queue(self, queue: str, by: str = "") -> bool:
        """Pause ``queue`` for every cluster; return False when it was paused already."""

    @abc.abstractmethod
    def resume_queue(self, queue: str) -> bool:
        """Resume ``queue``; return False when it was not paused."""

    @abc.abstractmethod
    def delete_finished(self, state: str, before: float, batch: int = 500) -> int:
        """Delete at most ``batch`` jobs in the final ``state`` that finished before the epoch time
        ``before``, oldest first, with their dead letters; return how many jobs."""

    @abc.abstractmethod
    def count_finished(self, state: str, before: float) -> int:
        """Return how many jobs in the final ``state`` finished before the epoch time ``before``."""

    @abc.abstractmethod
    def hold_chore(self, name: str, owner: str, seconds: float) -> bool:
        """Take the chore ``name`` (upkeep one cluster does for all) for ``owner`` for ``seconds``, or
        keep it; return False while another owner holds it."""

    @abc.abstractmethod
    def chore_done(self, name: str, deleted: int) -> None:
        """Add ``deleted`` to the rows the chore ``name`` deleted, and note that it ran now."""

    @abc.abstractmethod
    def analyze(self) -> None:
        """Refresh the store's statistics where it keeps any (a no-op elsewhere)."""

    @abc.abstractmethod
    def unfinished(self, queues: Sequence[str]) -> bool:
        """Return True while ``queues`` hold work a burst must wait for: leased, retrying, or
        queued and visible now by the broker's clock (one consistent snapshot)."""

    @abc.abstractmethod
    def publish_heartbeat(self, cluster_id: str, **fields: Any) -> None:
        """Create or update the heartbeat row of one cluster (see ``models.Cluster``); ``beat_at``
        is set to the broker's time of the write."""

    @abc.abstractmethod
    def silent_clusters(self, host: str | None, longer_than: float, shorter_than: float) -> list[tuple[str, int]]:
        """Return ``(cluster id, pid)`` of each heartbeat row (of ``host``; None: of any host) whose
        state is not ``stopped`` and whose last beat is more than ``longer_than`` and less than
        ``shorter_than`` seconds old by the broker's clock."""

    @abc.abstractmethod
    def expire_leases(self, owners: Sequence[str]) -> int:
        """Make the leases ``owners`` (clusters known to be dead) hold on running jobs run out now,
        so the next sweep of expired leases takes those jobs back (their deliveries count, as after
        any lease that ran out); return how many."""

    @abc.abstractmethod
    def now(self) -> float:
        """Return the broker's time now, epoch seconds: the database's on a server engine (a query:
        for schedules, monitoring and checks, not for every job)."""

    @abc.abstractmethod
    def clock_skew(self) -> Any:
        """Measure this host's clock against the broker's: a :class:`~.clock.Skew`, or None when
        the broker's clock is this host's."""

    @abc.abstractmethod
    def jobs(self, job_ids: Sequence[str]) -> dict[str, Any]:
        """Return the state records (``models.Job``) of ``job_ids`` that exist, by id."""

    # -- workflows (brokers that cannot run them refuse) -------------------------------------
    def enqueue_workflow(self, workflow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]],
                         edges: Sequence[tuple[str, str]], key: str | None = None) -> str:
        """Store a workflow (``id``, ``name``), its steps (``job``: column values, ``name``,
        ``waiting_for``, ``run_on_failure``) and its edges (upstream job id, downstream job id)
        in the caller's transaction; steps that wait are stored WAITING. Return its id; with
        ``key``, the id of the workflow that key queued within the idempotency TTL instead, if any
        (nothing is stored then)."""
        raise NotImplementedError(f"{type(self).__name__} does not run workflows")

    def workflow_ended(self, job_ids: Sequence[str]) -> None:
        """Count the end of the workflow steps among ``job_ids`` (recorded in this transaction):
        release or cancel their dependents and end the workflows they finish. Idempotent."""
        raise NotImplementedError(f"{type(self).__name__} does not run workflows")

    def cancel_workflow(self, workflow_id: str) -> int:
        """Cancel the steps of a workflow that have not ended (ask running ones to stop); return how many."""
        raise NotImplementedError(f"{type(self).__name__} does not run workflows")

    # -- schedules (``models.Schedule`` rows; brokers that keep none refuse) ------------------
    def due_schedules(self, now: datetime.datetime, limit: int = 100) -> list[Any]:
        """Return the due schedules that are neither used up nor paused, locked against other clusters until the enclosing
        :meth:`atomic` block ends; call it inside ``atomic(write=True)``."""
        raise NotImplementedError(f"{type(self).__name__} does not keep schedules")

    def disable_schedule(self, schedule_id: int) -> None:
        """Stop a schedule from firing again (``repeats = 0``)."""
        raise NotImplementedError(f"{type(self).__name__} does not keep schedules")

    def wake_by_test_clock(self, clock_now: float) -> list[str]:
        """Make ready now the durable jobs whose sleep, or wait's timeout, a test clock at ``clock_now``
        (epoch seconds) has passed; return their ids (``django_taskmq.testing.frozen_clock``)."""
        raise NotImplementedError(f"{type(self).__name__} has no test clock")

    def store_schedule(self, name: str, values: Mapping[str, Any], replace: bool = False) -> Any:
        """Create the schedule ``name`` with ``values`` (its fields by name), or with ``replace``
        update the one of that name; return it. The values are stored as given (a new cron
        schedule keeps the ``next_run`` given). Raises ConfigError when it exists and not ``replace``."""
        raise NotImplementedError(f"{type(self).__name__} does not keep schedules")

    def save_schedule(self, schedule: Any, fields: Sequence[str] | None = None) -> None:
        """Store a new or changed schedule (a ``models.Schedule``; ``fields``: only these)."""
        raise NotImplementedError(f"{type(self).__name__} does not keep schedules")

    def pause_schedules(self, schedule_ids: Sequence[int], paused: bool) -> int:
        """Pause (``paused``) or resume the schedules of ``schedule_ids``; return how many changed."""
        raise NotImplementedError(f"{type(self).__name__} does not keep schedules")

    def delete_schedules(self, schedule_ids: Sequence[int]) -> int:
        """Delete the schedules of ``schedule_ids``; return how many."""
        raise NotImplementedError(f"{type(self).__name__} does not keep schedules")

    # -- durable tasks (brokers that cannot run them refuse) -----------------------------------
    def steps(self, job_id: str) -> list[StepRecord]:
        """Return what the runs of durable job ``job_id`` did so far, in the order they did it."""
        raise NotImplementedError(f"{type(self).__name__} does not run durable tasks")

    def save_step(self, reservation: Reservation, record: StepRecord) -> None:
        """Store ``record`` for the held job, once (its name is unique per job). Raises LeaseLost."""
        raise NotImplementedError(f"{type(self).__name__} does not run durable tasks")

    def finish_step(self, reservation: Reservation, name: str, result: str | None = None) -> None:
        """Mark the held job's sleep or wait ``name`` over (a wait with ``result``). Raises LeaseLost."""
        raise NotImplementedError(f"{type(self).__name__} does not run durable tasks")

    def take_signal(self, reservation: Reservation, name: str, signal: str) -> tuple[bool, str | None]:
        """Consume the oldest signal ``signal`` sent to the held job, if any, ending its wait ``name``
        with the signal's payload (stored if the wait was not yet): ``(True, payload)``, else
        ``(False, None)``. Raises LeaseLost."""
        raise NotImplementedError(f"{type(self).__name__} does not run durable tasks")

    def suspend(self, reservation: Reservation, wake_at: float | None, signal: str = "") -> JobState | None:
        """Give a sleeping or waiting job's delivery back (not a delivery, not an execution): SUSPENDED
        (not claimable; cancellable at once) until ``wake_at`` (broker epoch; None: only its signal wakes
        it), or QUEUED and visible at once if ``signal`` was sent already. A job whose cancellation was
        requested ends CANCELLED instead. Returns the new state, None when the lease was lost."""
        raise NotImplementedError(f"{type(self).__name__} does not run durable tasks")

    def send_signal(self, job_id: str, signal: str, payload: str | None) -> bool:
        """Keep the signed ``payload`` for ``job_id``'s wait for ``signal``; wake the job if it waits
        for it now (return True). Raises ConfigError for an unknown or finished job."""
        raise NotImplementedError(f"{type(self).__name__} does not run durable tasks")

    def suspended(self) -> dict[str, int]:
        """Return how many jobs sleep (``sleep``) and wait for a signal (``wait``) now."""
        return {"sleep": 0, "wait": 0}

    @abc.abstractmethod
    def stats(self) -> list[dict[str, Any]]:
        """Return per queue and priority counts: ready, delayed, reserved, dead."""
