"""A task module that takes :data:`IMPORT_SECONDS` to import (a heavy import of user code): a
scheduler tick that fires one of its functions imports it (tests/cluster/test_database_stall.py).
It logs ``import:begin`` and ``import:end`` to the run log, under the job id ``slow-import``."""

from __future__ import annotations

import time

from .tasks_cluster import log

IMPORT_SECONDS = 10.0

log("import:begin", "slow-import")
time.sleep(IMPORT_SECONDS)
log("import:end", "slow-import")


def noop() -> str:
    return "imported"
