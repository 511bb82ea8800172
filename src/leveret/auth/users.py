"""Users, virtual hosts' metadata, permissions and limits of one broker: the registry every
front end asks (who may log in, what they may touch) and ``leveret ctl`` changes.

``UserStore`` keeps it all in memory; ``auth.persist`` writes it under ``data_dir``
(``UserStore.snapshot``/``restore``, RabbitMQ's definitions format); ``auth.authn`` decides
logins, ``auth.access`` checks operations; both stand above this module, which imports
neither. The server imports this module; protocol/ and model/ do not. Every change bumps
``generation``, so cached permission checks (``auth.access``) see it at once.

The change methods are named and ordered as rabbitmqctl's verbs and raise
:class:`AdminError` subclasses with rabbitmqctl's messages and exit codes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from leveret.auth import passwords
from leveret.auth.limits import (
    USER_LIMITS,
    VHOST_LIMITS,
    ConnectionTracker,
    InvalidLimits,
    kept,
    parse_limits,
)
from leveret.auth.passwords import DEFAULT_ALGORITHM, BadPasswordHash
from leveret.auth.permissions import InvalidPattern, Permission, TopicPermission

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

log = logging.getLogger("leveret.auth")

# RabbitMQ's user tags: the management UI's roles, and impersonator (may publish with
# another user's user_id). Other tags are kept as they are, as RabbitMQ keeps them.
ADMINISTRATOR = "administrator"
MONITORING = "monitoring"
POLICYMAKER = "policymaker"
MANAGEMENT = "management"
IMPERSONATOR = "impersonator"
KNOWN_TAGS = (ADMINISTRATOR, MONITORING, POLICYMAKER, MANAGEMENT, IMPERSONATOR)

FULL_ACCESS = ".*"
DEFAULT_VHOST_DESCRIPTION = "Default virtual host"
QUEUE_TYPES = ("classic", "quorum", "stream")


class AdminError(Exception):
    """A change that cannot be made; ``exit_code`` is rabbitmqctl's (sysexits.h)."""

    exit_code: ClassVar[int] = 65  # EX_DATAERR


class NoSuchUser(AdminError):
    exit_code = 67  # EX_NOUSER

    def __init__(self, name: str) -> None:
        super().__init__(f'User "{name}" does not exist')


class NoSuchVhost(AdminError):
    exit_code = 69  # EX_UNAVAILABLE, as rabbitmqctl

    def __init__(self, name: str) -> None:
        super().__init__(f"Virtual host '{name}' does not exist")


class UserExists(AdminError):
    exit_code = 70  # rabbitmqctl's code for an existing user

    def __init__(self, name: str) -> None:
        super().__init__(f'User "{name}" already exists')


class InvalidArgument(AdminError):
    exit_code = 65


