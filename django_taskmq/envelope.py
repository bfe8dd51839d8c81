"""The signed package: what it carries (the envelope: task, arguments, options), its pickling, and
its signing with ``django.core.signing`` (``SECRET_KEY``, the cluster name as salt).

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
import pickle
import zlib
from dataclasses import dataclass, field
from typing import Any

from django.core import signing as django_signing

from .conf import get_settings
from .encryption import ARGUMENTS, RESULT, Keyring, MissingKey, Sealed, Undecryptable
from .exceptions import BadPackage, ConfigError, UnreadableResult


@dataclass(frozen=True, kw_only=True)
class Envelope:
    """A task call as it travels: dotted path, arguments and the options that shape its run.

    ``options`` holds what the cluster needs to run and record it: ``timeout``, ``retry``
    (a dict), ``ack_failure``, ``hook``, ``on_dead``, ``task_name``, ``encrypt`` (True, or the names of
    the keyword arguments that were encrypted); ``chain`` (the next links) only in a package queued
    before 0.2 (see :mod:`.legacy_chains`).

    ``secret`` holds the encrypted arguments (see :func:`seal_arguments`): the pickle of
    ``(args, kwargs)``, put back into ``args`` and ``kwargs`` by :func:`open_arguments` once
    :func:`verify` decrypted it.
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
    ``(args, kwargs)`` that :func:`seal_arguments` encrypted): see :func:`verify`."""
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


#: Why a package does not verify, and what to do: nearly always the key or the name changed under
#: stored jobs (a deploy with a new SECRET_KEY, a cluster renamed), seldom a row altered in the table.
BAD_SIGNATURE = ("bad signature: signed with another SECRET_KEY or TASKMQ['name'] than this process's (or altered "
                 "in the table); if the key changed, add the old one to SECRET_KEY_FALLBACKS (if the name "
                 "changed, restore it), then run manage.py qdead replay --all")
#: The same for a stored result, which nothing replays: the old key makes it readable again.
BAD_RESULT_SIGNATURE = ("bad signature: signed with another SECRET_KEY or TASKMQ['name'] than this process's (or "
                        "altered in the table); add the old key to SECRET_KEY_FALLBACKS to read it")


def _open(package: str, salt: str, error: type[BadPackage], bad: str = BAD_SIGNATURE) -> tuple[object, bytes]:
    """Verify ``package``, then unpickle it; return the object and its pickle (the signed bytes,
    decompressed). Raise ``error`` with the reason (``bad`` when the signature does not verify)."""
    try:
        encoded = _signer(salt).unsign(package)
    except django_signing.BadSignature:
        raise error(bad) from None
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

    The reason is :data:`BAD_SIGNATURE` when verification fails and ``cannot unpickle: ...`` when the
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
    value = _open(package, result_salt(name), UnreadableResult, BAD_RESULT_SIGNATURE)[0]
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
        raise ValueError(f"result cannot be pickled: {exc}") from exc  # the cause: its class and traceback
    if max_size is not None and len(data) > max_size:
        raise ValueError(f"result is {len(data)} bytes, above TASKMQ['max_result_size'] = {max_size}")
    if encrypt:
        data = PickleSerializer().dumps(get_settings().keyring.encrypt(data, RESULT))
    return SealedResult(sign_bytes(data, result_salt(name), compress))
