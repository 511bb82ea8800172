"""Users and their credentials; the server asks it to authenticate SASL responses.

Passwords are kept as salted SHA-256, RabbitMQ's default hashing scheme, so that
definitions exported from RabbitMQ can later be loaded as they are.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field


def hash_password(password: str, salt: bytes | None = None) -> bytes:
    """RabbitMQ's ``rabbit_password_hashing_sha256``: 4 salt bytes + sha256(salt + password)."""
    salt = os.urandom(4) if salt is None else salt
    return salt + hashlib.sha256(salt + password.encode()).digest()


@dataclass
class User:
    name: str
    password_hash: bytes
    tags: frozenset[str] = frozenset()
    # RabbitMQ's loopback_users: such a user may connect only from 127.0.0.0/8 or ::1.
    loopback_only: bool = False
    vhosts: set[str] = field(default_factory=lambda: {"/"})

    def check_password(self, password: str) -> bool:
        salt = self.password_hash[:4]
        return hmac.compare_digest(hash_password(password, salt), self.password_hash)


class UserStore:
    """The users of one broker."""

    def __init__(self) -> None:
        self.users: dict[str, User] = {}

    def add(
        self,
        name: str,
        password: str,
        *,
        tags: frozenset[str] = frozenset(),
        loopback_only: bool = False,
    ) -> User:
        user = User(name, hash_password(password), tags, loopback_only)
        self.users[name] = user
        return user

    def authenticate(self, name: str, password: str, *, loopback: bool) -> User | None:
        """The user if the credentials are right and the user may connect from there."""
        user = self.users.get(name)
        if user is None or not user.check_password(password):
            return None
        if user.loopback_only and not loopback:
            return None
        return user

    @classmethod
    def with_default_user(
        cls,
        name: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's well-known default, loopback-only
        vhosts: tuple[str, ...] = ("/",),
    ) -> UserStore:
        """The store a broker boots with; "guest" may connect from loopback only (RabbitMQ's
        ``loopback_users`` default)."""
        store = cls()
        user = store.add(
            name, password, tags=frozenset({"administrator"}), loopback_only=name == "guest"
        )
        user.vhosts = set(vhosts)
        return store
