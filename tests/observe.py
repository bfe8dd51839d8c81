"""Observability of test processes, switched on by the environment (read by ``tests.settings_sqlite``):

* ``TASKMQ_TEST_SENTRY_FILE``: ``sentry_sdk.init`` with a transport that appends each event to that
  file as one JSON line (no network; the DSN names no real host);
* reporters for ``TASKMQ['error_reporter']`` that log to the run log and then raise or hang.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

SENTRY_FILE = "TASKMQ_TEST_SENTRY_FILE"


def configure(settings: dict[str, Any]) -> None:
    """Set up what the environment asks for, from a settings module's globals."""
    if os.environ.get(SENTRY_FILE):
        init_sentry(os.environ[SENTRY_FILE])


def init_sentry(path: str) -> None:
    import sentry_sdk
    from sentry_sdk.transport import Transport

    class FileTransport(Transport):
        """Append each event of an envelope to ``path`` as a JSON line (one write per line)."""

        def capture_envelope(self, envelope: Any) -> None:
            for item in envelope.items:
                event = item.get_event()
                if event is not None:
                    line = json.dumps(event, default=str) + "\n"
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        os.write(fd, line.encode())
                    finally:
                        os.close(fd)

    sentry_sdk.init(dsn="http://public@sentry.invalid/1", transport=FileTransport, default_integrations=True,
                    include_local_variables=True)


def read_events(path: str) -> list[dict[str, Any]]:
    """The events :func:`init_sentry`'s transport wrote, in order."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def raising_reporter(exc: BaseException, job: Any) -> None:
    """Log ``reported:<attempt>:<state>`` for the job, then raise."""
    from tests.cluster.tasks_cluster import log

    log(f"reported:{job.attempt}:{job.state}", job.id)
    raise RuntimeError("the reporter itself fails")


def hanging_reporter(exc: BaseException, job: Any) -> None:
    """Log ``reported:<attempt>:<state>`` for the job, then hang for a minute."""
    from tests.cluster.tasks_cluster import log

    log(f"reported:{job.attempt}:{job.state}", job.id)
    time.sleep(60)


class Failed(Exception):
    """Raised by :func:`failing`."""


def failing(tag: str, *private: Any) -> None:
    """Raise :class:`Failed` with ``tag``; ``private`` stands for arguments a report must not carry."""
    raise Failed(tag)
