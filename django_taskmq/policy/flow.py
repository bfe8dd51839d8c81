"""Flow control: which ready jobs a claim may start now, under concurrency keys and rate limits.

Pure logic; the broker supplies the counts and timestamps it keeps in the database.

* **Concurrency keys.** At most ``limit`` jobs with the same key run at once (a job counts from
  its claim until its outcome is recorded, or its lease runs out). A queue may cap how many of its
  jobs run at once in the same way.
* **Rate limits** (``"10/s"``, ``"300/m"``, ``"1000/h"``) use the generic cell rate algorithm
  (GCRA, "virtual scheduling") with a burst of one: each limit keeps one number, the theoretical
  arrival time ``tat``; a start is allowed when ``now >= tat``, and moves ``tat`` to
  ``max(tat, now) + period / count``. Starts are therefore spread at least ``period / count``
  apart: any half-open window of length ``period`` holds at most ``count`` claims, and idle time
  earns no burst.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from django_taskmq.exceptions import ConfigError

PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([smh])\s*$")
KEY_MAX = 255  # characters of a concurrency key (the column)


@dataclass(frozen=True)
class Rate:
    """``count`` starts per ``period`` seconds."""

    count: int
    period: float

    @property
    def interval(self) -> float:
        """Seconds between two starts."""
        return self.period / self.count

    def __str__(self) -> str:
        unit = next(u for u, seconds in PERIODS.items() if seconds == self.period)
        return f"{self.count}/{unit}"


def parse_rate(text: object, what: str = "rate_limit") -> Rate:
    """Return the :class:`Rate` of ``"N/s"``, ``"N/m"`` or ``"N/h"``; raise ConfigError naming ``what``."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f"{what} must look like '10/s', '300/m' or '1000/h', got {text!r}")
    count = int(match.group(1))
    if count < 1:
        raise ConfigError(f"{what} must allow at least 1 start per period, got {text!r}")
    return Rate(count, PERIODS[match.group(2)])


def check_key(key: object, what: str = "concurrency_key") -> str:
    """Return ``key`` if it is a string of 1..255 characters; else raise ConfigError."""
    if not isinstance(key, str) or not 0 < len(key) <= KEY_MAX:
        raise ConfigError(f"{what} must be a string of 1..{KEY_MAX} characters, got {key!r}")
    return key


def check_limit(limit: object, what: str = "concurrency_limit") -> int:
    """Return ``limit`` if it is an integer >= 1; else raise ConfigError."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"{what} must be an integer >= 1, got {limit!r}")
    return limit


def gcra(tat: float | None, now: float, rate: Rate) -> tuple[bool, float | None]:
    """Return (allowed, new ``tat``) for one start at ``now`` under ``rate``.

    When not allowed, ``tat`` is unchanged and is the moment the next start is allowed.
    """
    if tat is not None and now < tat:
        return False, tat
    return True, max(tat or now, now) + rate.interval


J = TypeVar("J")


@dataclass
class Verdict(Generic[J]):
    """What :func:`admit` decided: the admitted jobs in order, why the others wait, and when a rate
    limit opens next (epoch seconds, or None)."""

    admitted: list[J]
    held: dict[str, list[J]]
    opens_at: float | None
    tats: dict[str, float]


def admit(
    ordered: Iterable[J],
    limit: int,
    now: float,
    *,
    key_of: Callable[[J], tuple[str, int] | None],
    queue_of: Callable[[J], str],
    buckets_of: Callable[[J], Iterable[tuple[str, Rate]]],
    running_keys: Mapping[str, int],
    queue_caps: Mapping[str, int],
    running_queues: Mapping[str, int],
    tats: Mapping[str, float | None],
) -> Verdict[J]:
    """Walk ``ordered`` (pick order) and admit up to ``limit`` jobs that fit every limit.

    ``key_of(job)`` is its (concurrency key, limit) or None; ``buckets_of(job)`` its rate limits as
    (bucket name, rate). ``running_keys``/``running_queues`` count the jobs running now, and
    ``queue_caps`` the queues' concurrency caps. A job that does not fit is held (not delivered),
    and the walk goes on: jobs behind it on other keys, tasks or queues are still admitted.
    """
    keys = dict(running_keys)
    queues = dict(running_queues)
    new_tats: dict[str, float | None] = dict(tats)
    admitted: list[J] = []
    held: dict[str, list[J]] = {}
    opens_at: float | None = None
    for job in ordered:
        if len(admitted) >= limit:
            break
        reason = None
        keyed = key_of(job)
        queue = queue_of(job)
        if keyed is not None and keys.get(keyed[0], 0) >= keyed[1]:
            reason = f"concurrency key {keyed[0]!r} at its limit ({keyed[1]})"
        elif queue in queue_caps and queues.get(queue, 0) >= queue_caps[queue]:
            reason = f"queue {queue!r} at its concurrency cap ({queue_caps[queue]})"
        else:
            moves = []
            for bucket, rate in buckets_of(job):
                allowed, tat = gcra(new_tats.get(bucket), now, rate)
                if not allowed:
                    reason = f"rate limit {bucket!r} ({rate})"
                    opens_at = tat if opens_at is None else min(opens_at, tat or opens_at)
                    break
                moves.append((bucket, tat))
            if reason is None:
                new_tats.update(moves)
        if reason is not None:
            held.setdefault(reason, []).append(job)
            continue
        admitted.append(job)
        if keyed is not None:
            keys[keyed[0]] = keys.get(keyed[0], 0) + 1
        if queue in queue_caps:
            queues[queue] = queues.get(queue, 0) + 1
    changed = {b: t for b, t in new_tats.items() if t is not None and t != tats.get(b)}
    return Verdict(admitted, held, opens_at, changed)
