"""Job ids: 24 hex characters that sort by creation time (microseconds + randomness); cluster ids:
bounded labels unique to one sentinel process."""

from __future__ import annotations

import hashlib
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


#: The length of a cluster's id (``Cluster.id``, ``Job.lease_owner``).
CLUSTER_ID_LENGTH = 64
# The parts of a cluster's id that can be long are cut to these (with a hash of the whole kept),
# so the pid (at most 10 digits) and the random part always fit whole: two sentinels never share an id.
NAME_PART = 23
HOST_PART = 20
RANDOM_PART = 8


def _bounded(text: str, limit: int) -> str:
    """``text`` itself when it fits in ``limit`` characters, else its head and a hash of all of it
    (two long names that share their head still differ)."""
    if len(text) <= limit:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{text[:limit - len(digest) - 1]}~{digest}"


def cluster_id(name: str, host: str, pid: int) -> str:
    """Return a new id for the sentinel ``pid`` of the cluster ``name`` on ``host``: at most
    :data:`CLUSTER_ID_LENGTH` characters whatever their lengths, and unique to this process (its
    pid and a random part are never cut). A label for people, never parsed: the name and the host
    are stored beside it."""
    return f"{_bounded(name, NAME_PART)}:{_bounded(host, HOST_PART)}:{pid}:{os.urandom(RANDOM_PART // 2).hex()}"
