"""The harness's job: sleep ``JOB_WORK_MS``, then tell the adapter it ran.

The claim latency (enqueue to start) is taken here, at the start, from the enqueue time the
producer put in the arguments; a datagram to the adapter's socket (``HARNESS_REPORT_SOCKET``)
carries it and counts the completion once the work is done, as the harness's other adapters
count theirs in their handlers.
"""

from __future__ import annotations

import os
import socket
import time

_WORK_S = int(os.environ.get("JOB_WORK_MS", "1")) / 1000.0
_sock: socket.socket | None = None
_sock_pid: int | None = None


def bench_job(seq: int, created_at: float, padding: str = "") -> None:
    latency_ms = max(0.0, (time.time() - created_at) * 1000.0)
    if _WORK_S:
        time.sleep(_WORK_S)
    _report(f"{seq} {latency_ms:.3f}")


def _report(message: str) -> None:
    global _sock, _sock_pid
    path = os.environ.get("HARNESS_REPORT_SOCKET")
    if not path:
        return
    if _sock_pid != os.getpid():  # one socket per process, reopened after a fork
        _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _sock_pid = os.getpid()
    try:
        _sock.sendto(message.encode(), path)
    except OSError:
        pass  # the adapter is gone (killed by the harness): nobody counts this run
