"""RabbitMQ's password hashing schemes, so that a ``password_hash`` exported from RabbitMQ
logs in unchanged. Pure functions; ``auth.users`` and ``auth.definitions`` import them.

A stored hash is ``salt (4 random bytes) + H(salt + UTF-8 password)``, base64 in
definitions files, where ``H`` is named by the user's ``hashing_algorithm``:
``rabbit_password_hashing_sha256`` (RabbitMQ's default and ours), ``..._sha512``, or
``..._md5`` (what RabbitMQ before 3.6 used; accepted on import, never produced). An empty
hash is a user without a password: no password logs in as them (certificates only).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

SHA256 = "rabbit_password_hashing_sha256"
SHA512 = "rabbit_password_hashing_sha512"
MD5 = "rabbit_password_hashing_md5"
DEFAULT_ALGORITHM = SHA256
SALT_SIZE = 4

_DIGESTS: dict[str, Callable[[bytes], hashlib._Hash]] = {
    SHA256: hashlib.sha256,
    SHA512: hashlib.sha512,
    # MD5 only checks hashes imported from old RabbitMQ definitions; it is never produced.
    MD5: lambda data: hashlib.md5(data, usedforsecurity=False),
}
ALGORITHMS = frozenset(_DIGESTS)


class BadPasswordHash(ValueError):
    """A password hash or hashing algorithm that cannot be used."""


def check_algorithm(algorithm: str) -> str:
    """``algorithm`` if it is one RabbitMQ defines; RabbitMQ's records from before 3.6
    carry none, which means MD5."""
    if not algorithm:
        return MD5
    if algorithm not in _DIGESTS:
        raise BadPasswordHash(f"unknown hashing algorithm '{algorithm}'")
    return algorithm


def hash_password(
    password: str, algorithm: str = DEFAULT_ALGORITHM, salt: bytes | None = None
) -> bytes:
    """The stored form of ``password``: salt + digest(salt + password)."""
    salt = os.urandom(SALT_SIZE) if salt is None else salt
    return salt + _DIGESTS[check_algorithm(algorithm)](salt + password.encode()).digest()


def check_password(stored: bytes, algorithm: str, password: str) -> bool:
    """Whether ``password`` matches ``stored``; never for an empty password or hash."""
    if not password or len(stored) <= SALT_SIZE:
        return False
    expected = hash_password(password, algorithm, stored[:SALT_SIZE])
    return hmac.compare_digest(expected, stored)


def encode_hash(stored: bytes) -> str:
    """Base64, as RabbitMQ's definitions carry ``password_hash``."""
    return base64.b64encode(stored).decode("ascii")


def decode_hash(text: str, algorithm: str) -> bytes:
    """The bytes of a base64 ``password_hash``; checked against the algorithm's size."""
    try:
        stored = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise BadPasswordHash("password_hash is not base64") from None
    if stored:
        size = SALT_SIZE + _DIGESTS[check_algorithm(algorithm)](b"").digest_size
        if len(stored) != size:
            raise BadPasswordHash(
                f"password_hash has {len(stored)} bytes, {algorithm} makes {size}"
            )
    return stored
