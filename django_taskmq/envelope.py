"""The envelope: what a package carries (task, arguments, options), and its pickling."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from .encryption import ARGUMENTS, Keyring, Sealed
from .exceptions import ConfigError


@dataclass(frozen=True, kw_only=True)
class Envelope:
    """A task call as it travels: dotted path, arguments and the options that shape its run.

    ``options`` holds what the cluster needs to run and record it: ``timeout``, ``retry``
    (a dict), ``ack_failure``, ``hook``, ``on_dead``, ``task_name``, ``encrypt`` (True, or the names of
    the keyword arguments that were encrypted); ``chain`` (the next links) only in a package queued
    before 0.2 (see :mod:`.legacy_chains`).

    ``secret`` holds the encrypted arguments (see :func:`seal_arguments`): the pickle of
    ``(args, kwargs)``, put back into ``args`` and ``kwargs`` by :func:`open_arguments` once
    ``signing`` decrypted it.
    """

    func: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    secret: Sealed | None = None

    def __reduce__(self):
        # Pickle through a stable constructor, not the class layout, so packages already queued
        # still load after the class changes (fields added, slots on or off).
        if self.secret is None:
            return (_rebuild, (self.func, self.args, self.kwargs, self.options))
        return (_rebuild, (self.func, self.args, self.kwargs, self.options, self.secret))


def _rebuild(func: str, args: tuple, kwargs: dict, options: dict, secret: Sealed | None = None) -> Envelope:
    return Envelope(func=func, args=args, kwargs=kwargs, options=options, secret=secret)


def seal_arguments(envelope: Envelope, keyring: Keyring) -> Envelope:
    """Return ``envelope`` with the arguments its ``encrypt`` option names moved into ``secret``,
    encrypted: all of them for ``True``, else the keyword arguments listed."""
    encrypt = envelope.options.get("encrypt")
    if not encrypt:
        return envelope
    if encrypt is True:
        hidden, args, kwargs = (envelope.args, envelope.kwargs), (), {}
    else:
        secret = {name: value for name, value in envelope.kwargs.items() if name in encrypt}
        kwargs = {name: value for name, value in envelope.kwargs.items() if name not in secret}
        hidden, args = ((), secret), envelope.args
    data = _pickled(hidden, envelope.func)
    return Envelope(func=envelope.func, args=args, kwargs=kwargs, options=envelope.options,
                    secret=keyring.encrypt(data, ARGUMENTS))


def open_arguments(envelope: Envelope, hidden: Any) -> Envelope:
    """Return ``envelope`` with its ``secret`` replaced by ``hidden``, what it decrypted to (the
    ``(args, kwargs)`` that :func:`seal_arguments` encrypted): see ``signing.verify``."""
    args, kwargs = hidden
    return Envelope(func=envelope.func, args=(*envelope.args, *args), kwargs={**envelope.kwargs, **kwargs},
                    options=envelope.options)


class PickleSerializer:
    """Serializer for :mod:`django.core.signing` (used only after the signature is verified)."""

    protocol = pickle.HIGHEST_PROTOCOL

    def dumps(self, obj: Any) -> bytes:
        return pickle.dumps(obj, self.protocol)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


def check_picklable(envelope: Envelope) -> bytes:
    """Return the pickled envelope or raise :class:`ConfigError` saying what cannot be pickled."""
    return _pickled(envelope, envelope.func)


def _pickled(value: object, func: str) -> bytes:
    try:
        return pickle.dumps(value, PickleSerializer.protocol)
    except Exception as exc:  # pickle raises many types: PicklingError, TypeError, AttributeError
        raise ConfigError(f"the arguments of {func} cannot be pickled: {exc}") from exc
