"""The envelope: what a package carries (task, arguments, options), and its pickling."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from .exceptions import ConfigError


@dataclass(frozen=True, kw_only=True)
class Envelope:
    """A task call as it travels: dotted path, arguments and the options that shape its run.

    ``options`` holds what the cluster needs to run and record it: ``timeout``, ``retry``
    (a dict), ``ack_failure``, ``hook``, ``on_dead``, ``task_name``; ``chain`` (the next links)
    only in a package queued before 0.2 (see :mod:`.legacy_chains`).
    """

    func: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    def __reduce__(self):
        # Pickle through a stable constructor, not the class layout, so packages already queued
        # still load after the class changes (fields added, slots on or off).
        return (_rebuild, (self.func, self.args, self.kwargs, self.options))


def _rebuild(func: str, args: tuple, kwargs: dict, options: dict) -> Envelope:
    return Envelope(func=func, args=args, kwargs=kwargs, options=options)


class PickleSerializer:
    """Serializer for :mod:`django.core.signing` (used only after the signature is verified)."""

    protocol = pickle.HIGHEST_PROTOCOL

    def dumps(self, obj: Any) -> bytes:
        return pickle.dumps(obj, self.protocol)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


def check_picklable(envelope: Envelope) -> bytes:
    """Return the pickled envelope or raise :class:`ConfigError` saying what cannot be pickled."""
    try:
        return pickle.dumps(envelope, PickleSerializer.protocol)
    except Exception as exc:  # pickle raises many types: PicklingError, TypeError, AttributeError
        raise ConfigError(f"the arguments of {envelope.func} cannot be pickled: {exc}") from exc
