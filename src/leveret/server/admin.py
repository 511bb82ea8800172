"""What ``leveret ctl`` asks the running broker to do: rabbitmqctl's verbs applied to the
auth registry (``auth.users``), written to ``data_dir/auth.json`` before the answer, and
the parts that need the server: virtual hosts created and deleted in the model (deleting
one closes its connections with 320 and removes its exchanges, queues, bindings and
messages, from disk too), TLS reload, status. Also the registry's boot: ``boot_auth``.

``server/control.py`` carries requests here; ``server/lifecycle.py`` builds the
:class:`Admin` and calls ``boot_auth``. Requests run on the event loop one at a time; the
file write runs in a thread so the loop keeps serving clients meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from leveret import __version__, build_info
from leveret.auth import persist
from leveret.auth.definitions import export_definitions, import_definitions, load_store
from leveret.auth.users import AdminError, InvalidArgument, UserStore
from leveret.server.listeners import TlsError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable
    from pathlib import Path

    from leveret.config import Settings
    from leveret.model.broker import Broker
    from leveret.model.vhost import VirtualHost
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.listeners import TlsContexts

log = logging.getLogger("leveret.admin")


class AuthBootError(Exception):
    """The auth registry cannot be loaded; the broker does not start."""


def boot_auth(users: UserStore, broker: Broker, data_dir: Path, settings: Settings) -> None:
    """Load ``auth.json``, or on a new data directory make RabbitMQ's first-boot state
    (the default user, an administrator with full permissions in every ``vhosts`` vhost
    and in every vhost recovered from the store); then make the model's vhosts the
    registry's: a vhost recovered from the store that the registry no longer has was
    deleted before a crash finished removing its contents, which happens now."""
    path = data_dir / persist.AUTH_FILE
    try:
        loaded = persist.load(path, users)
    except persist.AuthFileError as exc:
        raise AuthBootError(str(exc)) from None
    if not loaded:
        # The store may hold vhosts from before auth.json existed: keep them.
        recovered = [name for name, vhost in broker.vhosts.items() if _has_contents(vhost)]
        seeded = UserStore.with_default_user(
            settings.default_user,
            settings.default_pass,
            tuple(dict.fromkeys((*settings.vhosts, *recovered))),
            loopback_users=settings.loopback_users,
        )
        load_store(users, persist.snapshot(seeded))
        try:
            persist.save(path, persist.snapshot(users))
        except OSError as exc:
            raise AuthBootError(f"cannot write {path}: {exc.strerror}") from None
        log.info(
            "new data directory: created user '%s' and vhosts %s",
            settings.default_user,
            ", ".join(sorted(users.vhosts)),
        )
    for name in [v for v in broker.vhosts if v not in users.vhosts]:
        log.warning("vhost '%s' was deleted; removing what was left of it", name)
        remove_vhost_contents(broker, name)
    for name in users.vhosts:
        broker.add_vhost(name)


def _has_contents(vhost: VirtualHost) -> bool:
    return bool(vhost.queues) or any(n and not n.startswith("amq.") for n in vhost.exchanges)


def remove_vhost_contents(broker: Broker, name: str) -> None:
    """Delete every queue (with its messages) and exchange of vhost ``name``, through the
    model's public calls so the store records it, then forget the vhost."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        return
    for queue in list(vhost.queues.values()):
        vhost.remove_queue(queue)
    for exchange in list(vhost.exchanges):
        if exchange and not exchange.startswith("amq."):
            vhost.delete_exchange(exchange)
    del broker.vhosts[name]


class AdminHost(Protocol):
    """What the admin needs of the running server (``server.lifecycle.Server``)."""

    settings: Settings
    broker: Broker
    users: UserStore
    connections: set[ConnectionProtocol]
    tls: TlsContexts | None
    listening: list[str]
    started_at: float
    data_path: Path


@dataclass
class Reply:
    ok: bool
    result: Any = None
    error: str = ""
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "result": self.result, "error": self.error, "code": self.exit_code}


