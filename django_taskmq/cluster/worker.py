"""A worker process: run one task at a time, fed by the sentinel through the worker's own pipe.

Each worker has a private pipe, so a worker killed at any instant (SIGKILL included) can only
break its own pipe, never a lock another process needs; the sentinel replaces it.
"""

from __future__ import annotations

import logging
import os
import pickle
import resource
import signal
import time
from multiprocessing.connection import Connection

from .. import execution as ex
from ..conf import Settings

logger = logging.getLogger(__name__)

STOP = b"stop"  # the poison pill: never a pickle, which starts with b"\x80"


def run(index: int, conn: Connection, timers, settings: Settings) -> None:
    """Serve tasks from ``conn`` until the poison pill (:data:`STOP`) arrives or the pipe closes.

    Tasks arrive as pickled :class:`~django_taskmq.execution.TaskMessage` bytes; outcomes leave
    as a status byte and the pickled :class:`~django_taskmq.execution.Outcome`, its result
    already signed for storage (signing here spreads that cost over the workers).

    ``timers[index]`` holds the monotonic start time of the running task (0 when idle): the
    sentinel reads it to enforce timeouts.
    """
    # The sentinel decides when workers stop: ignore Ctrl-C and a SIGTERM sent to the whole
    # process group (a terminal, systemd), so a running task can finish during a graceful stop.
    # A hard stop or a timeout uses SIGKILL.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ..signals import post_spawn

    post_spawn.send(sender=run, proc_name=f"worker-{index}")
    while True:
        try:
            blob = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if blob == STOP:
            return
        timers[index] = time.monotonic()
        outcome = ex.execute(pickle.loads(blob))
        timers[index] = 0.0
        outcome = ex.seal(outcome, settings)
        try:
            data = pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # the envelope no longer pickles (its arguments changed while running)
            outcome = outcome._replace(envelope=None, status=ex.UNSTORABLE, result=None,
                                       error=f"outcome cannot be pickled: {ex.describe(exc)}", traceback="")
            data = pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
        # One status byte in front lets the sentinel count outcomes without unpickling them.
        conn.send_bytes((b"S" if outcome.status == ex.SUCCESS else b"F") + data)
        if settings.max_rss and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > settings.max_rss:
            logger.info("worker %s (pid %s) above max_rss, recycling", index, os.getpid())
            return
