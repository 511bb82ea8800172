"""Who may use the management API and what they see (RabbitMQ's user tags):

- no management tag: refused (401 ``Not management user``);
- ``management``: their own connections and channels, the vhosts they have permissions in
  (and what is in them);
- ``policymaker``: also the policies and parameters of those vhosts;
- ``monitoring``: sees every connection, channel, vhost and the node;
- ``administrator``: everything, and changes users, vhosts, permissions, limits and
  definitions.

Logins are HTTP basic auth checked against the same ``UserStore`` as AMQP logins
(``loopback_users`` apply too); a successful check is cached per (user, password digest)
until the registry changes, so a page polling the API does not hash a password each time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.auth.users import ADMINISTRATOR, MANAGEMENT, MONITORING, POLICYMAKER

if TYPE_CHECKING:
    from leveret.auth.users import User, UserStore

MANAGEMENT_TAGS = frozenset((ADMINISTRATOR, MONITORING, POLICYMAKER, MANAGEMENT))


class Unauthorized(Exception):
    """401 with this reason."""


class Forbidden(Exception):
    """403 (RabbitMQ answers 401 ``not_authorised`` for these; see app.py)."""


@dataclass(frozen=True)
class Principal:
    """The logged-in user of one request."""

    user: User
    store: UserStore

    @property
    def name(self) -> str:
        return self.user.name

    @property
    def tags(self) -> tuple[str, ...]:
        return self.user.tags

    @property
    def is_admin(self) -> bool:
        return ADMINISTRATOR in self.user.tags

    @property
    def is_monitor(self) -> bool:
        return self.is_admin or MONITORING in self.user.tags

    @property
    def is_policymaker(self) -> bool:
        return self.is_admin or POLICYMAKER in self.user.tags

    def sees_vhost(self, vhost: str) -> bool:
        return self.is_monitor or vhost in self.user.vhosts

    def sees_user(self, user: str) -> bool:
        return self.is_monitor or user == self.name

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("administrator tag required")

    def require_monitor(self) -> None:
        if not self.is_monitor:
            raise Forbidden("monitoring tag required")

    def require_vhost(self, vhost: str) -> None:
        if not (self.is_admin or vhost in self.user.vhosts):
            raise Forbidden(f"access to vhost '{vhost}' refused for user '{self.name}'")

    def require_policymaker(self, vhost: str) -> None:
        if not self.is_policymaker:
            raise Forbidden("policymaker tag required")
        self.require_vhost(vhost)


class Authenticator:
    """HTTP basic auth against a ``UserStore``, with a cache of good logins."""

    def __init__(self, users: UserStore) -> None:
        self.users = users
        self._cache: dict[tuple[str, bytes], int] = {}

    def login(self, name: str, password: str, *, loopback: bool) -> Principal:
        users = self.users
        user = users.users.get(name)
        if user is None:
            raise Unauthorized("Login failed")
        if user.loopback_only and not loopback:
            raise Unauthorized("Login failed")
        key = (name, hashlib.sha256(password.encode()).digest())
        if self._cache.get(key) != users.generation:
            if not user.has_password or not user.check_password(password):
                raise Unauthorized("Login failed")
            if len(self._cache) > 1000:
                self._cache.clear()
            self._cache[key] = users.generation
        if not MANAGEMENT_TAGS.intersection(user.tags):
            raise Unauthorized("Not management user")
        return Principal(user, users)
