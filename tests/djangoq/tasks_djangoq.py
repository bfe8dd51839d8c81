"""Tasks and hooks of the django-q2 suite (importable by a qcluster's workers as ``tests.djangoq.tasks_djangoq``).

Each appends to the run log of ``tests.tasks`` (``TASKMQ_RUN_LOG``), so the test sees what ran,
once per run, whichever process ran it.
"""

from __future__ import annotations

import os
from typing import Any

from django_taskmq import current_job
from tests.tasks import RUN_LOG_ENV


def _log(line: str) -> None:
    path = os.environ.get(RUN_LOG_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


def record(tag: str = "", **kwargs: Any) -> str:
    """Log ``<job id> <tag>`` (and ``@<when>`` when a schedule passes its due time as ``when``); return the tag."""
    when = kwargs.get("when")
    _log(f"{current_job()} {tag}{'@' + when if when else ''}")
    return tag


def hook(task: Any) -> None:
    """A django-q2 style hook: log ``<task id> hook:<success>:<result>``."""
    _log(f"{task.id} hook:{task.success}:{task.result}")
