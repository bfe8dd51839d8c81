"""Tasks of the operator's end-to-end test (tests/cluster/test_operator_browser.py)."""

from __future__ import annotations

import os


class GateClosed(Exception):
    """The gate file does not exist yet."""


def fails_until(gate: str) -> str:
    """Fail while the file ``gate`` does not exist; succeed once it does (a fix deployed)."""
    if not os.path.exists(gate):
        raise GateClosed(f"the upstream service is down (no {os.path.basename(gate)})")
    return "invoice sent"
