"""The scheduler process: a child of the sentinel that ticks the scheduler every
``scheduler_interval`` seconds and, every :data:`ANALYZE_EVERY` seconds from start, refreshes the
planner's statistics of the job table (``ANALYZE``) when they are stale, on its own connection.

A process, not a thread of the sentinel: a tick imports and runs user code (the schedules'
functions, hooks), which may take long (a module that takes seconds to import) or hang, and an
import running in a thread when the sentinel forks a worker leaves that module's import lock held
for ever in the worker (a worker that imported the same module would wait for ever). Apart, a
slow tick delays nothing but the next tick; the sentinel replaces a dead scheduler process like its
other children. It needs nothing of the sentinel's state, so nothing passes between them but
SIGTERM (finish the tick under way, then exit).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

from ..brokers.base import Broker
from ..conf import Settings
from . import outage
from .poller import pause

logger = logging.getLogger(__name__)

# Seconds between two looks at whether the job table's statistics are stale (PostgreSQL; an ANALYZE
# only when they are, and a VACUUM past its dead rows' threshold where autovacuum is off:
# broker.analyze). Often, whatever the server's autovacuum does: the claims'
# generic plans are made once per connection and kept until an ANALYZE, and plans made on an
# empty table and kept while it filled took the enqueue -> start p50 from 5 to 80 ms in 150 s with
# autovacuum off (benchmarks/drift.py, docs/decisions.rst). The look is one read of
# pg_stat_user_tables.
ANALYZE_EVERY = 10.0
# The chores wait this long after start-up: the first turns of a new cluster hand out the work
# that was waiting for it, and a tick or an ANALYZE (with the imports they need) would compete.
FIRST_CHORES_AFTER = 0.25  # (the same wait as the sentinel's first heartbeat)
NAP = 0.2  # seconds between two looks at the clock and at the stop flag


def run(settings: Settings) -> None:
    """Tick and analyze on timers until SIGTERM (SIGINT is the sentinel's to handle)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    from .. import scheduler
    from ..brokers import get_broker
    from ..signals import post_spawn

    outage.bound_statements(settings)
    broker = get_broker()  # this process's own
    post_spawn.send(sender=run, proc_name="scheduler")
    failures = outage.FailureLog("scheduler", logger)
    next_tick = next_analyze = time.monotonic() + FIRST_CHORES_AFTER
    while not stopping:
        now = time.monotonic()
        if now >= next_tick:
            next_tick = now + settings.scheduler_interval
            _attempt("tick", lambda: scheduler.tick(settings, broker=broker), failures, broker)
        if now >= next_analyze and not stopping:
            next_analyze = now + ANALYZE_EVERY
            # A no-op on some engines: its success says nothing about the database.
            _attempt("ANALYZE", broker.analyze, failures, broker, proof=False)
        pause(min(NAP, next_tick - time.monotonic(), next_analyze - time.monotonic()))
    broker.close()


def _attempt(what: str, operation: Callable[[], object], failures: outage.FailureLog, broker: Broker,
             proof: bool = True) -> None:
    """Run one database operation; on failure log it (rate-limited) and reconnect next time.
    ``proof``: whether its success shows the database is there (it ran a statement)."""
    try:
        operation()
    except Exception as exc:  # the database may be restarting: reconnect next time
        failures.failed(what, exc)
        broker.close()
        return
    if proof:
        failures.succeeded()
