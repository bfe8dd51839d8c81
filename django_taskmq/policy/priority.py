"""Priorities: integers -9..9, larger first; never clamped."""

from __future__ import annotations

import enum

MIN_PRIORITY = -9
MAX_PRIORITY = 9


class Priority(enum.IntEnum):
    """Named priorities; any integer in -9..9 is accepted too."""

    LOW = -5
    NORMAL = 0
    HIGH = 5
    CRITICAL = 9


def validate_priority(value: object, error: type[Exception] = ValueError) -> int:
    """Return ``value`` as an int if it is a priority in -9..9, else raise ``error``.

    A bool, a float or anything else that is not an integer is refused, not converted.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"priority must be an integer in {MIN_PRIORITY}..{MAX_PRIORITY}, got {value!r}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise error(f"priority {value} is outside {MIN_PRIORITY}..{MAX_PRIORITY}")
    return int(value)
