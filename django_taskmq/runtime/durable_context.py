"""The context a durable task runs with: ``ctx.step``, ``ctx.sleep``, ``ctx.sleep_until`` and
``ctx.wait_for`` (see ``docs/durable.rst``).

A durable task runs from its start every time its job runs (after a crash, a retry, a sleep or a
wait). What an earlier run did is read once when the run starts (``Broker.steps``): a step it
finished returns its stored result without running, a sleep that is over and a wait that got its
signal return at once. What is new is written at once by this run, fenced by its lease token, so
that a crash a moment later loses none of it. A sleep or a wait that is not over ends the run with
:class:`Suspended`, which the execution turns into the ``suspend`` outcome: the job is given back
until it wakes.
"""

from __future__ import annotations

import datetime
import hashlib
import pickle
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..brokers import get_broker
from ..brokers.base import Broker, Reservation, StepRecord
from ..conf import get_settings
from ..exceptions import ConfigError, Reject
from ..envelope import seal_result, verify_result

STEP, SLEEP, WAIT = "step", "sleep", "wait"  # models.StepKind's values (the models need Django's registry)
MAX_NAME = 200
MAX_SIGNAL = 100
#: Names of sleeps and waits are made by the context and start with this; a step's may not.
AUTO = "#"
#: The clock of ``django_taskmq.testing.frozen_clock`` while one is active (epoch seconds): jobs run
#: in the test process (sync mode, ``drain()``) then count their sleeps and waits by it instead of
#: skipping their sleeps. Set only by that module.
test_clock: Callable[[], float] | None = None


class Suspended(BaseException):
    """Raised by a sleep or a wait that is not over, to end the run (a BaseException: a task's
    ``except Exception`` does not catch it). ``wake_at``: the broker's epoch it wakes at (None:
    only its signal wakes it); ``signal``: the signal it waits for ("" for a sleep)."""

    def __init__(self, wake_at: float | None, signal: str = "") -> None:
        super().__init__(f"suspended until {wake_at}" + (f" or the signal {signal!r}" if signal else ""))
        self.wake_at = wake_at
        self.signal = signal


class StepMismatch(Reject):
    """A durable task reached a step, sleep or wait that an earlier run of its job recorded
    differently (other arguments, another kind): its code changed under a running job. The job is
    dead-lettered with this reason; it is never run on with results that do not fit."""


def seconds_of(value: Any, what: str) -> float:
    """``value`` (seconds, or a ``timedelta``) as seconds; ConfigError unless it is a number >= 0."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{what} takes seconds (a number >= 0) or a timedelta, got {value!r}")
    return float(value)


def digest(args: tuple, kwargs: dict) -> str:
    """The SHA-256 of a step's arguments, to tell a step reached again with other arguments."""
    try:
        data = pickle.dumps((args, sorted(kwargs.items())), protocol=5)
    except Exception as exc:  # pickle raises many types
        raise ConfigError(f"a step's arguments must pickle (they identify the step): {exc}") from None
    return hashlib.sha256(data).hexdigest()


