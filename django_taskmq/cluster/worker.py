"""A worker process: run one task at a time, fed by the sentinel through the worker's own pipe.

Each worker has a private pipe, so a worker killed at any instant (SIGKILL included) can only
break its own pipe, never a lock another process needs; the sentinel replaces it.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import time
from multiprocessing.connection import Connection

from .. import execution as ex
from ..conf import Settings
from .messages import STOP, load_task, outcome_frame

logger = logging.getLogger(__name__)


def run(index: int, conn: Connection, timers, settings: Settings) -> None:
    """Serve tasks from ``conn`` until the poison pill (:data:`STOP`) arrives or the pipe closes.

    Tasks arrive as pickled :class:`~django_taskmq.execution.TaskMessage` bytes; outcomes leave
    as outcome frames (:func:`~.messages.outcome_frame`), the result already signed for storage
    (signing here spreads that cost over the workers).

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
        outcome = ex.execute(load_task(blob))
        timers[index] = 0.0
        conn.send_bytes(outcome_frame(ex.seal(outcome, settings)))
        if settings.max_rss and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > settings.max_rss:
            logger.info("worker %s (pid %s) above max_rss, recycling", index, os.getpid())
            return
