"""Lease arithmetic."""

from __future__ import annotations


def renew_interval(lease: float) -> float:
    """Return how often a holder renews its leases: a third of the lease, so two renewals may fail."""
    return max(lease / 3.0, 0.1)


#: What a holder knows of the leases it could not renew (see :func:`standing`).
HELD, IN_DOUBT, MAY_BE_LOST = "held", "in doubt", "may be lost"


def standing(since_renewal: float, lease: float, failing: bool) -> str:
    """What a holder can say of its leases ``since_renewal`` seconds after the last renewal that
    worked (timed from before it was sent), while its database operations fail (``failing``) or not.

    Held while the database answers, or within half a lease of that renewal (a renewal every third
    of a lease has failed at most once): unstarted work may start. In doubt after that: start
    nothing more, another holder may take the work over once the lease is out. May be lost after a
    whole lease: unstarted work must be given back, not started, once the database answers.
    """
    if not failing or since_renewal <= lease / 2:
        return HELD
    return IN_DOUBT if since_renewal <= lease else MAY_BE_LOST


def halt_after(lease: float, beat_every: float) -> float:
    """Seconds without a heartbeat written (one every ``beat_every`` s) after which a cluster stops
    the tasks it runs (and starts nothing): a third of the lease, so it has stopped before the
    others may take them (:func:`dead_after`), and at least three heartbeats, so a heartbeat that is
    merely slow stops nothing."""
    return max(lease / 3.0, 3.0 * beat_every)


def dead_after(lease: float, beat_every: float) -> float:
    """Seconds of heartbeat silence after which the other clusters treat a cluster as dead and take
    its running jobs back: :func:`halt_after` plus two heartbeats and a second (a cluster cut off
    has stopped what it ran by then; a heartbeat late by one interval is no silence)."""
    return halt_after(lease, beat_every) + 2.0 * beat_every + 1.0


def held_for(lease: float, beat_every: float) -> float:
    """Seconds of heartbeat silence after which nothing a cluster leased can still be held: its
    last renewal came at most a heartbeat after its last beat, and a lease lasts ``lease``."""
    return lease + 2.0 * beat_every + 1.0


#: The least time a monitor may take no turn while outcomes wait for it before it is treated as
#: wedged (see :func:`wedged_after`).
WEDGED_FLOOR = 2.0


def wedged_after(lease: float) -> float:
    """Seconds a monitor may take no turn while outcomes wait for it before the sentinel replaces it:
    a third of the lease (an outcome reaches the sentinel with at least two thirds of its lease left,
    renewals being every third, so the next monitor still has a third to record it in), at least
    :data:`WEDGED_FLOOR`."""
    return max(lease / 3.0, WEDGED_FLOOR)


def statement_bound(lease: float) -> float:
    """Seconds one database statement (or commit) of the cluster's own processes may take before it
    is ended with an error and retried: half of :func:`wedged_after` (a sixth of the lease, 10 s by
    default), so a monitor whose statement hangs fails it and tries again before the sentinel would
    stop starting work (half the wedged bound) or replace it (the whole bound)."""
    return wedged_after(lease) / 2.0
