"""Pausing a queue for every cluster: ``pause_queue``, ``resume_queue``, ``paused_queues``.

The pause is a row in the database (``QueuePause``), so it holds for every cluster on every host and
survives restarts. Each cluster's pusher reads the paused queues once a second and claims nothing
from them; what a cluster had reserved of a paused queue but not started goes back to the queue,
uncounted. Running jobs finish; enqueues still succeed and schedules still fire (the work waits).
"""

from __future__ import annotations

import logging

from .brokers import get_broker
from .conf import get_settings

logger = logging.getLogger(__name__)


def pause_queue(name: str, by: str = "") -> bool:
    """Pause the queue ``name`` (one of ``TASKMQ['queues']``, else ConfigError) for every cluster
    within about a second; ``by`` says who (logged and kept). Return False when it was paused already."""
    get_settings().check_queue(name)
    changed = get_broker().pause_queue(name, by)
    if changed:
        logger.info("queue %s paused%s: no cluster claims from it until it is resumed", name, f" by {by}" if by else "")
    return changed


def resume_queue(name: str, by: str = "") -> bool:
    """Resume the queue ``name``; return False when it was not paused."""
    get_settings().check_queue(name)
    changed = get_broker().resume_queue(name)
    if changed:
        logger.info("queue %s resumed%s", name, f" by {by}" if by else "")
    return changed


def paused_queues() -> frozenset[str]:
    """Return the names of the queues paused now."""
    return get_broker().paused_queues()
