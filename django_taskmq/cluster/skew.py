"""How far this host's clock is from the queue's (the database's): measured in each heartbeat, shown
to operators, warned about once. Nothing in the queue depends on it: every time the queue decides
with is the database's (see :mod:`..brokers.clock`); a skewed host only shows wrong wall times in
its own logs and in the start and finish times its workers record."""

from __future__ import annotations

import logging

from ..brokers.base import Broker
from ..brokers.clock import Skew

logger = logging.getLogger(__name__)


class SkewWatch:
    """The last skew measured by one cluster, and the warning when it passes ``threshold`` seconds."""

    def __init__(self, broker: Broker, owner: str, threshold: float) -> None:
        self.broker = broker
        self.owner = owner
        self.threshold = threshold
        self.last: Skew | None = None
        self.warned = False

    def measure(self) -> Skew | None:
        """Measure once (one query; none on a host clock), warn if newly past the threshold."""
        self.last = skew = self.broker.clock_skew()
        if skew is None:
            return None
        # Past the threshold by more than the reading's own uncertainty: a slow round trip alone
        # never warns.
        beyond = abs(skew.seconds) - skew.uncertainty > self.threshold
        if beyond and not self.warned:
            self.warned = True
            logger.warning(
                "cluster %s: this host's clock is %+.1f s from the database's (%s); the queue uses the "
                "database's clock, but this host's logs and the start and finish times its workers record "
                "are off by as much: synchronise it (NTP). Threshold TASKMQ['clock_skew_warning'] = %s s",
                self.owner, skew.seconds, "ahead" if skew.seconds > 0 else "behind", self.threshold)
        elif not beyond and self.warned and abs(skew.seconds) + skew.uncertainty < self.threshold:
            self.warned = False
            logger.info("cluster %s: this host's clock is back within %s s of the database's (%+.3f s)",
                        self.owner, self.threshold, skew.seconds)
        return skew

    def counts(self) -> dict[str, float]:
        """The heartbeat's fields: ``clock_skew`` (host minus database, s) and its uncertainty."""
        if self.last is None:
            return {}
        return {"clock_skew": round(self.last.seconds, 4), "clock_skew_uncertainty": round(self.last.uncertainty, 4)}
