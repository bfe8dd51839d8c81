"""Signed packages: ``django.core.signing`` with ``SECRET_KEY`` and the cluster name as salt.

Two kinds of pickles are stored: task packages (the envelope, salt ``django_taskmq.<name>``) and
results (salt ``django_taskmq.:result:<name>``, so one can never pass for the other). Nothing read
from the database is unpickled before its signature is verified. ``SECRET_KEY_FALLBACKS`` are
honoured when verifying, so rotating the key does not destroy what is already stored.

Encrypted arguments and results (:mod:`.encryption`) are decrypted here, after the signature is
verified, with ``TASKMQ['encryption_keys']``; one whose key is not listed is a :class:`BadPackage`
(or an :class:`UnreadableResult`) whose reason names the key id, and nothing of it is unpickled.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import zlib

from django.core import signing as django_signing

from .conf import get_settings
from .encryption import ARGUMENTS, RESULT, MissingKey, Sealed, Undecryptable
from .envelope import Envelope, PickleSerializer, check_picklable, open_arguments
from .exceptions import BadPackage, ConfigError, UnreadableResult


class _Signer(django_signing.Signer):
    """Django's Signer, with the key it derives for an HMAC computed once per salt and secret.

    ``salted_hmac`` hashes salt and secret into a new key on every call; every enqueue signs and
    every execution verifies, so the same derivation would be repeated per job. The signatures are
    Django's, byte for byte (see the test), so either one verifies what the other signed.
    """

    def signature(self, value: str, key: str | bytes | None = None) -> str:
        derived = _derived_key(self.salt + "signer", key or self.key, self.algorithm)
        # hmac.digest: OpenSSL's one-shot HMAC, the same bytes as hmac.new(...).digest() without
        # the Python object it builds (a few µs per job: every claim verifies a package).
        digest = hmac.digest(derived, value.encode(), self.algorithm)
        return django_signing.b64_encode(digest).decode()


@functools.lru_cache(maxsize=64)
def _derived_key(salt: str, secret: str | bytes, algorithm: str) -> bytes:
    # As django.utils.crypto.salted_hmac derives it.
    secret = secret if isinstance(secret, bytes) else secret.encode()
    return getattr(hashlib, algorithm)(salt.encode() + secret).digest()


@functools.cache
def _signer(salt: str) -> django_signing.Signer:
    return _Signer(salt=f"django_taskmq.{salt}")


def reset_signers(**kwargs) -> None:
    """Forget cached signers (keys changed in tests)."""
    if kwargs.get("setting") in (None, "SECRET_KEY", "SECRET_KEY_FALLBACKS"):
        _signer.cache_clear()
        _derived_key.cache_clear()


def result_salt(name: str) -> str:
    """Return the salt of results stored by the cluster ``name`` (never a package's salt)."""
    return f":result:{name}"


def sign_bytes(data: bytes, salt: str, compress: bool = False) -> str:
    """Return a signed package for already pickled ``data``."""
    if compress:
        packed = zlib.compress(data)
        data = b"z" + packed if len(packed) < len(data) - 1 else b"p" + data
    else:
        data = b"p" + data
    return _signer(salt).sign(django_signing.b64_encode(data).decode())


def sign(envelope: Envelope, salt: str, compress: bool = False, max_size: int | None = None) -> str:
    """Return the signed package for ``envelope``.

    Raise :class:`ConfigError` if it cannot be pickled, or if its pickle is larger than
    ``max_size`` bytes (``TASKMQ['max_package_size']``).
    """
    data = check_picklable(envelope)
    if max_size is not None and len(data) > max_size:
        raise ConfigError(
            f"the package of {envelope.func} is {len(data)} bytes, above TASKMQ['max_package_size'] = {max_size}"
        )
    return sign_bytes(data, salt, compress)


def _open(package: str, salt: str, error: type[BadPackage]) -> tuple[object, bytes]:
    """Verify ``package``, then unpickle it; return the object and its pickle (the signed bytes,
    decompressed). Raise ``error`` with the reason."""
    try:
        encoded = _signer(salt).unsign(package)
    except django_signing.BadSignature:
        raise error("bad signature") from None
    try:
        data = django_signing.b64_decode(encoded.encode())
        kind, body = data[:1], data[1:]
        if kind == b"z":
            body = zlib.decompress(body)
        elif kind != b"p":
            raise ValueError(f"unknown package format {kind!r}")
        return PickleSerializer().loads(body), body
    except Exception as exc:
        raise error(f"cannot unpickle: {type(exc).__name__}: {exc}") from None


def _decrypted(sealed: Sealed, purpose: bytes, error: type[BadPackage]) -> object:
    """Return the unpickled plaintext of ``sealed``; raise ``error`` saying why it cannot be had:
    its key is not listed (the key id), it does not authenticate, or what it holds does not load."""
    try:
        plain = get_settings().keyring.decrypt(sealed, purpose)
    except MissingKey as exc:
        raise error(str(exc)) from None
    except Undecryptable as exc:
        raise error(f"cannot decrypt: {exc}") from None
    try:
        return PickleSerializer().loads(plain)
    except Exception as exc:
        raise error(f"cannot unpickle the decrypted value: {type(exc).__name__}: {exc}") from None


def verify(package: str, salt: str, decrypt: bool = True) -> Envelope:
    """Return the envelope of a package or raise :class:`BadPackage` with the reason.

    The reason is ``bad signature`` when verification fails and ``cannot unpickle: ...`` when the
    signed bytes do not load; nothing is unpickled before the signature is verified. Encrypted
    arguments are decrypted into the envelope, unless ``decrypt`` is False: then they stay in its
    ``secret`` (what the admin shows to a user who may not see them).
    """
    if not decrypt:
        return _envelope(package, salt)[0]
    return verify_pickled(package, salt)[0]


def _envelope(package: str, salt: str) -> tuple[Envelope, bytes]:
    envelope, body = _open(package, salt, BadPackage)
    if not isinstance(envelope, Envelope):
        raise BadPackage(f"cannot unpickle: not an envelope but {type(envelope).__name__}")
    return envelope, body


def verify_pickled(package: str, salt: str) -> tuple[Envelope, bytes]:
    """:func:`verify`, also returning the envelope's verified pickle: the pusher forwards those
    bytes to a worker as they are instead of pickling the envelope again (an encrypted one is
    pickled again once decrypted: it travels to the worker in memory, never to the database)."""
    envelope, body = _envelope(package, salt)
    if envelope.secret is None:
        return envelope, body
    hidden = _decrypted(envelope.secret, ARGUMENTS, BadPackage)
    try:
        opened = open_arguments(envelope, hidden)
    except Exception as exc:  # signed and authenticated, so ours: only a bug or another version's format
        raise BadPackage(f"cannot unpickle the decrypted value: {type(exc).__name__}: {exc}") from None
    return opened, PickleSerializer().dumps(opened)


def verify_result(package: str, name: str, decrypt: bool = True) -> object:
    """Return the value of a stored result, or raise :class:`UnreadableResult` with the reason.

    An encrypted result is decrypted, unless ``decrypt`` is False: then it is returned as the
    :class:`~django_taskmq.encryption.Sealed` it is stored as."""
    value = _open(package, result_salt(name), UnreadableResult)[0]
    if decrypt and isinstance(value, Sealed):
        return _decrypted(value, RESULT, UnreadableResult)
    return value


class SealedResult(str):
    """A result already pickled and signed (by a worker): stored as it is."""

    __slots__ = ()


def seal_result(value: object, name: str, compress: bool = False, max_size: int | None = None,
                encrypt: bool = False) -> SealedResult | None:
    """Return ``value`` pickled and signed for storage (None stays None); with ``encrypt``, its
    pickle is encrypted with the first of ``TASKMQ['encryption_keys']`` before it is signed.

    Raise :class:`ValueError` naming the reason when it cannot be pickled or its pickle is larger
    than ``max_size`` bytes (``TASKMQ['max_result_size']``).
    """
    if value is None:
        return None
    if isinstance(value, SealedResult):
        return value
    try:
        data = PickleSerializer().dumps(value)
    except Exception as exc:  # pickle raises many types: PicklingError, TypeError, AttributeError
        raise ValueError(f"result cannot be pickled: {exc}") from None
    if max_size is not None and len(data) > max_size:
        raise ValueError(f"result is {len(data)} bytes, above TASKMQ['max_result_size'] = {max_size}")
    if encrypt:
        data = PickleSerializer().dumps(get_settings().keyring.encrypt(data, RESULT))
    return SealedResult(sign_bytes(data, result_salt(name), compress))
