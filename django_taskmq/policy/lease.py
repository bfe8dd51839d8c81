"""Lease arithmetic (epoch seconds)."""

from __future__ import annotations


def lease_until(now: float, lease: float) -> float:
    """Return when a lease taken at ``now`` for ``lease`` seconds runs out."""
    return now + lease


def is_expired(until: float | None, now: float) -> bool:
    """Return True when a lease that runs until ``until`` has run out at ``now``."""
    return until is not None and until <= now


def renew_interval(lease: float) -> float:
    """Return how often a holder renews its leases: a third of the lease, so two renewals may fail."""
    return max(lease / 3.0, 0.1)
