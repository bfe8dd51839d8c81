"""Retry policy: how many deliveries a task gets and how long to wait between them."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from django_taskmq.exceptions import ConfigError

BACKOFFS = ("exponential", "linear", "fixed")

# The fraction of the delay that ``jitter=True`` stands for.
DEFAULT_JITTER = 0.1


def _is_number(value: object) -> TypeGuard[int | float]:
    # bool is an int subclass; True as a number of seconds is always a mistake.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_seconds(name: str, value: object) -> None:
    if not _is_number(value):
        raise ConfigError(f"Retry.{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"Retry.{name} must be finite, got {value!r}")
    if value < 0:
        raise ConfigError(f"Retry.{name} must not be negative, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Retry:
    """Describe how a failed task is redelivered.

    ``max_attempts`` caps the deliveries of this task; the global ``max_deliveries`` applies
    as well, whichever is smaller wins. ``jitter`` is the fraction (0..1) of the delay added
    or subtracted at random; ``True`` means 0.1 and ``False`` means none.
    """

    max_attempts: int | None = None
    backoff: str = "exponential"
    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: bool | float = True

    def __post_init__(self) -> None:
        if self.max_attempts is not None:
            if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
                raise ConfigError(
                    f"Retry.max_attempts must be an integer or None, got {self.max_attempts!r}"
                )
            if self.max_attempts < 1:
                raise ConfigError(f"Retry.max_attempts must be at least 1, got {self.max_attempts!r}")
        if self.backoff not in BACKOFFS:
            raise ConfigError(
                f"Retry.backoff must be one of {', '.join(BACKOFFS)}, got {self.backoff!r}"
            )
        _check_seconds("base", self.base)
        _check_seconds("max_delay", self.max_delay)
        if not _is_number(self.factor) or not math.isfinite(self.factor):
            raise ConfigError(f"Retry.factor must be a finite number, got {self.factor!r}")
        if self.factor < 1 and self.backoff == "exponential":
            # A factor below 1 would make later retries come sooner: never what is meant.
            raise ConfigError(f"Retry.factor must be at least 1 for exponential backoff, got {self.factor!r}")
        if self.factor < 0:
            raise ConfigError(f"Retry.factor must not be negative, got {self.factor!r}")
        if not isinstance(self.jitter, bool):
            if not _is_number(self.jitter) or not math.isfinite(self.jitter):
                raise ConfigError(f"Retry.jitter must be a bool or a fraction in 0..1, got {self.jitter!r}")
            if not 0 <= self.jitter <= 1:
                raise ConfigError(f"Retry.jitter must be in 0..1, got {self.jitter!r}")

    @property
    def jitter_fraction(self) -> float:
        """Return the jitter as a fraction in 0..1."""
        if isinstance(self.jitter, bool):
            return DEFAULT_JITTER if self.jitter else 0.0
        return float(self.jitter)

    def _capped(self, attempt: int) -> float:
        """Return the delay after ``attempt`` failures, capped at max_delay, without jitter."""
        base = float(self.base)
        cap = float(self.max_delay)
        if base == 0 or cap == 0:
            return 0.0
        if self.backoff == "fixed":
            return min(base, cap)
        if self.backoff == "linear":
            # Compare before multiplying: a huge int attempt does not fit in a float.
            if attempt >= cap / base:
                return cap
            return min(base * attempt, cap)
        factor = float(self.factor)
        exponent = attempt - 1
        if factor == 1 or exponent == 0:
            return min(base, cap)
        # Decide in log space whether the cap is reached, so factor ** exponent never overflows.
        if exponent >= (math.log(cap) - math.log(base)) / math.log(factor):
            return cap
        try:
            return min(base * factor ** float(exponent), cap)
        except OverflowError:  # Rounding at the edge of the log test.
            return cap

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Return the seconds to wait before delivery ``attempt + 1``, after ``attempt`` failures.

        ``rand`` returns a float in [0, 1); it is called once when jitter applies.
        """
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ConfigError(f"attempt must be an integer >= 1, got {attempt!r}")
        delay = self._capped(attempt)
        fraction = self.jitter_fraction
        if fraction == 0 or delay == 0:
            return delay
        jittered = delay * (1 + fraction * (2 * rand() - 1))
        # Clamp so a misbehaving rand() can't break the documented bounds.
        return min(max(jittered, 0.0), delay * (1 + fraction))

    def allows(self, deliveries: int, max_deliveries: int) -> bool:
        """Return True when another delivery may follow ``deliveries`` deliveries.

        The smaller of ``max_deliveries`` (global) and ``max_attempts`` (this task) is the cap.
        """
        for name, value in (("deliveries", deliveries), ("max_deliveries", max_deliveries)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        cap = max_deliveries if self.max_attempts is None else min(max_deliveries, self.max_attempts)
        return deliveries < cap

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a plain dict, for storage."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Retry:
        """Build a Retry from ``to_dict()`` output; missing fields take their defaults."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"Retry has no field(s) {', '.join(map(repr, unknown))}")
        return cls(**data)
