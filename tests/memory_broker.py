"""An in-memory broker for unit tests: the Broker contract, kept simple, on dicts.

No database and no process. Built only on the ABC and the pure policy modules: leases with tokens
that fence every write, one delivery counted per reservation, the ``max_deliveries`` poison guard
at reserve time and on failure, yields up to ``max_yields``, unstarted give-backs (defer, yield, a
graceful stop) that take their delivery back, pick order by priority then arrival (the queues'
weights and the lift of idle queues: ``policy.pick``), flow control (concurrency keys, queue caps,
rate limits: ``policy.flow.admit``), the attempt history (``policy.attempts``), results sealed as
stored, the dead-letter queue and its operator actions (replay, retry, purge), ``stats()`` and
retention by ``finished_at``, durable tasks' steps, suspensions and signals. It is a test double of the contract: tests/contract runs the same
tests on it and on the ORM broker.

``atomic()`` nests like savepoints (a block that raises restores what it changed) and counts the
outermost blocks in ``transactions``; ``closes`` counts ``close()``. ``job(id)`` and ``letters``
show the state. Members neither the cluster's pure parts nor the contract suite call raise
NotImplementedError: groups and the waker; schedules, workflows and durable steps are the ORM's
(the contract's defaults refuse them).
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import itertools
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django_taskmq.brokers.base import Ack, Broker, Reservation, StepRecord, Waker
from django_taskmq.conf import Settings
from django_taskmq.exceptions import ConfigError, LeaseLost
from django_taskmq.policy import attempts, flow, pick
from django_taskmq.policy import timings as timings_policy
from django_taskmq.policy.priority import validate_priority
from django_taskmq.policy.states import Event, InvalidTransition, JobState, transition
from django_taskmq.policy.unique import REPLACEABLE, Unique
from django_taskmq.envelope import seal_result, verify_result


@dataclass
class Job:
    """One stored message and its delivery state."""

    id: str
    queue: str = "default"
    priority: int = 0
    payload: str = ""
    func: str = ""
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    rate_limit: str | None = None
    state: JobState = JobState.QUEUED
    deliveries: int = 0
    max_deliveries: int = 5
    yields: int = 0
    visible_at: float = 0.0
    enqueued_at: float = 0.0
    expires_at: float | None = None
    lease_owner: str | None = None
    lease_token: str | None = None
    lease_until: float | None = None
    attempt: int = 0
    result_package: str | None = None  # the result pickled and signed, as the ORM broker stores it
    error: str = ""
    traceback: str = ""
    started_at: Any = None
    first_started_at: Any = None
    finished_at: Any = None
    attempt_log: dict[str, Any] | None = None
    progress_report: dict[str, Any] | None = None

    @property
    def result(self) -> Any:
        """The task's return value, verified and unpickled (``models.Job.result``)."""
        from django_taskmq.conf import get_settings

        return None if self.result_package is None else verify_result(self.result_package, get_settings().name)
    arrival: int = 0
    cancel_requested: bool = False
    # A durable job's steps and the signals sent to it ((name, payload, consumed)): they live and go
    # with the job. Tuples: atomic()'s copy of every job stays as cheap for jobs without them.
    steps: tuple[StepRecord, ...] = ()
    signals: tuple[tuple[str, str | None, bool], ...] = ()


@dataclass
class Letter:
    """One dead-letter entry (``failed_at`` and ``replayed_at`` in epoch seconds)."""

    id: int
    job_id: str
    queue: str
    reason: str
    error: str
    deliveries: int
    failed_at: float = 0.0
    replayed_at: float | None = None
    replay_count: int = 0

    @property
    def pk(self) -> int:
        return self.id


def _moment(value: Any) -> datetime.datetime:
    """A start time as an aware datetime (None: now), as the ORM broker stores it."""
    if value is None:
        return datetime.datetime.now(datetime.UTC)
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, (int, float)):
        return datetime.datetime.fromtimestamp(value, datetime.UTC)
    raise TypeError(f"a start time must be a datetime or epoch seconds, not {value!r}")  # as a database refuses it


def _epoch(value: Any) -> float:
    """A finished_at as epoch seconds (the recorder gives floats, a test may give a datetime)."""
    if value is None:
        return float("inf")
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def _unused(name: str) -> NotImplementedError:
    return NotImplementedError(f"MemoryBroker.{name}: the cluster's pure parts do not use it; test it on a real broker")


