"""Lease arithmetic."""

from __future__ import annotations


def renew_interval(lease: float) -> float:
    """Return how often a holder renews its leases: a third of the lease, so two renewals may fail."""
    return max(lease / 3.0, 0.1)
