"""Brokers: where messages wait. :func:`get_broker` returns the configured one."""

from __future__ import annotations

from .base import Ack, Broker, Reservation

__all__ = ["Ack", "Broker", "Reservation", "get_broker"]

_brokers: dict[str, Broker] = {}


def get_broker(alias: str | None = None) -> Broker:
    """Return the ORM broker on the database ``alias`` (default: ``TASKMQ['database']``)."""
    # Imported here, not above: the ORM broker imports the models, and this package is imported
    # (through .base) by modules that load before Django's app registry is ready.
    from ..conf import get_settings
    from .orm import OrmBroker

    settings = get_settings()
    alias = alias or settings.database
    broker = _brokers.get(alias)
    if broker is None or broker.settings is not settings:
        broker = _brokers[alias] = OrmBroker(settings, alias)
    return broker
