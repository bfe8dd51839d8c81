"""Job times given as durations: counted from the broker's clock when stored (see ``brokers/clock.py``)."""

from __future__ import annotations

import time
from typing import Any


class FromNow(float):
    """A job time given as a duration (``delay=``): its value is this host's ``time.time() + seconds``
    (what a host clock stores), and a database clock stores the database's time + :attr:`seconds`.

    A float, so code that reads a job's ``visible_at`` before it is stored (``pre_enqueue``
    receivers) sees a time as before; a plain float put in its place is an absolute time.
    """

    seconds: float

    def __new__(cls, seconds: float) -> FromNow:
        value = super().__new__(cls, time.time() + seconds)
        value.seconds = float(seconds)
        return value

    def __reduce__(self) -> tuple[Any, ...]:
        return float, (float(self),)  # pickled (sent to another process): an absolute time