class DurableContext:
    """The first argument of a durable task (``@durable``)."""

    def __init__(self, reservation: Reservation, broker: Broker | None = None, encrypt: bool = False) -> None:
        self.job_id = reservation.job_id
        self._encrypt = encrypt  # the job's arguments are encrypted (its ``encrypt`` option): so are its steps' values
        self._reservation = reservation
        self._broker = broker or get_broker()
        self._settings = get_settings()
        # Sync mode runs the job inline, once: its sleeps are skipped, unless a test clock counts them.
        self._clock = test_clock if reservation.owner == "sync" else None
        self.sync = reservation.owner == "sync" and self._clock is None
        self._records = {r.name: r for r in self._broker.steps(self.job_id)}
        self._calls: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"<DurableContext job={self.job_id} steps={len(self._records)}>"

    # -- steps ----------------------------------------------------------------------------------
    def step(self, name: str, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``func(*args, **kwargs)`` once for this job and return its value; a later run of the
        job gets the stored value back without running it.

        ``name`` identifies the step within the job; reached again with other arguments it raises
        :class:`StepMismatch`. The value is pickled and signed like a result (at most
        ``TASKMQ['max_result_size']``). A step that raises fails this run: the task's retry policy
        decides, and the next run starts again from the first step not stored.
        """
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or name.startswith(AUTO):
            raise ConfigError(f"a step's name is a string of 1 to {MAX_NAME} characters not starting with "
                              f"{AUTO!r}, got {name!r}")
        if not callable(func):
            raise ConfigError(f"step {name!r}: {func!r} is not callable")
        signature = digest(args, kwargs)
        record = self._records.get(name)
        if record is not None:
            if record.kind != STEP or record.digest != signature:
                raise StepMismatch(f"step {name!r} of job {self.job_id} was run with other arguments "
                                   f"(or was not a step) by an earlier run: the task's code changed under it")
            return self._value(record.result)
        value = func(*args, **kwargs)
        try:
            package = seal_result(value, self._settings.name, self._settings.compress, self._settings.max_result_size,
                                  self._encrypt)
        except ValueError as exc:  # running it again would return it again
            raise Reject(f"step {name!r}: its {exc}") from None
        record = StepRecord(name, STEP, signature, package)
        self._broker.save_step(self._reservation, record)
        self._records[name] = record
        return value

    # -- sleeps ---------------------------------------------------------------------------------
    def sleep(self, duration: float | datetime.timedelta) -> None:
        """Give the worker back for ``duration`` (seconds or a ``timedelta``), counted by the
        broker's clock from the first time the run got here; the job runs again then."""
        seconds = seconds_of(duration, "ctx.sleep()")
        self._sleep(lambda: self._now() + seconds)

    def sleep_until(self, when: datetime.datetime) -> None:
        """Give the worker back until ``when`` (an aware datetime) by the broker's clock."""
        if not isinstance(when, datetime.datetime) or when.tzinfo is None:
            raise ConfigError(f"ctx.sleep_until() takes an aware datetime, got {when!r}")
        self._sleep(when.timestamp)

    def _sleep(self, wake_at: Callable[[], float]) -> None:
        name = self._auto(SLEEP)
        if self.sync:
            return
        record = self._records.get(name)
        if record is None:
            record = StepRecord(name, SLEEP, wake_at=wake_at(), done=False)
            self._broker.save_step(self._reservation, record)
            self._records[name] = record
            raise Suspended(record.wake_at)
        self._expect(record, SLEEP)
        if record.done:
            return
        if record.wake_at is None or self._now() >= record.wake_at:
            self._finish(record)
            return
        raise Suspended(record.wake_at)  # run early (a retry after a later failure): not over yet

    # -- signals --------------------------------------------------------------------------------
    def wait_for(self, signal: str, timeout: float | datetime.timedelta | None = None) -> Any:
        """Give the worker back until ``django_taskmq.send_signal(job_id, signal, payload)``, and
        return the payload; a signal sent before is taken at once. After ``timeout`` (seconds or a
        ``timedelta``; None: no limit) without the signal, return None."""
        if not isinstance(signal, str) or not signal or len(signal) > MAX_SIGNAL:
            raise ConfigError(f"a signal's name is a string of 1 to {MAX_SIGNAL} characters, got {signal!r}")
        limit = None if timeout is None else seconds_of(timeout, "ctx.wait_for(timeout=...)")
        name = self._auto(f"{WAIT}:{signal}")
        record = self._records.get(name)
        if record is not None:
            self._expect(record, WAIT)
            if record.done:
                return self._value(record.result)
        found, payload = self._broker.take_signal(self._reservation, name, signal)
        if found:
            self._records[name] = StepRecord(name, WAIT, result=payload, signal=signal)
            return self._value(payload)
        if record is None:
            deadline = None if limit is None else self._now() + limit
            record = StepRecord(name, WAIT, wake_at=deadline, signal=signal, done=False)
            self._broker.save_step(self._reservation, record)
            self._records[name] = record
            raise Suspended(deadline, signal)
        if record.wake_at is not None and self._now() >= record.wake_at:
            self._finish(record)  # timed out
            return None
        raise Suspended(record.wake_at, signal)

    # -- helpers --------------------------------------------------------------------------------
    def _auto(self, kind: str) -> str:
        """The name of this run's next sleep or wait of ``kind``: ``#sleep:1``, ``#wait:approved:2``."""
        self._calls[kind] += 1
        return f"{AUTO}{kind}:{self._calls[kind]}"

    def _expect(self, record: StepRecord, kind: str) -> None:
        if record.kind != kind:
            raise StepMismatch(f"{record.name} of job {self.job_id} was a {record.kind} in an earlier run, now a "
                               f"{kind}: the task's code changed under it")

    def _finish(self, record: StepRecord) -> None:
        self._broker.finish_step(self._reservation, record.name)
        self._records[record.name] = record._replace(done=True)

    def _now(self) -> float:
        """The broker's clock (epoch seconds), or the test clock of a job run in the test process."""
        return self._clock() if self._clock is not None else self._broker.now()

    def _value(self, package: str | None) -> Any:
        return None if package is None else verify_result(package, self._settings.name)
