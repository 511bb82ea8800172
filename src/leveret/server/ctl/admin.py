"""What ``leveret ctl`` asks the running broker to do: rabbitmqctl's verbs applied to the
auth registry (``auth.users``), written to ``data_dir/auth.json`` before the answer, and
the parts that need the server: virtual hosts created and deleted in the model (deleting
one closes its connections with 320 and removes its exchanges, queues, bindings and
messages, from disk too), TLS reload, status.

``server/ctl/unix_socket.py`` carries requests here; ``server/server.py`` builds the
:class:`Admin`. Requests run on the event loop one at a time; the
file write runs in a thread so the loop keeps serving clients meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from leveret import __version__, build_info
from leveret.auth import persist
from leveret.auth.definitions import export_definitions, import_definitions, load_store
from leveret.auth.users import AdminError, InvalidArgument, UserStore
from leveret.server.auth_boot import remove_vhost_contents
from leveret.server.listeners import TlsError
from leveret.server.rows import permission_rows, topic_permission_rows, user_row, vhost_row

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from leveret.config import Settings
    from leveret.model.broker import Broker
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.listeners import Reloadable, TlsContexts


class AdminHost(Protocol):
    """What the admin needs of the running server (``server.server.Server``)."""

    settings: Settings
    broker: Broker
    users: UserStore
    connections: set[ConnectionProtocol]
    tls: TlsContexts | None
    link_tls: Reloadable | None
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
    one (``ctl/entities.py``, ``ctl/messages.py``, ``ctl/streams.py``)."""

    host: AdminHost
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Where registry changes go instead of auth.json on a cluster node (cluster/node.py).
    changer: Callable[[Callable[[UserStore], object]], Awaitable[object]] | None = None
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

    async def _change(self, change: Callable[[UserStore], object]) -> None:
        """Make ``change`` to the registry and write it to disk; if the write fails, undo
        it. On a cluster node, ``changer`` makes it in etcd instead (every node applies
        it, this one before the answer: ``cluster/metadata.py``)."""
        if self.changer is not None:
            await self.changer(change)
            return
        before = persist.snapshot(self.users)
        change(self.users)
        after = persist.snapshot(self.users)
        try:
            await asyncio.to_thread(persist.save, self.host.data_path / persist.AUTH_FILE, after)
        except OSError as exc:
            load_store(self.users, before)
            raise AdminError(f"change not made: cannot write auth.json: {exc.strerror}") from None

    # -- users ------------------------------------------------------------------------------

    async def add_user(self, args: dict[str, Any]) -> None:
        name, password = _str_arg(args, "user"), _str_arg(args, "password", "")
        await self._change(lambda users: users.add_user(name, password or None))

    async def delete_user(self, args: dict[str, Any]) -> None:
        name = _str_arg(args, "user")
        await self._change(lambda users: users.delete_user(name))

    async def change_password(self, args: dict[str, Any]) -> None:
        name, password = _str_arg(args, "user"), _str_arg(args, "password")
        await self._change(lambda users: users.change_password(name, password))

    async def clear_password(self, args: dict[str, Any]) -> None:
        name = _str_arg(args, "user")
        await self._change(lambda users: users.clear_password(name))

    async def set_user_tags(self, args: dict[str, Any]) -> None:
        name, tags = _str_arg(args, "user"), _arg(args, "tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InvalidArgument("tags must be a list of strings")
        await self._change(lambda users: users.set_user_tags(name, tags))

    async def list_users(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"user": row["name"], "tags": row["tags"]}
            for row in (user_row(self.users.users[n]) for n in sorted(self.users.users))
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
            lambda users: users.add_vhost(
                name, description=description, tags=tags, default_queue_type=queue_type
            )
        )
        self.host.broker.add_vhost(name)

    async def delete_vhost(self, args: dict[str, Any]) -> None:
        name = _str_arg(args, "vhost")
        # The registry's change is on disk first: if the broker dies while the contents go,
        # the next boot finishes the job (boot_auth).
        await self._change(lambda users: users.delete_vhost(name))
        text = f"vhost '{name}' is deleted"
        for conn in list(self.host.connections):
            if _vhost_of(conn) == name:
                conn.shutdown(text)  # 320 CONNECTION_FORCED; its model side is released now
        remove_vhost_contents(self.host.broker, name)

    async def list_vhosts(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        columns = ("name", "description", "tags", "default_queue_type")
        return [
            {c: row[c] for c in columns}
            for row in (vhost_row(self.users.vhosts[n]) for n in sorted(self.users.vhosts))
        ]

    # -- permissions ----------------------------------------------------------------------------

    async def set_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        conf, write, read = (_str_arg(args, k) for k in ("configure", "write", "read"))
        await self._change(lambda users: users.set_permissions(user, vhost, conf, write, read))

    async def clear_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        await self._change(lambda users: users.clear_permissions(user, vhost))

    async def list_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = _str_arg(args, "vhost", "/")
        self.users.vhost(vhost)
        columns = ("user", "configure", "write", "read")
        return [{c: row[c] for c in columns} for row in permission_rows(self.users, vhost=vhost)]

    async def list_user_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        user = _str_arg(args, "user")
        self.users.user(user)
        columns = ("vhost", "configure", "write", "read")
        return [{c: row[c] for c in columns} for row in permission_rows(self.users, user=user)]

    async def set_topic_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        exchange, write, read = (_str_arg(args, k) for k in ("exchange", "write", "read"))
        await self._change(
            lambda users: users.set_topic_permissions(user, vhost, exchange, write, read)
        )

    async def clear_topic_permissions(self, args: dict[str, Any]) -> None:
        user, vhost = _str_arg(args, "user"), _str_arg(args, "vhost", "/")
        exchange = _arg(args, "exchange", None)
        await self._change(lambda users: users.clear_topic_permissions(user, vhost, exchange))

    async def list_topic_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = _str_arg(args, "vhost", "/")
        self.users.vhost(vhost)
        return [
            {k: row[k] for k in ("user", "exchange", "write", "read")}
            for row in topic_permission_rows(self.users, vhost=vhost)
        ]

    async def list_user_topic_permissions(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        user = _str_arg(args, "user")
        self.users.user(user)
        return [
            {k: row[k] for k in ("vhost", "exchange", "write", "read")}
            for row in topic_permission_rows(self.users, user=user)
        ]

    # -- limits ---------------------------------------------------------------------------------

    async def set_vhost_limits(self, args: dict[str, Any]) -> None:
        vhost, limits = _str_arg(args, "vhost", "/"), _str_arg(args, "limits")
        await self._change(lambda users: users.set_vhost_limits(vhost, limits))

    async def clear_vhost_limits(self, args: dict[str, Any]) -> None:
        vhost = _str_arg(args, "vhost", "/")
        await self._change(lambda users: users.clear_vhost_limits(vhost))

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
        await self._change(lambda users: users.set_user_limits(user, limits))

    async def clear_user_limits(self, args: dict[str, Any]) -> None:
        user, name = _str_arg(args, "user"), _str_arg(args, "limit", "all")
        await self._change(lambda users: users.clear_user_limits(user, name))

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

        def change(users: UserStore) -> None:
            nonlocal summary
            summary = import_definitions(users, doc)

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
        """The amqps listener's files and the inter-node link's (``cluster_tls_*``)."""
        tls, link_tls = self.host.tls, self.host.link_tls
        if tls is None and link_tls is None:
            raise AdminError(
                "TLS is not configured (tls_certfile and cluster_tls_certfile are not set)"
            )
        result: dict[str, Any] = {}
        for prefix, what in (("", tls), ("cluster_", link_tls)):
            if what is None:
                continue
            try:
                state = await asyncio.to_thread(what.reload)
            except TlsError as exc:
                raise AdminError(f"{exc}; the certificates in use are kept") from None
            result[f"{prefix}certfile"] = state.certfile
            result[f"{prefix}reloads"] = state.reloads
            closed = what.after_reload()
            if closed:
                result[f"{prefix}links_closed"] = closed
        return result

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
