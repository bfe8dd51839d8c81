"""Health of the clusters of one host, for probes: ``manage.py qhealth`` and ``qcluster --health-port``.

A cluster is healthy when the database answers and its heartbeat is fresh: the sentinel writes it
every two seconds through the same database as its claims, so a fresh heartbeat says that the
cluster's processes run *and* that it reaches the database. :data:`FRESH_WITHIN` allows for a few
missed beats (a slow commit, a database restart) before a probe fails.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass

from ..conf import get_settings
from ..brokers.problems import explain
from ..models import Cluster
from .statistics import database_now

#: A heartbeat older than this (seconds) means the cluster is stuck or cannot reach the database.
FRESH_WITHIN = 10.0
#: The states in which a cluster serves (``starting`` and ``stopping`` do not take new work).
SERVING = ("running",)


@dataclass(frozen=True)
class Health:
    """A probe's answer: ``ok`` and one line saying why."""

    ok: bool
    reason: str


def check(*, name: str | None = None, host: str | None = None, pid: int | None = None,
          alias: str | None = None, now: datetime.datetime | None = None) -> Health:
    """Return the health of the freshest cluster of ``host`` (default: this machine), narrowed to the
    cluster label ``name`` and the sentinel ``pid`` when given. Never raises for a database error."""
    alias = alias or get_settings().database
    host = host or socket.gethostname()
    which = f"cluster {name!r} on {host}" if name else f"cluster on {host}"
    try:
        rows = Cluster.objects.using(alias).filter(host=host).exclude(state="stopped")
        if name:
            rows = rows.filter(name=name)
        if pid is not None:
            rows = rows.filter(pid=pid)
        row = rows.order_by("-beat_at").first()
        now = now or database_now(alias)  # beats are in the database's time
    except Exception as exc:  # any database error is the answer, not a crash of the probe
        # Which one: the database does not answer, or it does and a table or a migration is missing.
        return Health(False, explain(alias, exc))
    if row is None:
        return Health(False, f"no {which} has a heartbeat (not started, or stopped)")
    age = (now - row.beat_at).total_seconds()
    label = f"cluster {row.name!r} ({row.host}, pid {row.pid})"
    if host == socket.gethostname() and not _running(row.pid):
        return Health(False, f"{label} is gone: its sentinel process no longer runs")
    if age > FRESH_WITHIN:
        return Health(False, f"{label} last beat {age:.0f} s ago (more than {FRESH_WITHIN:.0f} s): it is stuck "
                             f"or cannot reach the database")
    if row.state not in SERVING:
        return Health(False, f"{label} is {row.state}")
    return Health(True, f"{label} is running: last heartbeat {max(age, 0):.1f} s ago, {row.workers} workers")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