def _arg(args: dict[str, Any], name: str, default: Any = ...) -> Any:
    if name in args:
        return args[name]
    if default is ...:
        raise InvalidArgument(f"missing argument '{name}'")
    return default


def _str_arg(args: dict[str, Any], name: str, default: str | None = None) -> str:
    value = _arg(args, name, default if default is not None else ...)
    if not isinstance(value, str):
        raise InvalidArgument(f"argument '{name}' must be a string")
    return value


def _vhost_of(conn: ConnectionProtocol) -> str | None:
    # Known once the connection is open (its shell's introspection record).
    shell = conn.shell
    return shell.info.vhost if shell is not None and shell.opened else None


@dataclass
class Admin:
    """The verbs, by name: its own (users, vhosts, permissions, limits, definitions of the
    auth part, TLS) and the tables that the server registers from the modules above this
    one (``admin_entities.entity_verbs``, ``admin_messages.message_verbs``)."""

    host: AdminHost
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    verbs: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = field(init=False)

    def __post_init__(self) -> None:
        self.verbs = self._own_verbs()

    def register(self, verbs: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]) -> None:
        """Add (or replace) verbs by name."""
        self.verbs.update(verbs)

    async def handle(self, verb: str, args: dict[str, Any]) -> Reply:
        handler = self.verbs.get(verb)
        if handler is None:
            return Reply(False, error=f"unknown command '{verb}'", exit_code=64)
        async with self.lock:
            try:
                result = await handler(args)
            except AdminError as exc:
                return Reply(False, error=str(exc), exit_code=exc.exit_code)
        return Reply(True, result)

    def _own_verbs(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        return {
            "status": self.status,
            "add_user": self.add_user,
            "delete_user": self.delete_user,
            "change_password": self.change_password,
            "clear_password": self.clear_password,
            "set_user_tags": self.set_user_tags,
            "list_users": self.list_users,
            "authenticate_user": self.authenticate_user,
            "add_vhost": self.add_vhost,
            "delete_vhost": self.delete_vhost,
            "list_vhosts": self.list_vhosts,
            "set_permissions": self.set_permissions,
            "clear_permissions": self.clear_permissions,
            "list_permissions": self.list_permissions,
            "list_user_permissions": self.list_user_permissions,
            "set_topic_permissions": self.set_topic_permissions,
            "clear_topic_permissions": self.clear_topic_permissions,
            "list_topic_permissions": self.list_topic_permissions,
            "list_user_topic_permissions": self.list_user_topic_permissions,
            "set_vhost_limits": self.set_vhost_limits,
            "clear_vhost_limits": self.clear_vhost_limits,
            "list_vhost_limits": self.list_vhost_limits,
            "set_user_limits": self.set_user_limits,
            "clear_user_limits": self.clear_user_limits,
            "list_user_limits": self.list_user_limits,
            "import_definitions": self.import_definitions,
            "export_definitions": self.export_definitions,
            "reload_tls": self.reload_tls,
        }

    @property
    def users(self) -> UserStore:
        return self.host.users

    async def _change(self, change: Callable[[], object]) -> None:
        """Make ``change`` and write it to disk; if the write fails, undo it."""
        before = persist.snapshot(self.users)
        change()
        after = persist.snapshot(self.users)
        try:
            await asyncio.to_thread(persist.save, self.host.data_path / persist.AUTH_FILE, after)
        except OSError as exc:
            load_store(self.users, before)
            raise AdminError(f"change not made: cannot write auth.json: {exc.strerror}") from None

    # -- users ------------------------------------------------------------------------------

    async def add_user(self, args: dict[str, Any]) -> None:
        name, password = _str_arg(args, "user"), _str_arg(args, "password", "")
        await self._change(lambda: self.users.add_user(name, password or None))

    async def delete_user(self, args: dict[str, Any]) -> None:
        name = _str_arg(args, "user")
        await self._change(lambda: self.users.delete_user(name))

    async def change_password(self, args: dict[str, Any]) -> None:
        name, password = _str_arg(args, "user"), _str_arg(args, "password")
        await self._change(lambda: self.users.change_password(name, password))

    async def clear_password(self, args: dict[str, Any]) -> None:
        name = _str_arg(args, "user")
        await self._change(lambda: self.users.clear_password(name))

    async def set_user_tags(self, args: dict[str, Any]) -> None:
        name, tags = _str_arg(args, "user"), _arg(args, "tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InvalidArgument("tags must be a list of strings")
        await self._change(lambda: self.users.set_user_tags(name, tags))

    async def list_users(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"user": u.name, "tags": list(u.tags)}
            for u in sorted(self.users.users.values(), key=lambda u: u.name)
        ]

    async def authenticate_user(self, args: dict[str, Any]) -> str:
        self.users.check_credentials(_str_arg(args, "user"), _str_arg(args, "password"))
        return "Success"

    # -- vhosts -------------------------------------------------------------------------------

    async def add_vhost(self, args: dict[str, Any]) -> None:
        name = _str_arg(args, "vhost")
        description = _str_arg(args, "description", "")
        tags = _arg(args, "tags", [])
        queue_type = _arg(args, "default_queue_type", None)
        if queue_type is not None and not isinstance(queue_type, str):
            raise InvalidArgument("default_queue_type must be a string")
        await self._change(
            lambda: self.users.add_vhost(
                name, description=description, tags=tags, default_queue_type=queue_type
            )
        )
        self.host.broker.add_vhost(name)

    async def delete_vhost(self, args: dict[str, Any]) -> None:
        name = _str_arg(args, "vhost")
        # The registry's change is on disk first: if the broker dies while the contents go,
        # the next boot finishes the job (boot_auth).
        await self._change(lambda: self.users.delete_vhost(name))
        text = f"vhost '{name}' is deleted"
        for conn in list(self.host.connections):
            if _vhost_of(conn) == name:
                conn.shutdown(text)  # 320 CONNECTION_FORCED; its model side is released now
        remove_vhost_contents(self.host.broker, name)

    async def list_vhosts(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "name": v.name,
                "description": v.description,
                "tags": list(v.tags),
                "default_queue_type": v.default_queue_type or "undefined",
            }
            for v in sorted(self.users.vhosts.values(), key=lambda v: v.name)
        ]

    # -- permissions ----------------------------------------------------------------------------

    async def set_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        conf, write, read = (_str_arg(args, k) for k in ("configure", "write", "read"))
        await self._change(lambda: self.users.set_permissions(user, vhost, conf, write, read))

    async def clear_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        await self._change(lambda: self.users.clear_permissions(user, vhost))

    async def list_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = _str_arg(args, "vhost", "/")
        self.users.vhost(vhost)
        return [
            {"user": u, "configure": p.configure, "write": p.write, "read": p.read}
            for (u, v), p in sorted(self.users.permissions.items())
            if v == vhost
        ]

    async def list_user_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        user = _str_arg(args, "user")
        self.users.user(user)
        return [
            {"vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
            for (u, v), p in sorted(self.users.permissions.items())
            if u == user
        ]

    async def set_topic_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        exchange, write, read = (_str_arg(args, k) for k in ("exchange", "write", "read"))
        await self._change(
            lambda: self.users.set_topic_permissions(user, vhost, exchange, write, read)
        )

    async def clear_topic_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        exchange = _arg(args, "exchange", None)
        await self._change(lambda: self.users.clear_topic_permissions(user, vhost, exchange))

    def _topic_rows(self, keep: Callable[[str, str], bool]) -> Iterable[dict[str, Any]]:
        for (user, vhost), by_exchange in sorted(self.users.topic_permissions.items()):
            if keep(user, vhost):
                for exchange, t in sorted(by_exchange.items()):
                    row = {"user": user, "vhost": vhost, "exchange": exchange}
                    yield {**row, "write": t.write, "read": t.read}

    async def list_topic_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = _str_arg(args, "vhost", "/")
        self.users.vhost(vhost)
        return [
            {k: row[k] for k in ("user", "exchange", "write", "read")}
            for row in self._topic_rows(lambda _u, v: v == vhost)
        ]

    async def list_user_topic_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        user = _str_arg(args, "user")
        self.users.user(user)
        return [
            {k: row[k] for k in ("vhost", "exchange", "write", "read")}
            for row in self._topic_rows(lambda u, _v: u == user)
        ]

    # -- limits ---------------------------------------------------------------------------------

    async def set_vhost_limits(self, args: dict[str, Any]) -> None:
        vhost, limits = _str_arg(args, "vhost", "/"), _str_arg(args, "limits")
        await self._change(lambda: self.users.set_vhost_limits(vhost, limits))

    async def clear_vhost_limits(self, args: dict[str, Any]) -> None:
        vhost = _str_arg(args, "vhost", "/")
        await self._change(lambda: self.users.clear_vhost_limits(vhost))

    async def list_vhost_limits(self, args: dict[str, Any]) -> Any:
        if _arg(args, "global", False):
            return [
                {"vhost": v.name, "limits": dict(sorted(v.limits.items()))}
                for v in sorted(self.users.vhosts.values(), key=lambda v: v.name)
                if v.limits
            ]
        return dict(sorted(self.users.vhost(_str_arg(args, "vhost", "/")).limits.items()))

    async def set_user_limits(self, args: dict[str, Any]) -> None:
        user, limits = _str_arg(args, "user"), _str_arg(args, "limits")
        await self._change(lambda: self.users.set_user_limits(user, limits))

    async def clear_user_limits(self, args: dict[str, Any]) -> None:
        user, name = _str_arg(args, "user"), _str_arg(args, "limit", "all")
        await self._change(lambda: self.users.clear_user_limits(user, name))

    async def list_user_limits(self, args: dict[str, Any]) -> Any:
        user = _arg(args, "user", None)
        if user is None:
            return [
                {"user": u.name, "limits": dict(sorted(u.limits.items()))}
                for u in sorted(self.users.users.values(), key=lambda u: u.name)
                if u.limits
            ]
        return dict(sorted(self.users.user(str(user)).limits.items()))

    # -- definitions, TLS, status ------------------------------------------------------------------

    async def import_definitions(self, args: dict[str, Any]) -> dict[str, Any]:
        doc = _arg(args, "definitions")
        summary = None

        def change() -> None:
            nonlocal summary
            summary = import_definitions(self.users, doc)

        await self._change(change)
        for name in self.users.vhosts:
            self.host.broker.add_vhost(name)
        assert summary is not None
        return {
            "users": summary.users,
            "vhosts": summary.vhosts,
            "permissions": summary.permissions,
            "topic_permissions": summary.topic_permissions,
            "limits": summary.limits,
            "skipped": summary.skipped,
        }

    async def export_definitions(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "leveret_version": __version__,
            **export_definitions(self.users),
        }

    async def reload_tls(self, args: dict[str, Any]) -> dict[str, Any]:
        tls = self.host.tls
        if tls is None:
            raise AdminError("TLS is not configured (tls_certfile is not set)")
        try:
            state = await asyncio.to_thread(tls.reload)
        except TlsError as exc:
            raise AdminError(f"{exc}; the certificates in use are kept") from None
        return {"certfile": state.certfile, "reloads": state.reloads}

    async def status(self, args: dict[str, Any]) -> dict[str, Any]:
        host = self.host
        tls = host.tls
        return {
            "pid": os.getpid(),
            "version": __version__,
            "build": build_info.describe(),
            "uptime_seconds": round(time.time() - host.started_at, 1),
            "listeners": list(host.listening),
            "data_dir": str(host.data_path),
            "connections": len(host.connections),
            "users": len(host.users.users),
            "vhosts": len(host.users.vhosts),
            "tls": None
            if tls is None
            else {"certfile": tls.state.certfile, "reloads": tls.state.reloads},
        }
