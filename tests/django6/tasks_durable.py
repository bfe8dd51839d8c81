"""Durable Django tasks (``@durable`` above ``django.tasks``' ``@task``, or the backport's), imported by
the workers as ``tests.django6.tasks_durable``. Each step logs to the run log when its function runs."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.cluster.tasks_cluster import log
from tests.django6.djtasks import task

from django_taskmq import durable


def _logged(tag: str, value: Any = None) -> Any:
    log(f"step:{tag}")
    return value


def _killed_once(marker: str, value: int) -> int:
    """SIGKILL this worker the first time (no ``marker``), return ``value`` the second."""
    log("start:kill")
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    log("step:kill")
    return value


@durable(max_deliveries=4)
@task(priority=20, queue_name="default")
def fulfil(ctx, order_id: int, sleep: float = 1.0, marker: str = "") -> dict:
    """Charge, sleep, wait for "approved", ship (the order example of docs/durable.rst, as a Django task)."""
    charge = ctx.step("charge", _logged, f"charge {order_id}", {"id": order_id * 10})
    if marker:
        ctx.step("kill", _killed_once, marker, 1)
    ctx.sleep(sleep)
    decision = ctx.wait_for("approved", timeout=120)
    shipped = ctx.step("ship", _logged, f"ship {order_id}", f"shipped {order_id} by {decision['by']}")
    return {"charge": charge, "shipped": shipped}


@durable
@task
def waits_with_timeout(ctx, timeout: float) -> Any:
    ctx.step("asked", _logged, "asked")
    return ctx.wait_for("approved", timeout=timeout)
