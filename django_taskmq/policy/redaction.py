"""Redaction: what of a task's arguments may leave the package to be shown or sent.

``TASKMQ['redact']`` lists argument names (``password``, ``token``, ...): a keyword argument, or a
key of a dict inside an argument or a result, whose name contains one of them (case-insensitively)
is replaced by :data:`REDACTED`. Arguments a job's ``encrypt`` option names (all of them for
``True``) are replaced by :data:`ENCRYPTED`: the admin, ``qinfo``/``qdead``, log records, the error
reporter and OpenTelemetry never get them. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

REDACTED = "‹redacted›"
ENCRYPTED = "‹encrypted›"
DEPTH = 6  # nested containers looked into; deeper ones are masked whole


def is_secret(name: object, names: Collection[str]) -> bool:
    """Whether an argument or key named ``name`` is one ``names`` redacts (substring, any case)."""
    if not isinstance(name, str):
        return False
    lowered = name.lower()
    return any(secret in lowered for secret in names)


def redact(value: Any, names: Collection[str], depth: int = DEPTH) -> Any:
    """Return ``value`` with every dict entry whose key ``names`` redacts masked, in dicts, lists
    and tuples nested up to ``depth`` levels; other values are returned as they are."""
    if not names:
        return value
    if isinstance(value, Mapping):
        if depth <= 0:
            return REDACTED
        return {k: REDACTED if is_secret(k, names) else redact(v, names, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            return REDACTED
        items = [redact(v, names, depth - 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def shown_kwargs(kwargs: Mapping[str, Any], names: Collection[str], encrypted: Collection[str] = ()) -> dict:
    """The keyword arguments as they may be shown: redacted names masked, ``encrypted`` ones marked."""
    return {k: ENCRYPTED if k in encrypted else REDACTED if is_secret(k, names) else redact(v, names)
            for k, v in kwargs.items()}


def shown_call(args: tuple, kwargs: Mapping[str, Any], options: Mapping[str, Any], names: Collection[str],
               sealed: bool = False) -> tuple[tuple, dict]:
    """A call's ``(args, kwargs)`` as they may leave the package, by its ``encrypt`` option: none of
    the arguments when it is True, the named keyword arguments marked when it is a list; what is
    left redacted. ``sealed``: the arguments were not decrypted (they are in the envelope's secret)."""
    encrypt = options.get("encrypt")
    if encrypt is True:
        return ((ENCRYPTED,), {}) if (args or kwargs or sealed) else ((), {})
    listed = tuple(encrypt or ())
    marked = shown_kwargs(kwargs, names, listed)
    if sealed:
        marked.update({name: ENCRYPTED for name in listed if name not in marked})
    return tuple(redact(list(args), names)), marked