class _UserVhosts(Set[str]):
    """The vhosts a user has permissions in, read live from the store (the front end asks
    ``vhost in user.vhosts`` at connection.open)."""

    def __init__(self, store: UserStore | None, name: str) -> None:
        self._store = store
        self._name = name

    def __contains__(self, vhost: object) -> bool:
        return self._store is not None and (self._name, vhost) in self._store.permissions

    def _names(self) -> list[str]:
        if self._store is None:
            return []
        return [v for (u, v) in self._store.permissions if u == self._name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


@dataclass(eq=False)
class User:
    name: str
    # salt + digest (auth.passwords); b"" = no password: certificate (EXTERNAL) login only.
    password_hash: bytes
    hashing_algorithm: str = DEFAULT_ALGORITHM
    tags: tuple[str, ...] = ()
    limits: dict[str, int] = field(default_factory=dict)
    store: UserStore | None = field(default=None, repr=False)

    @property
    def loopback_only(self) -> bool:
        """RabbitMQ's ``loopback_users``: may connect from 127.0.0.0/8 or ::1 only."""
        return self.store is not None and self.name in self.store.loopback_users

    @property
    def vhosts(self) -> Set[str]:
        return _UserVhosts(self.store, self.name)

    @property
    def has_password(self) -> bool:
        return bool(self.password_hash)

    def check_password(self, password: str) -> bool:
        return passwords.check_password(self.password_hash, self.hashing_algorithm, password)


@dataclass(eq=False)
class VhostInfo:
    """What the registry knows of a virtual host (the model owns its contents)."""

    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    # x-queue-type for declarations that name none (RabbitMQ's vhost default queue type).
    default_queue_type: str | None = None
    limits: dict[str, int] = field(default_factory=dict)


def _check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{what} name must not be empty")
    if len(name.encode()) > 255:
        raise InvalidArgument(f"{what} name is longer than 255 bytes")
    return name


def _tags(tags: Iterable[str]) -> tuple[str, ...]:
    # rabbitmqctl accepts "a b" and "a,b"; the order given is kept, duplicates dropped.
    out: dict[str, None] = {}
    for tag in tags:
        for part in tag.replace(",", " ").split():
            out[part] = None
    return tuple(out)


class UserStore:
    """The users of one broker and what they may do."""

    def __init__(self, *, loopback_users: Iterable[str] = ("guest",)) -> None:
        self.users: dict[str, User] = {}
        self.vhosts: dict[str, VhostInfo] = {}
        self.permissions: dict[tuple[str, str], Permission] = {}
        # (user, vhost) -> exchange -> topic permission
        self.topic_permissions: dict[tuple[str, str], dict[str, TopicPermission]] = {}
        self.loopback_users = frozenset(loopback_users)
        # The broker's connection_max; None = no limit.
        self.connection_max: int | None = None
        # The user ANONYMOUS logs in as (RabbitMQ 4's anonymous_login_user); "" = refused.
        self.anonymous_user = ""
        self.tracker = ConnectionTracker()
        self.generation = 0

    def _changed(self) -> None:
        self.generation += 1

    # -- the boot-time API (the front end and the server call these) ----------------------

    def add(
        self,
        name: str,
        password: str,
        *,
        tags: frozenset[str] | Iterable[str] = (),
        loopback_only: bool = False,
    ) -> User:
        """A user with full permissions on '/' (how users were made before permissions
        existed; tests and embedders use it)."""
        user = self.put_user(name, passwords.hash_password(password), tags=tags)
        self.add_vhost("/", description=DEFAULT_VHOST_DESCRIPTION)
        self.set_permissions(name, "/", FULL_ACCESS, FULL_ACCESS, FULL_ACCESS)
        if loopback_only:
            self.loopback_users = self.loopback_users | {name}
        return user

    @classmethod
    def with_default_user(
        cls,
        name: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's well-known default, loopback-only
        vhosts: tuple[str, ...] = ("/",),
        *,
        loopback_users: Iterable[str] = ("guest",),
    ) -> UserStore:
        """The store a new broker starts with (RabbitMQ's default_user, default_vhost): the
        default user is an administrator with full permissions in every boot vhost."""
        store = cls(loopback_users=loopback_users)
        store.put_user(name, passwords.hash_password(password), tags=(ADMINISTRATOR,))
        for vhost in vhosts:
            store.add_vhost(vhost, description=DEFAULT_VHOST_DESCRIPTION if vhost == "/" else "")
            store.set_permissions(name, vhost, FULL_ACCESS, FULL_ACCESS, FULL_ACCESS)
        return store

    # -- users ------------------------------------------------------------------------------

    def user(self, name: str) -> User:
        try:
            return self.users[name]
        except KeyError:
            raise NoSuchUser(name) from None

    def put_user(
        self,
        name: str,
        password_hash: bytes,
        *,
        hashing_algorithm: str = DEFAULT_ALGORITHM,
        tags: Iterable[str] = (),
        limits: Mapping[str, object] | None = None,
    ) -> User:
        """Create or replace a user from a stored hash (definitions import, boot)."""
        _check_name("user", name)
        try:
            algorithm = passwords.check_algorithm(hashing_algorithm)
        except BadPasswordHash as exc:
            raise InvalidArgument(str(exc)) from None
        user = User(
            name,
            password_hash,
            algorithm,
            _tags(tags),
            kept(self._limits(limits or {}, USER_LIMITS)),
            self,
        )
        self.users[name] = user
        self._changed()
        return user

    def add_user(self, name: str, password: str | None) -> User:
        """rabbitmqctl add_user; ``None`` (or "") makes a user without a password."""
        if name in self.users:
            raise UserExists(name)
        stored = passwords.hash_password(password) if password else b""
        log.debug("creating user '%s'", name)
        return self.put_user(name, stored)

    def delete_user(self, name: str) -> None:
        self.user(name)
        log.debug("deleting user '%s'", name)
        del self.users[name]
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[0] == name]:
            del self.topic_permissions[key]
        self._changed()

    def change_password(self, name: str, password: str) -> None:
        user = self.user(name)
        if not password:
            raise InvalidArgument("a password must not be empty (clear_password removes it)")
        log.debug("changing password for user '%s'", name)
        user.password_hash = passwords.hash_password(password)
        user.hashing_algorithm = DEFAULT_ALGORITHM
        self._changed()

    def clear_password(self, name: str) -> None:
        user = self.user(name)
        log.debug("clearing password for user '%s'", name)
        user.password_hash = b""
        self._changed()

    def set_user_tags(self, name: str, tags: Iterable[str]) -> None:
        user = self.user(name)
        user.tags = _tags(tags)
        log.debug("setting tags for user '%s' to [%s]", name, ", ".join(user.tags))
        self._changed()

    def check_credentials(self, name: str, password: str) -> User:
        """rabbitmqctl authenticate_user: the password only (no address or vhost)."""
        user = self.users.get(name)
        if user is None or not user.check_password(password):
            raise AdminError(f"user '{name}' - invalid credentials")
        return user

    # -- virtual hosts ----------------------------------------------------------------------

    def vhost(self, name: str) -> VhostInfo:
        try:
            return self.vhosts[name]
        except KeyError:
            raise NoSuchVhost(name) from None

    def add_vhost(
        self,
        name: str,
        *,
        description: str = "",
        tags: Iterable[str] = (),
        default_queue_type: str | None = None,
        limits: Mapping[str, object] | None = None,
    ) -> VhostInfo:
        """rabbitmqctl add_vhost: a vhost that exists already is left as it is (its
        description, tags and default queue type are updated if given)."""
        _check_name("vhost", name)
        if default_queue_type is not None and default_queue_type not in QUEUE_TYPES:
            raise InvalidArgument(
                f"default queue type must be one of {', '.join(QUEUE_TYPES)}, "
                f"got '{default_queue_type}'"
            )
        info = self.vhosts.get(name)
        if info is None:
            log.debug("adding vhost '%s'", name)
            info = self.vhosts[name] = VhostInfo(name)
        if description:
            info.description = description
        if tags:
            info.tags = _tags(tags)
        if default_queue_type is not None:
            info.default_queue_type = default_queue_type
        if limits is not None:
            info.limits = kept(self._limits(limits, VHOST_LIMITS))
        self._changed()
        return info

    def delete_vhost(self, name: str) -> None:
        """Forget the vhost and every permission and limit in it (the server removes its
        contents and closes its connections: server/ctl/admin.py)."""
        self.vhost(name)
        log.debug("deleting vhost '%s'", name)
        del self.vhosts[name]
        for key in [k for k in self.permissions if k[1] == name]:
            del self.permissions[key]
        for key in [k for k in self.topic_permissions if k[1] == name]:
            del self.topic_permissions[key]
        self._changed()

    # -- permissions --------------------------------------------------------------------------

    def set_permissions(
        self, user: str, vhost: str, configure: str, write: str, read: str
    ) -> Permission:
        self.user(user)
        self.vhost(vhost)
        try:
            permission = Permission(configure, write, read)
        except InvalidPattern as exc:
            raise InvalidArgument(str(exc)) from None
        log.debug(
            "setting permissions for '%s' in '%s' to '%s', '%s', '%s'",
            user,
            vhost,
            configure,
            write,
            read,
        )
        self.permissions[(user, vhost)] = permission
        self._changed()
        return permission

    def clear_permissions(self, user: str, vhost: str) -> None:
        self.user(user)
        self.vhost(vhost)
        self.permissions.pop((user, vhost), None)
        self._changed()

    def set_topic_permissions(
        self, user: str, vhost: str, exchange: str, write: str, read: str
    ) -> TopicPermission:
        self.user(user)
        self.vhost(vhost)
        try:
            permission = TopicPermission(exchange, write, read)
        except InvalidPattern as exc:
            raise InvalidArgument(str(exc)) from None
        self.topic_permissions.setdefault((user, vhost), {})[exchange] = permission
        self._changed()
        return permission

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        self.user(user)
        self.vhost(vhost)
        if exchange is None:
            self.topic_permissions.pop((user, vhost), None)
        else:
            by_exchange = self.topic_permissions.get((user, vhost), {})
            by_exchange.pop(exchange, None)
            if not by_exchange:
                self.topic_permissions.pop((user, vhost), None)
        self._changed()

    def topic_permission(self, user: str, vhost: str, exchange: str) -> TopicPermission | None:
        return self.topic_permissions.get((user, vhost), {}).get(exchange)

    # -- limits ---------------------------------------------------------------------------------

    @staticmethod
    def _limits(document: str | Mapping[str, object], allowed: tuple[str, ...]) -> dict[str, int]:
        try:
            return parse_limits(document, allowed)
        except InvalidLimits as exc:
            raise InvalidArgument(str(exc)) from None

    def set_vhost_limits(self, vhost: str, document: str | Mapping[str, object]) -> None:
        """rabbitmqctl set_vhost_limits: the given limits replace the vhost's."""
        self.vhost(vhost).limits = kept(self._limits(document, VHOST_LIMITS))
        self._changed()

    def clear_vhost_limits(self, vhost: str) -> None:
        self.vhost(vhost).limits = {}
        self._changed()

    def set_user_limits(self, user: str, document: str | Mapping[str, object]) -> None:
        """rabbitmqctl set_user_limits: the given limits are set, others kept; a negative
        value removes that limit."""
        target = self.user(user)
        for key, value in self._limits(document, USER_LIMITS).items():
            if value < 0:
                target.limits.pop(key, None)
            else:
                target.limits[key] = value
        self._changed()

    def clear_user_limits(self, user: str, name: str = "all") -> None:
        target = self.user(user)
        if name == "all":
            target.limits = {}
        elif name in USER_LIMITS:
            target.limits.pop(name, None)
        else:
            raise InvalidArgument(f"unknown user limit '{name}' (known: {', '.join(USER_LIMITS)})")
        self._changed()
