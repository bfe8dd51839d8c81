"""Job ids: 24 hex characters that sort by creation time (microseconds + randomness)."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last = 0


def new_id() -> str:
    """Return a new job id; ids made by one process are strictly increasing."""
    global _last
    with _lock:
        now = time.time_ns() // 1000
        if now <= _last:
            now = _last + 1
        _last = now
    return f"{now:014x}{os.urandom(5).hex()}"
