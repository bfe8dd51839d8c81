"""Sync mode: run one stored job inline, through the same unpack, execute and record steps as
the cluster (``async_task(..., sync=True)``, ``TASKMQ['sync']``, tests)."""

from __future__ import annotations

from ..observability import reporting
from . import context, execution, recorder
from ..brokers.base import Broker
from ..conf import Settings
from ..exceptions import BadPackage


def run(job_id: str, broker: Broker, settings: Settings, reraise: bool = False) -> bool:
    """Reserve ``job_id`` if it is ready, run it here and record its outcome; return False when it
    could not be reserved (not ready, expired, no delivery left).

    What the task raised is current while the outcome is recorded; a ``KeyboardInterrupt`` is raised
    again once it is recorded (as Django's ImmediateBackend lets it through), and with ``reraise``
    every exception is (django-q2's sync).
    """
    reservation = broker.reserve_job(job_id, settings.lease, owner="sync")
    if reservation is None:
        return False
    try:
        message = execution.unpack(reservation, settings.name)
    except BadPackage as exc:
        broker.dead_letter_package(reservation, str(exc))
        return True
    kept: list[BaseException] = []
    token = context.enter(raised=kept)
    try:
        outcome = execution.seal(execution.execute(message), settings)
    finally:
        context.leave(token)
    try:
        if not kept:
            recorder.record([outcome], broker, settings)
            return True
        try:
            raise kept[0]
        except BaseException:
            # Recorded where the exception is current: a receiver of post_execute (Django's
            # task_finished, which logs with logger.exception) sees it, as in Django's ImmediateBackend.
            recorder.record([outcome], broker, settings)
            if reraise or isinstance(kept[0], KeyboardInterrupt):
                raise
        return True
    finally:
        reporting.deliver()
