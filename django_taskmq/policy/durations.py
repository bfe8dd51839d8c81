"""Durations for people, in two styles: ``4 min 10 s`` (pages) and ``4m10s`` (terminals)."""

from __future__ import annotations

LONG = {"ms": "ms", "s": "s", "m": "min", "h": "h", "d": "d"}


def duration(seconds: float | None, compact: bool = False) -> str:
    """Return ``seconds`` as the one or two largest units: ``850 ms``, ``12.5 s``, ``4 min 10 s``,
    ``3 h 5 min``, ``2 d 4 h``; with ``compact``: ``850ms``, ``12.5s``, ``4m10s``, ``3h05m``, ``2d04h``."""
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return _join([(f"{seconds * 1000:.0f}", "ms")], compact)
    if seconds < 60:
        return _join([(f"{seconds:.1f}", "s")], compact)
    minutes, secs = divmod(int(seconds), 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if minutes < 60:
        big, small = (minutes, "m"), (secs, "s")
    elif hours < 48:
        big, small = (hours, "h"), (mins, "m")
    else:
        big, small = (days, "d"), (hrs, "h")
    # The second unit is zero-padded in the compact style, so columns line up.
    second = f"{small[0]:02d}" if compact else str(small[0])
    return _join([(str(big[0]), big[1]), (second, small[1])], compact)


def _join(parts: list[tuple[str, str]], compact: bool) -> str:
    if compact:
        return "".join(f"{number}{unit}" for number, unit in parts)
    return " ".join(f"{number} {LONG[unit]}" for number, unit in parts)