class MemoryBroker(Broker):
    """The broker contract in memory; see the module docstring."""

    reclaim_every = 0.0  # reserve() sweeps expired leases on every call

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._jobs: dict[str, Job] = {}
        self.letters: list[Letter] = []
        self._letter_ids = 0  # the last letter's id: never reused, as a database sequence
        self.heartbeats: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, tuple[str, float]] = {}  # idempotency key -> (job id, expires at)
        self._unique: dict[str, tuple[str, str]] = {}  # coalescing key -> (job id, states column)
        self._served: dict[str, int] = {}
        self._counts: dict[tuple[Any, str], list[int]] = {}  # the throughput rollup: (slot, queue) -> [ok, failed]
        self.timings: dict[tuple[Any, str, str, int], list] = {}  # the timing rollup (policy.timings)
        self._arrivals = itertools.count()
        self._depth = 0
        self.transactions = 0  # outermost atomic() blocks
        self.closes = 0
        self._last_reclaim = 0.0  # time.time() of the last sweep reserve() did itself
        self._chores: dict[str, tuple[str, float]] = {}  # chore -> (owner, held until)
        self.chore_deleted: dict[str, int] = {}
        self.paused: set[str] = set()
        self._tats: dict[str, float] = {}  # rate-limit bucket -> when it allows its next start (GCRA)
        self._opens_at: float | None = None  # when a rate limit that held a job in the last claim opens

    def job(self, job_id: str) -> Job:
        return self._jobs[job_id]

    # -- transactions and connections ---------------------------------------------------------
    def atomic(self, *, write: bool = False) -> contextlib.AbstractContextManager[None]:
        return self._atomic()

    @contextlib.contextmanager
    def _atomic(self) -> Iterator[None]:
        if self._depth == 0:
            self.transactions += 1
        saved = copy.deepcopy(self._stored())
        self._depth += 1
        try:
            yield
        except BaseException:
            (self._jobs, self.letters, self.heartbeats, self._keys, self._unique, self._served, self._tats,
             self.paused, self._chores, self._counts, self.timings) = saved
            raise
        finally:
            self._depth -= 1

    def _stored(self) -> tuple[Any, ...]:
        """Everything a database would hold (and roll back): jobs, letters, heartbeats, keys,
        served counters, rate limits, pauses, chores, the throughput and timing rollups."""
        return (self._jobs, self.letters, self.heartbeats, self._keys, self._unique, self._served, self._tats,
                self.paused, self._chores, self._counts, self.timings)

    def close(self) -> None:
        self.closes += 1

    def describe(self) -> str:
        return "memory broker"

    def flow_wait(self) -> float | None:
        return None if self._opens_at is None else max(self._opens_at - time.time(), 0.0)

    def flow_status(self) -> dict[str, Any]:
        keys: dict[str, dict[str, int]] = {}
        for job in sorted(self._jobs.values(), key=lambda j: j.concurrency_key or ""):
            if job.concurrency_key is not None and job.state == JobState.RUNNING:
                entry = keys.setdefault(job.concurrency_key, {"running": 0, "limit": 1})
                entry["running"] += 1
                entry["limit"] = max(entry["limit"], job.concurrency_limit or 1)
        for job in self._jobs.values():
            if job.concurrency_key in keys and job.state in JobState.READY:
                keys[job.concurrency_key]["waiting"] = keys[job.concurrency_key].get("waiting", 0) + 1
        running = self._running_by(lambda j: j.queue)
        queues = {q: {"running": running.get(q, 0), "cap": cap} for q, cap in sorted(self.settings.queue_caps().items())}
        now = time.time()
        rates = {key: {"next_start_in": round(max(tat - now, 0.0), 3)} for key, tat in sorted(self._tats.items())}
        return {"keys": keys, "queues": queues, "rates": rates}

    def _running_by(self, attribute: Any) -> dict[Any, int]:
        """How many RUNNING jobs each value of ``attribute(job)`` has."""
        counts: dict[Any, int] = {}
        for job in self._jobs.values():
            if job.state == JobState.RUNNING:
                counts[attribute(job)] = counts.get(attribute(job), 0) + 1
        return counts

    def waker(self, burst: bool = False) -> Waker:
        raise _unused("waker")

    # -- enqueue ------------------------------------------------------------------------------
    def enqueue(self, job: Mapping[str, Any], key: str | None = None, unique: Unique | None = None) -> str:
        now = time.time()
        if unique is not None:
            held = self._unique.get(unique.key)
            holder = self._jobs.get(held[0]) if held is not None else None
            expired = holder is not None and holder.expires_at is not None and holder.expires_at <= now
            if holder is not None and not expired and unique.holds(holder.state, held[1]):
                if unique.replace and holder.state in REPLACEABLE:
                    holder.payload = job.get("payload", "")
                    holder.visible_at = job.get("visible_at") or 0.0
                    if job.get("expires_at") is not None:
                        holder.expires_at = job["expires_at"]
                return holder.id
            self._unique[unique.key] = (job["id"], unique.column)
        if key is not None:
            known = self._keys.get(key)
            if known is not None and known[1] > now:
                return known[0]
            self._keys[key] = (job["id"], now + self.settings.idempotency_ttl)
        self._jobs[job["id"]] = Job(
            id=job["id"], queue=job.get("queue") or self.settings.default_queue, priority=job.get("priority") or 0,
            payload=job.get("payload", ""), state=JobState(job.get("state") or JobState.QUEUED),
            func=job.get("func") or "", concurrency_key=job.get("concurrency_key"),
            concurrency_limit=job.get("concurrency_limit"), rate_limit=job.get("rate_limit"),
            max_deliveries=job.get("max_deliveries") or self.settings.max_deliveries,
            visible_at=job.get("visible_at") or 0.0, enqueued_at=now, expires_at=job.get("expires_at"),
            arrival=next(self._arrivals))
        return job["id"]

    def enqueue_many(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        return [self.enqueue(row) for row in rows]

    # -- reserve ------------------------------------------------------------------------------
    def _ready(self, queues: Iterable[str], above: int | None, now: float,
               closed_funcs: Iterable[str] = ()) -> list[Job]:
        """Visible ready jobs of ``queues`` (above a priority) whose concurrency key is free and whose
        task's rate limit is not closed, in pick order within a queue."""
        wanted, closed = set(queues), set(closed_funcs)
        keys = self._running_by(lambda j: j.concurrency_key)
        ready = [j for j in self._jobs.values() if j.state in JobState.READY and j.queue in wanted
                 and j.visible_at <= now and (above is None or j.priority > above)
                 and (j.concurrency_key is None or keys.get(j.concurrency_key, 0) < (j.concurrency_limit or 1))
                 and (j.rate_limit is None or j.func not in closed)]
        return sorted(ready, key=lambda j: (-j.priority, j.arrival))

    def _closed(self, queues: Sequence[str], now: float) -> tuple[list[str], list[str]]:
        """(queues to serve, tasks whose rate limit is closed): a queue at its cap or with a closed
        rate limit is left out of the claim (as ``orm.flow.FlowGate.closed``)."""
        shut = {key: tat for key, tat in self._tats.items() if tat > now}
        caps = self.settings.queue_caps()
        running = self._running_by(lambda j: j.queue)
        serve = [q for q in queues if f"queue:{q}" not in shut and (q not in caps or running.get(q, 0) < caps[q])]
        self._opens_at = min(shut.values()) if shut else None
        return serve, [key[5:] for key in shut if key.startswith("task:")]

    def _choose(self, heads: dict[str, list[Job]], limit: int, now: float) -> list[Job]:
        """The heads to claim, in pick order, within every flow limit (``policy.flow.admit``)."""
        caps, rates = self.settings.queue_caps(), self.settings.queue_rates()
        every = [j for items in heads.values() for j in items]
        if not any(j.concurrency_key is not None or j.rate_limit is not None for j in every) and not any(
                q in caps or q in rates for q in heads):
            return pick.plan(heads, self._served, self.settings.weights(), limit)[0]
        ordered, _ = pick.plan(heads, self._served, self.settings.weights(), len(every))

        def buckets_of(job: Job) -> Iterable[tuple[str, flow.Rate]]:
            if job.rate_limit is not None:
                yield f"task:{job.func}", flow.parse_rate(job.rate_limit)
            if job.queue in rates:
                yield f"queue:{job.queue}", rates[job.queue]

        verdict = flow.admit(
            ordered, limit, now,
            key_of=lambda j: (j.concurrency_key, j.concurrency_limit or 1) if j.concurrency_key is not None else None,
            queue_of=lambda j: j.queue, buckets_of=buckets_of,
            running_keys=self._running_by(lambda j: j.concurrency_key), queue_caps=caps,
            running_queues=self._running_by(lambda j: j.queue), tats=dict(self._tats),
        )
        self._tats.update(verdict.tats)
        if verdict.opens_at is not None:
            self._opens_at = verdict.opens_at if self._opens_at is None else min(self._opens_at, verdict.opens_at)
        return verdict.admitted

    def reserve(self, queues: Sequence[str], limit: int, lease: float, owner: str,
                above: int | None = None, cluster: str | None = None) -> list[Reservation]:
        if limit <= 0 or not queues:
            return []
        if time.time() - self._last_reclaim >= self.reclaim_every:
            self.reclaim_expired()
            self._last_reclaim = time.time()
        now = time.time()
        serve, closed_funcs = self._closed(sorted(set(queues)), now)
        ready = self._ready(serve, above, now, closed_funcs)
        heads = {q: [j for j in ready if j.queue == q][:limit] for q in serve}
        chosen = self._choose(heads, limit, now)
        token = uuid.uuid4().hex
        reservations = []
        for job in chosen:
            if job.expires_at is not None and job.expires_at <= now:
                self._move(job, Event.EXPIRE)
            elif job.deliveries >= job.max_deliveries:
                self._bury(job, f"max deliveries exceeded: delivered {job.deliveries} times without an ack")
            else:
                reservations.append(self._lease(job, token, owner, now + lease))
        for r in reservations:
            self._served[r.queue] = self._served.get(r.queue, 0) + 1
        if above is None:  # a claim limited to high priorities says nothing about which queues are idle
            busy = [q for q, items in heads.items() if items]
            idle = [q for q, items in heads.items() if not items]
            served = {q: self._served.get(q, 0) for q in heads}
            self._served.update(pick.lift_idle(served, self.settings.weights(), busy, idle))
        return reservations

    def _lease(self, job: Job, token: str, owner: str, until: float) -> Reservation:
        self._move(job, Event.RESERVE)
        job.deliveries += 1
        job.lease_owner, job.lease_token, job.lease_until = owner, token, until
        return Reservation(job.id, job.queue, job.priority, job.deliveries, job.yields, token, owner,
                           job.max_deliveries, job.payload)

    def reserve_job(self, job_id: str, lease: float, owner: str) -> Reservation | None:
        job = self._jobs.get(job_id)
        if job is None or job.state not in JobState.READY or job.deliveries >= job.max_deliveries:
            return None
        return self._lease(job, uuid.uuid4().hex, owner, time.time() + lease)

    def has_ready(self, queues: Sequence[str], above: int | None = None) -> bool:
        return bool(self._ready(queues, above, time.time()))

    def reclaim_expired(self) -> int:
        now = time.time()
        expired = [j for j in self._jobs.values()
                   if j.state == JobState.RUNNING and j.lease_until is not None and j.lease_until < now]
        for job in expired:
            self._move(job, Event.RECLAIM)
            job.lease_owner = job.lease_token = job.lease_until = None
            job.error, job.visible_at = "lease expired", now
        self._wake_due(now)  # the same sweep wakes durable jobs due before the next one
        return len(expired)

    # -- ending or changing a delivery (fenced by the lease token) ----------------------------
    def _held(self, reservation: Reservation) -> Job | None:
        """The job, when ``reservation`` still holds it; None when this holder already ended it.

        Raises LeaseLost when the token no longer matches (reclaimed, given back, gone).
        """
        job = self._jobs.get(reservation.job_id)
        if job is None or job.lease_token != reservation.token:
            raise LeaseLost(f"job {reservation.job_id}: lease lost (token {reservation.token} no longer holds it)")
        return job if job.state == JobState.RUNNING else None

    def _move(self, job: Job, event: Event) -> None:
        job.state = transition(job.state, event)  # raises on a move the state table does not allow
        if job.state in JobState.FINAL:
            job.finished_at = time.time()  # the time it ended (a caller may give its own after)

    def _end(self, job: Job, event: Event, error: str = "", traceback: str = "", started_at: Any = None) -> None:
        """End a delivery that ran: the token stays (a repeated call by the holder is a no-op)."""
        self._move(job, event)
        self._ran(job, started_at, error, traceback, failed=event in (Event.FAIL_RETRY, Event.FAIL_FINAL))
        job.error, job.traceback = error, traceback
        job.lease_owner = job.lease_until = None

    def _ran(self, job: Job, started_at: Any, error: str = "", traceback: str = "", failed: bool = False) -> None:
        """Count an execution that started at ``started_at`` (None: now); a failed one joins the
        attempt history (``policy.attempts``: the newest kept, the rest counted)."""
        started = _moment(started_at)
        job.attempt += 1
        job.first_started_at = job.first_started_at or job.started_at or started
        job.started_at = started
        if failed:
            job.attempt_log = attempts.record(job.attempt_log, job.attempt, started.isoformat(), error, traceback)

    def _give_back(self, job: Job, delay: float) -> None:
        """An unstarted delivery goes back: not counted, the lease and its token dropped."""
        self._move(job, Event.DEFER)
        job.deliveries -= 1
        job.lease_owner = job.lease_token = job.lease_until = None
        job.visible_at = time.time() + max(delay, 0)

    def _seal(self, result: Any) -> str | None:
        """The result as stored (workers send it sealed already, ``execution.seal``)."""
        return seal_result(result, self.settings.name, self.settings.compress)

    def count_outcomes(self, counts) -> None:
        for key, (ok, failed) in counts.items():
            total = self._counts.setdefault(key, [0, 0])
            total[0] += ok
            total[1] += failed

    def time_outcomes(self, finished) -> None:
        timed = []
        for job_id, at in finished.items():
            job = self._jobs.get(job_id)
            if job is not None and job.started_at is not None and job.first_started_at is not None:
                timed.append((at, job.queue, job.func, (_moment(job.first_started_at) - _moment(job.enqueued_at))
                              .total_seconds(), (_moment(job.finished_at) - _moment(job.started_at)).total_seconds()))
        for key, sums in timings_policy.tally(timed).items():
            total = self.timings.setdefault(key, [0, 0.0, 0, 0.0])
            for i, value in enumerate(sums):
                total[i] += value

    def ack_many(self, acks: Iterable[Ack]) -> list[Reservation]:
        lost = []
        for a in acks:
            try:
                job = self._held(a.reservation)
            except LeaseLost:
                lost.append(a.reservation)
                continue
            if job is not None:
                self._end(job, Event.ACK, started_at=a.started_at)
                job.result_package, job.finished_at = self._seal(a.result), a.finished_at or job.finished_at
        return lost

    def settle(self, reservation: Reservation, *, requeue: bool = True, delay: float = 0, error: str = "",
               traceback: str = "", started_at: Any = None) -> JobState | None:
        job = self._held(reservation)
        if job is None:
            return None
        if not requeue or job.deliveries >= reservation.max_deliveries:
            reason = (error or "rejected") if not requeue else f"max deliveries exceeded: failed {job.deliveries} times"
            self.dead_letter(reservation, reason, error, traceback, started_at=started_at)
            return JobState.DEAD
        self._end(job, Event.FAIL_RETRY, error, traceback, started_at)
        job.visible_at = time.time() + max(delay, 0)
        return JobState.RETRYING

    def fail(self, reservation: Reservation, error: str, traceback: str = "", started_at: Any = None,
             finished_at: Any = None) -> bool:
        job = self._held(reservation)
        if job is None:
            return False
        self._end(job, Event.FAIL_FINAL, error, traceback, started_at)
        job.finished_at = finished_at or job.finished_at
        return True

    def defer(self, reservation: Reservation, delay: float = 0) -> bool:
        job = self._held(reservation)
        if job is None:
            return False
        self._give_back(job, delay)
        return True

    def defer_many(self, reservations: Sequence[Reservation]) -> int:
        returned = 0
        for r in reservations:
            job = self._jobs.get(r.job_id)
            if job is not None and job.lease_token == r.token and job.state == JobState.RUNNING:
                self._give_back(job, 0)
                returned += 1
        return returned

    def return_interrupted(self, reservations: Sequence[Reservation], reason: str) -> int:
        returned = [r for r in reservations if (job := self._jobs.get(r.job_id)) is not None
                    and job.lease_token == r.token and job.state == JobState.RUNNING]
        for r in returned:
            self._jobs[r.job_id].error = reason
        return self.defer_many(returned)

    def yield_reservation(self, reservation: Reservation, delay: float = 0) -> bool:
        job = self._held(reservation)
        if job is None or job.yields >= self.settings.max_yields:
            return False
        self._give_back(job, delay)
        job.yields += 1
        return True

    def report_progress(self, reservation: Reservation, report: Mapping[str, Any]) -> bool:
        try:
            job = self._held(reservation)
        except LeaseLost:
            return False
        if job is None:
            return False
        job.progress_report = dict(report)
        return True

    def extend_leases(self, owner: str, job_ids: Sequence[str], seconds: float) -> int:
        renewed = 0
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None and job.lease_owner == owner and job.state == JobState.RUNNING:
                job.lease_until = time.time() + seconds
                renewed += 1
        return renewed

    def _bury(self, job: Job, reason: str, error: str = "") -> None:
        self._move(job, Event.DEAD_LETTER)
        job.lease_owner = job.lease_until = None
        job.error = error or job.error
        self._letter_ids += 1
        self.letters.append(Letter(self._letter_ids, job.id, job.queue, reason, job.error, job.deliveries, time.time()))

    def dead_letter(self, reservation: Reservation, reason: str, error: str = "", traceback: str = "",
                    started_at: Any = None) -> bool:
        job = self._held(reservation)
        if job is None:
            return False
        if started_at is not None:  # it ran: a failed execution
            self._ran(job, started_at, error, traceback, failed=True)
        if error:
            job.traceback = traceback
        self._bury(job, reason, error)
        return True

    def dead_letter_package(self, reservation: Reservation, reason: str) -> bool:
        return self.dead_letter(reservation, reason, error=reason)

    # -- the DLQ and operator actions -----------------------------------------------------------
    def dead_letters(self, queue: str | None = None) -> list[Letter]:
        return [replace(x) for x in reversed(self.letters) if x.replayed_at is None and queue in (None, x.queue)]

    def _check_target(self, queue: str | None, priority: int | None) -> None:
        if queue is not None:
            self.settings.check_queue(queue)
        if priority is not None:
            validate_priority(priority, ConfigError)

    def _requeue(self, job: Job, queue: str | None = None, priority: int | None = None) -> bool:
        """Put a finished job that did not succeed back (REPLAY): counters reset, history kept."""
        try:
            self._move(job, Event.REPLAY)
        except InvalidTransition:
            return False
        job.deliveries = job.yields = 0
        job.visible_at = time.time()
        job.lease_owner = job.lease_token = job.lease_until = job.finished_at = None
        job.cancel_requested = False
        job.queue = queue if queue is not None else job.queue
        job.priority = priority if priority is not None else job.priority
        return True

    def _mark_replayed(self, letter: Letter) -> None:
        letter.replayed_at = time.time()
        letter.replay_count += 1

    def replay_dead(self, dead_letter_id: int, queue: str | None = None, priority: int | None = None) -> str:
        self._check_target(queue, priority)
        letter = next((x for x in self.letters if x.id == dead_letter_id), None)
        if letter is None:
            raise ConfigError(f"there is no dead letter {dead_letter_id}")
        if letter.replayed_at is not None:
            raise ConfigError(f"dead letter {dead_letter_id} was already replayed at {letter.replayed_at}")
        job = self._jobs.get(letter.job_id)
        if job is None or job.state != JobState.DEAD or not self._requeue(job, queue, priority):
            state = job.state if job is not None else "deleted"
            raise ConfigError(f"dead letter {dead_letter_id}: its job {letter.job_id} is no longer dead ({state}); "
                              "nothing replayed")
        self._mark_replayed(letter)
        return letter.job_id

    def replay_all(self, queue: str | None = None) -> int:
        replayed = 0
        for letter in [x for x in self.letters if x.replayed_at is None and queue in (None, x.queue)]:
            job = self._jobs.get(letter.job_id)
            if job is not None and job.state == JobState.DEAD and self._requeue(job):
                self._mark_replayed(letter)
                replayed += 1
        return replayed

    def purge_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        purged = [x for x in self.letters if x.replayed_at is None and queue in (None, x.queue)
                  and (ids is None or x.id in ids)]
        for letter in purged:
            job = self._jobs.get(letter.job_id)
            if job is not None and job.state == JobState.DEAD:
                del self._jobs[letter.job_id]
        self.letters = [x for x in self.letters if x not in purged]
        return len(purged)

    def cancel(self, job_ids: Sequence[str]) -> int:
        cancelled = [j for i in job_ids if (j := self._jobs.get(i)) is not None
                     and j.state in (*JobState.READY, JobState.SUSPENDED)]
        for job in cancelled:
            self._move(job, Event.CANCEL)
        return len(cancelled)

    def request_cancel(self, job_ids: Sequence[str]) -> int:
        running = [j for i in job_ids if (j := self._jobs.get(i)) is not None and j.state == JobState.RUNNING]
        for job in running:
            job.cancel_requested = True
        return len(running)

    def cancel_requested(self, job_ids: Sequence[str]) -> list[str]:
        return [i for i in job_ids if (j := self._jobs.get(i)) is not None and j.state == JobState.RUNNING
                and j.cancel_requested]

    def end_cancelled(self, reservation: Reservation, error: str, traceback: str = "", started_at: Any = None,
                      finished_at: Any = None) -> bool:
        job = self._held(reservation)
        if job is None:
            return False
        if started_at is not None:
            self._end(job, Event.CANCEL_RUNNING, error, traceback, started_at)
        else:
            self._move(job, Event.CANCEL_RUNNING)
            job.lease_owner = job.lease_until = None
            job.error = error
        job.finished_at = finished_at or job.finished_at
        return True

    def retry_jobs(self, job_ids: Sequence[str], queue: str | None = None, priority: int | None = None) -> int:
        self._check_target(queue, priority)
        retried = 0
        now = time.time()
        for job in [j for i in dict.fromkeys(job_ids) if (j := self._jobs.get(i)) is not None]:
            was = job.state
            expires_at = job.expires_at
            if job.expires_at is not None and job.expires_at <= now:
                job.expires_at = None  # an expiry already past is cleared
            if not self._requeue(job, queue, priority):
                job.expires_at = expires_at
                continue
            retried += 1
            if was == JobState.DEAD:
                for letter in self.letters:
                    if letter.job_id == job.id and letter.replayed_at is None:
                        self._mark_replayed(letter)
        return retried

    def forget_group(self, group: str, delete: bool = False) -> int:
        raise _unused("forget_group")

    # -- the cluster's upkeep -------------------------------------------------------------------
    def prune(self, keep: int, batch: int = 1000) -> int:
        if keep <= 0:
            return 0
        done = sorted((j for j in self._jobs.values() if j.state == JobState.SUCCEEDED),
                      key=lambda j: _epoch(j.finished_at), reverse=True)
        surplus = done[keep:][::-1][:batch]  # the oldest first
        for job in surplus:
            del self._jobs[job.id]
        self.letters = [letter for letter in self.letters if letter.job_id in self._jobs]
        return len(surplus)

    def prune_keys(self, batch: int = 1000) -> int:
        now = time.time()
        expired = [k for k, (_, until) in self._keys.items() if until < now][:batch]
        for key in expired:
            del self._keys[key]
        ended = [k for k, (job_id, _) in self._unique.items()
                 if job_id not in self._jobs or self._jobs[job_id].state in JobState.FINAL][:batch]
        for key in ended:
            del self._unique[key]
        return len(expired) + len(ended)

    def paused_queues(self) -> frozenset[str]:
        return frozenset(self.paused)

    def pause_queue(self, queue: str, by: str = "") -> bool:
        new = queue not in self.paused
        self.paused.add(queue)
        return new

    def resume_queue(self, queue: str) -> bool:
        was = queue in self.paused
        self.paused.discard(queue)
        return was

    def delete_finished(self, state: str, before: float, batch: int = 500) -> int:
        old = sorted((j for j in self._jobs.values() if j.state == state and _epoch(j.finished_at) < before),
                     key=lambda j: _epoch(j.finished_at))[:batch]
        for job in old:
            del self._jobs[job.id]
        self.letters = [letter for letter in self.letters if letter.job_id in self._jobs]
        return len(old)

    def count_finished(self, state: str, before: float) -> int:
        return sum(1 for j in self._jobs.values() if j.state == state and _epoch(j.finished_at) < before)

    def hold_chore(self, name: str, owner: str, seconds: float) -> bool:
        holder, until = self._chores.get(name, (owner, 0.0))
        if holder != owner and until >= time.time():
            return False
        self._chores[name] = (owner, time.time() + seconds)
        return True

    def chore_done(self, name: str, deleted: int) -> None:
        self.chore_deleted[name] = self.chore_deleted.get(name, 0) + deleted

    def analyze(self) -> None:
        return None

    def unfinished(self, queues: Sequence[str]) -> bool:
        now = time.time()
        return any(j.queue in queues and (j.state in (JobState.RUNNING, JobState.RETRYING)
                                          or (j.state == JobState.QUEUED and j.visible_at <= now))
                   for j in self._jobs.values())

    def publish_heartbeat(self, cluster_id: str, **fields: Any) -> None:
        self.heartbeats[cluster_id] = {**self.heartbeats.get(cluster_id, {}), **fields, "beat_at": time.time()}

    def silent_clusters(self, host: str | None, longer_than: float, shorter_than: float) -> list[tuple[str, int]]:
        now = time.time()
        return [(cid, row["pid"]) for cid, row in self.heartbeats.items()
                if host in (None, row.get("host")) and row.get("state") != "stopped"
                and now - shorter_than < row["beat_at"] < now - longer_than]

    def expire_leases(self, owners: Sequence[str]) -> int:
        now = time.time()
        expired = 0
        for job in self._jobs.values():
            if job.state == JobState.RUNNING and job.lease_owner in owners and (job.lease_until or 0) > now:
                job.lease_until = now
                expired += 1
        return expired

    def now(self) -> float:
        return time.time()  # one process: its host's clock

    def clock_skew(self) -> None:
        return None

    def jobs(self, job_ids: Sequence[str]) -> dict[str, Any]:
        return {i: replace(self._jobs[i]) for i in job_ids if i in self._jobs}

    def stats(self) -> list[dict[str, Any]]:
        now = time.time()
        rows: dict[tuple[str, int], dict[str, Any]] = {}
        for job in self._jobs.values():
            if job.state in JobState.READY:
                column = "ready" if job.visible_at <= now else "delayed"
            elif job.state in (JobState.RUNNING, JobState.DEAD):
                column = "reserved" if job.state == JobState.RUNNING else "dead"
            else:
                continue
            row = rows.setdefault((job.queue, job.priority), {"queue": job.queue, "priority": job.priority,
                                                              "ready": 0, "delayed": 0, "reserved": 0, "dead": 0})
            row[column] += 1
        return sorted(rows.values(), key=lambda r: (r["queue"], -r["priority"]))

    # -- durable tasks (brokers/orm/durable.py on the job's own lists) ---------------------------
    WAKE_AHEAD = 3.0  # as brokers/orm/durable.py: the sweep makes jobs due this soon claimable
    NEVER_WAKES = 253402300799.0  # models.NEVER_WAKES: a wait without a timeout

    def _holding(self, reservation: Reservation) -> Job:
        """The job ``reservation`` holds running, else LeaseLost (a durable run's writes are fenced)."""
        job = self._jobs.get(reservation.job_id)
        if job is None or job.lease_token != reservation.token or job.state != JobState.RUNNING:
            raise LeaseLost(f"job {reservation.job_id}: lease lost (token {reservation.token} no longer holds it)")
        return job

    def steps(self, job_id: str) -> list[StepRecord]:
        job = self._jobs.get(job_id)
        return [] if job is None else list(job.steps)

    def save_step(self, reservation: Reservation, record: StepRecord) -> None:
        job = self._holding(reservation)
        if any(r.name == record.name for r in job.steps):  # the ORM's unique constraint
            raise ValueError(f"job {job.id} has a step {record.name!r} already")
        job.steps = (*job.steps, record)

    def finish_step(self, reservation: Reservation, name: str, result: str | None = None) -> None:
        job = self._holding(reservation)
        job.steps = tuple(r._replace(done=True, result=result) if r.name == name and not r.done else r
                          for r in job.steps)

    def take_signal(self, reservation: Reservation, name: str, signal: str) -> tuple[bool, str | None]:
        job = self._holding(reservation)
        index = next((i for i, s in enumerate(job.signals) if s[0] == signal and not s[2]), None)
        if index is None:
            return False, None
        payload = job.signals[index][1]
        job.signals = (*job.signals[:index], (signal, payload, True), *job.signals[index + 1:])
        if any(r.name == name for r in job.steps):
            job.steps = tuple(r._replace(done=True, result=payload) if r.name == name else r for r in job.steps)
        else:  # the signal came before the task reached its wait
            job.steps = (*job.steps, StepRecord(name, "wait", result=payload, signal=signal))
        return True, payload

    def suspend(self, reservation: Reservation, wake_at: float | None, signal: str = "") -> JobState | None:
        try:
            job = self._holding(reservation)
        except LeaseLost:
            return None
        if job.cancel_requested:
            ended = self.end_cancelled(reservation, "JobCancelled: cancelled while it slept or waited")
            return JobState.CANCELLED if ended else None
        wake = self.NEVER_WAKES if wake_at is None else float(wake_at)
        now = time.time()
        if signal and any(s[0] == signal and not s[2] for s in job.signals):
            self._give_back(job, 0)  # its signal came while it ran: visible now
        elif wake <= now + self.WAKE_AHEAD:
            self._give_back(job, wake - now)  # wakes before the sweep would wake it: QUEUED for later
        else:
            self._move(job, Event.SUSPEND)
            job.deliveries -= 1  # a sleep is neither a delivery nor an execution
            job.lease_owner = job.lease_token = job.lease_until = None
            job.visible_at = wake
        return job.state

    def send_signal(self, job_id: str, signal: str, payload: str | None) -> bool:
        job = self._jobs.get(job_id)
        if job is None:
            raise ConfigError(f"send_signal(): there is no job {job_id!r}")
        if job.state in JobState.FINAL:
            raise ConfigError(f"send_signal(): job {job_id} has ended ({job.state}); nothing can wait for {signal!r}")
        job.signals = (*job.signals, (signal, payload, False))
        waits = any(r.kind == "wait" and r.signal == signal and not r.done for r in job.steps)
        if job.state != JobState.SUSPENDED or not waits:
            return False
        self._move(job, Event.WAKE)
        job.visible_at = time.time()
        return True

    def suspended(self) -> dict[str, int]:
        counts = {"sleep": 0, "wait": 0}
        for job in self._jobs.values():
            if job.state == JobState.SUSPENDED:
                for record in job.steps:
                    if not record.done and record.kind in counts:
                        counts[record.kind] += 1
        return counts

    def _wake_due(self, now: float) -> None:
        for job in self._jobs.values():
            if job.state == JobState.SUSPENDED and job.visible_at <= now + self.WAKE_AHEAD:
                self._move(job, Event.WAKE)  # visible from its wake time
