"""Signed packages: ``django.core.signing`` with ``SECRET_KEY`` and the cluster name as salt.

``SECRET_KEY_FALLBACKS`` are honoured when verifying, so rotating the key does not destroy the
packages already queued.
"""

from __future__ import annotations

import functools
import zlib

from django.core import signing as django_signing

from .envelope import Envelope, PickleSerializer, check_picklable
from .exceptions import BadPackage


@functools.cache
def _signer(salt: str) -> django_signing.Signer:
    return django_signing.Signer(salt=f"django_taskmq.{salt}")


def reset_signers(**kwargs) -> None:
    """Forget cached signers (keys changed in tests)."""
    if kwargs.get("setting") in (None, "SECRET_KEY", "SECRET_KEY_FALLBACKS"):
        _signer.cache_clear()


def sign(envelope: Envelope, salt: str, compress: bool = False) -> str:
    """Return the signed package for ``envelope``; raise ConfigError if it cannot be pickled."""
    data = check_picklable(envelope)
    if compress:
        packed = zlib.compress(data)
        if len(packed) < len(data) - 1:
            data = b"z" + packed
        else:
            data = b"p" + data
    else:
        data = b"p" + data
    return _signer(salt).sign(django_signing.b64_encode(data).decode())


def verify(package: str, salt: str) -> Envelope:
    """Return the envelope of a package or raise :class:`BadPackage` with the reason.

    The reason is ``bad signature`` when verification fails and ``cannot unpickle: ...`` when the
    signed bytes do not load; nothing is unpickled before the signature is verified.
    """
    try:
        encoded = _signer(salt).unsign(package)
    except django_signing.BadSignature:
        raise BadPackage("bad signature") from None
    try:
        data = django_signing.b64_decode(encoded.encode())
        kind, body = data[:1], data[1:]
        if kind == b"z":
            body = zlib.decompress(body)
        elif kind != b"p":
            raise ValueError(f"unknown package format {kind!r}")
        envelope = PickleSerializer().loads(body)
    except Exception as exc:
        raise BadPackage(f"cannot unpickle: {type(exc).__name__}: {exc}") from None
    if not isinstance(envelope, Envelope):
        raise BadPackage(f"cannot unpickle: not an envelope but {type(envelope).__name__}")
    return envelope
