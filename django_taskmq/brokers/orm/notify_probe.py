"""Whether ``LISTEN`` works on a PostgreSQL connection: one ``NOTIFY`` sent to it, awaited a bounded time.

A pooler in transaction mode runs a client's ``LISTEN`` on whichever server connection is free and
gives that connection back to the pool; a notification later goes to that server connection, idle
or serving another client, never to the listener, and nothing says so. Behind a pooler in session
mode, or directly, it arrives within milliseconds.

The notification is sent from a second connection: a listener's own ``NOTIFY`` would run on the
server connection a pooler just gave it back (PgBouncer takes the last one freed), where the
notification comes straight back in the same response and the probe would pass falsely. It is sent
through the broker's alias, so a listener on another alias (``TASKMQ['listen_database']``) passes
only if it reaches the database where the broker's triggers notify.
"""

from __future__ import annotations

import select
import time
import uuid
from multiprocessing.connection import Connection

from django.db import connections

PROBE_WAIT = 2.0  # seconds a notification may take; a direct one takes milliseconds


def probe(listener, sender_alias: str, wait: float = PROBE_WAIT, pipe: Connection | None = None) -> bool | None:
    """Return True when a ``NOTIFY`` sent through a new connection to ``sender_alias`` reaches
    ``LISTEN`` on ``listener`` (a Django PostgreSQL connection in autocommit, psycopg 3) within
    ``wait`` seconds; False when it does not; None when ``pipe`` became readable first (nothing
    found out: the caller has something else to do). Database errors propagate.
    """
    channel = f"taskmq_probe_{uuid.uuid4().hex}"
    listener.ensure_connection()
    raw = listener.connection
    with listener.cursor() as cursor:
        cursor.execute(f"LISTEN {channel}")
    try:
        sender = connections.create_connection(sender_alias)
        try:
            with sender.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, '')", [channel])
        finally:
            sender.close()
        deadline = time.monotonic() + wait
        readers = [raw.fileno()] + ([pipe.fileno()] if pipe is not None else [])
        while (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(readers, [], [], remaining)
            if not ready:
                break
            if raw.fileno() not in ready:
                return None
            raw.pgconn.consume_input()
            while (notification := raw.pgconn.notifies()) is not None:
                if notification.relname.decode() == channel:
                    return True
        return False
    finally:
        # Through a pooler in transaction mode this lands anywhere; a LISTEN left on a channel that
        # nothing else notifies costs nothing, and goes with its server connection.
        with listener.cursor() as cursor:
            cursor.execute(f"UNLISTEN {channel}")
