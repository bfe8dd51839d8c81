"""The cluster's own log routing when the project has none: its records to stderr.

A new ``startproject`` site has no ``LOGGING``; Django's default configures only its own loggers,
and Python prints nothing below WARNING without a handler, so a cluster said neither that it
started nor what it did. ``qcluster`` calls :func:`route` before it starts: when no handler on the
way from ``django_taskmq``'s loggers to the root would take their records, it adds one that writes
them to stderr, at the level ``-v`` asks for. A project whose ``LOGGING`` routes them (a handler on
``django_taskmq``, on one of its loggers, or on the root) keeps its own routing, levels included.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "django_taskmq"
#: ``-v`` -> the lowest level printed: ``-v 0`` warnings and errors only, ``-v 1`` (the default)
#: what the cluster does, ``-v 2`` and ``-v 3`` its debug records too.
LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
FORMAT = "%(asctime)s [%(processName)s %(process)d] %(levelname)s %(name)s: %(message)s"


def routed(name: str = LOGGER) -> bool:
    """Whether the project's logging gives the records of ``name`` (and its children) a handler."""
    manager = logging.getLogger().manager
    loggers = [logging.getLogger(name)] + [logger for key, logger in manager.loggerDict.items()
                                           if key.startswith(f"{name}.") and isinstance(logger, logging.Logger)]
    for logger in loggers:
        current: logging.Logger | None = logger
        while current is not None:
            if current.handlers:
                return True
            current = current.parent if current.propagate else None
    return False


def route(verbosity: int = 1) -> logging.Handler | None:
    """Print the cluster's records to stderr at the level of ``verbosity`` when nothing else takes
    them; return the handler added (None: the project routes them itself)."""
    if routed():
        return None
    logger = logging.getLogger(LOGGER)
    level = LEVELS.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level)
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler
