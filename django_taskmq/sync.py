"""Sync mode: run one stored job inline, through the same unpack, execute and record steps as
the cluster (``async_task(..., sync=True)``, ``TASKMQ['sync']``, tests)."""

from __future__ import annotations

from . import execution, recorder, reporting
from .brokers.base import Broker
from .conf import Settings
from .exceptions import BadPackage


def run(job_id: str, broker: Broker, settings: Settings) -> None:
    """Reserve ``job_id`` if it is ready, run it here and record its outcome."""
    reservation = broker.reserve_job(job_id, settings.lease, owner="sync")
    if reservation is None:
        return
    try:
        message = execution.unpack(reservation, settings.name)
    except BadPackage as exc:
        broker.dead_letter_package(reservation, str(exc))
        return
    recorder.record([execution.seal(execution.execute(message), settings)], broker, settings)
    reporting.deliver()
