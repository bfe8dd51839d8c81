"""Encryption at rest: AES-256-GCM with versioned keys (``TASKMQ['encryption_keys']``).

A :class:`Sealed` value is the ciphertext of a pickle and the id of the key that made it; a job's
encrypted arguments travel as one inside its signed envelope, an encrypted result as one inside
its signed result package. The id (:func:`key_id`) is a fingerprint of the key, so the order of
the list does not matter: the first key encrypts, every listed key decrypts, and a ciphertext whose
key is no longer listed fails with :class:`MissingKey` naming the id, before anything is unpickled.

Free of Django; ``cryptography`` is imported on first use (the ``crypto`` extra).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable
from typing import Any

KEY_BYTES = 32
NONCE_BYTES = 12
#: The additional data of each kind of ciphertext: arguments can never be opened as a result.
ARGUMENTS = b"taskmq:arguments"
RESULT = b"taskmq:result"
SCHEDULE = b"taskmq:schedule"


class MissingKey(LookupError):
    """A ciphertext's key is not among the keys listed (rotated out, or another project's)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"encrypted with key id {key}, which TASKMQ['encryption_keys'] does not list")
        self.key = key


class Undecryptable(ValueError):
    """A ciphertext does not authenticate under its key (tampered, or a wrong purpose)."""


def generate_key() -> str:
    """Return a new key: the URL-safe base64 of 32 random bytes (what ``manage.py qkey`` prints)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def decode_key(key: Any) -> bytes:
    """Return the 32 bytes of ``key`` (URL-safe base64); raise ValueError saying what is wrong."""
    if not isinstance(key, str):
        raise ValueError(f"a key must be a string (URL-safe base64 of 32 bytes), got {type(key).__name__}")
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("a key must be URL-safe base64 (manage.py qkey prints one)") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"a key must decode to {KEY_BYTES} bytes, this one has {len(raw)}")
    return raw


def key_id(raw: bytes) -> str:
    """Return the id of a key: the first 8 hex digits of the SHA-256 of its bytes (not secret)."""
    return hashlib.sha256(b"taskmq-key-id:" + raw).hexdigest()[:8]


class Sealed:
    """An encrypted pickle: ``key`` (the key id) and ``token`` (nonce, ciphertext and tag)."""

    __slots__ = ("key", "token")

    def __init__(self, key: str, token: bytes) -> None:
        self.key = key
        self.token = token

    def __reduce__(self) -> tuple:
        return (Sealed, (self.key, self.token))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sealed) and (self.key, self.token) == (other.key, other.token)

    def __hash__(self) -> int:
        return hash((self.key, self.token))

    def __repr__(self) -> str:
        return f"<encrypted with key {self.key}>"


class Keyring:
    """The listed keys: the first encrypts, every one decrypts."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(keys)
        raws = [decode_key(key) for key in self._keys]
        self._ids = [key_id(raw) for raw in raws]
        self._raw = dict(zip(self._ids, raws))
        self._ciphers: dict[str, Any] = {}

    def __reduce__(self) -> tuple:
        # Pickled (a settings object sent to a spawned process) as its keys: the ciphers are rebuilt.
        return (Keyring, (self._keys,))

    def __bool__(self) -> bool:
        return bool(self._ids)

    @property
    def ids(self) -> list[str]:
        """The ids of the keys, the encrypting one first."""
        return list(self._ids)

    def _cipher(self, key: str) -> Any:
        cipher = self._ciphers.get(key)
        if cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            cipher = self._ciphers[key] = AESGCM(self._raw[key])
        return cipher

    def encrypt(self, data: bytes, purpose: bytes) -> Sealed:
        """Return ``data`` encrypted under the first key, bound to ``purpose``."""
        if not self._ids:
            raise LookupError("TASKMQ['encryption_keys'] is empty: there is no key to encrypt with")
        key = self._ids[0]
        nonce = os.urandom(NONCE_BYTES)  # random 96-bit nonces: safe far beyond 2**32 messages per key
        return Sealed(key, nonce + self._cipher(key).encrypt(nonce, data, purpose + key.encode()))

    def decrypt(self, sealed: Sealed, purpose: bytes) -> bytes:
        """Return the plaintext of ``sealed``; raise :class:`MissingKey` or :class:`Undecryptable`."""
        if sealed.key not in self._raw:
            raise MissingKey(sealed.key)
        from cryptography.exceptions import InvalidTag

        token = sealed.token
        try:
            return self._cipher(sealed.key).decrypt(token[:NONCE_BYTES], token[NONCE_BYTES:],
                                                    purpose + sealed.key.encode())
        except InvalidTag:
            raise Undecryptable(f"the ciphertext does not authenticate under key id {sealed.key}") from None
