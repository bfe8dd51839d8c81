"""A test clock for durable tasks: sleeps and wait timeouts that a test moves past by hand.

    with frozen_clock() as clock:
        job_id = fulfil.delay(42)     # sync mode or drain(): runs up to its sleep, and stops there
        drain()                       # nothing: the sleep is not over
        clock.advance(3600)
        drain()                       # the sleep is over: runs on to its wait for "approved"
        send_signal(job_id, "approved", {"by": "ann"})
        drain()                       # (in sync mode send_signal ran it already)

Without a test clock, jobs run in the test process skip their sleeps, and a wait's timeout never
fires. Under one, the sleeps and waits of jobs run in the test process (``TASKMQ['sync']``,
:func:`~django_taskmq.testing.drain`, ``run_sync``) are counted by the clock, which stands still
until :meth:`TestClock.advance` moves it; :func:`~django_taskmq.testing.drain` first makes the jobs
whose sleep or wait timeout the clock has passed ready. Only durable tasks' sleeps and waits read
this clock: ``timezone.now()``, a job's ``delay``/``eta`` and retries' backoff keep the real time.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator

from ..exceptions import ConfigError

# durable_context is imported where it is used: pytest loads this package (its plugin) before
# Django is set up.

__all__ = ["TestClock", "frozen_clock", "wake_due"]


class TestClock:
    """The clock of a :func:`frozen_clock` block: it moves only when told."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, start: float) -> None:
        self._now = start

    def now(self) -> float:
        """The clock's time, in epoch seconds."""
        return self._now

    @property
    def utc(self) -> datetime.datetime:
        """The clock's time as an aware datetime (UTC)."""
        return datetime.datetime.fromtimestamp(self._now, tz=datetime.timezone.utc)

    def advance(self, by: float | datetime.timedelta) -> float:
        """Move the clock ``by`` seconds (or a ``timedelta``) ahead; return its new time. Jobs whose
        sleep or wait timeout it passes run at the next :func:`~django_taskmq.testing.drain`."""
        from ..runtime.durable_context import seconds_of

        seconds = seconds_of(by, "clock.advance()")
        self._now += seconds
        return self._now


@contextlib.contextmanager
def frozen_clock(start: datetime.datetime | None = None) -> Iterator[TestClock]:
    """Count durable sleeps and waits of jobs run in the test process by a :class:`TestClock` for
    the block, which starts at ``start`` (an aware datetime; default: the database's time now)."""
    from ..runtime import durable_context
    from ..brokers import get_broker

    if start is not None and (not isinstance(start, datetime.datetime) or start.tzinfo is None):
        raise ConfigError(f"frozen_clock() takes an aware datetime, got {start!r}")
    if durable_context.test_clock is not None:
        raise ConfigError("frozen_clock() blocks do not nest: advance the clock you have")
    clock = TestClock(get_broker().now() if start is None else start.timestamp())
    durable_context.test_clock = clock.now
    try:
        yield clock
    finally:
        durable_context.test_clock = None


def wake_due() -> list[str]:
    """Make the jobs whose sleep, or wait with a timeout, the active test clock has passed ready now;
    return their ids (none without a test clock). :func:`~django_taskmq.testing.drain` calls it."""
    from ..runtime import durable_context

    clock = durable_context.test_clock
    if clock is None:
        return []
    from ..brokers import get_broker

    return get_broker().wake_by_test_clock(clock())
