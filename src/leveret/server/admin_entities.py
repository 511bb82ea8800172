"""The ``leveret ctl`` verbs about what is inside the vhosts (rabbitmqctl's
``list_queues``, ``list_exchanges``, ``list_bindings``, ``list_connections``,
``list_channels``, ``list_consumers``, ``purge_queue``, ``delete_queue``,
``close_connection``, ``set_policy``/``clear_policy``/``list_policies`` and their
operator-policy twins) and the whole definitions document (``export_definitions`` /
``import_definitions`` with queues, exchanges, bindings, policies and parameters).

``server/lifecycle.py`` registers these with ``server/admin.py``'s ``Admin``
(``entity_verbs``); the management API uses ``import_document`` for ``POST
/api/definitions`` and boot for ``load_definitions``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.auth.users import AdminError, InvalidArgument
from leveret.errors import AMQPError
from leveret.model.stream import StreamQueue
from leveret.server.runtime import binding_rows, export_all, import_entities, json_value

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.server.admin import Admin
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.runtime import Runtime
    from leveret.server.shell.info import ChannelInfo


def _runtime(admin: Admin) -> Runtime:
    runtime = getattr(admin.host, "runtime", None)
    if runtime is None:
        raise AdminError("this broker has no runtime parameters")
    return runtime  # type: ignore[no-any-return]


def _str(args: dict[str, Any], name: str, default: str | None = None) -> str:
    value = args.get(name, default)
    if not isinstance(value, str):
        raise InvalidArgument(f"argument '{name}' must be a string")
    return value


async def import_document(host: Any, doc: object, vhost: str | None = None) -> dict[str, int]:
    """Import a definitions document (the caller holds ``host.admin.lock``): the auth part
    first (users, vhosts, permissions, limits: all or nothing), then parameters and
    policies, then exchanges, queues and bindings (an error there leaves what was
    declared before it)."""
    if not isinstance(doc, dict):
        raise InvalidArgument("definitions must be a JSON object")
    admin: Admin = host.admin
    runtime = _runtime(admin)
    if vhost is None:
        keys = ("users", "vhosts", "permissions", "topic_permissions", "parameters")
        await admin.import_definitions({"definitions": {k: doc[k] for k in keys if k in doc}})
        runtime.load(doc)
    else:
        runtime.load(
            {
                "policies": [{**p, "vhost": vhost} for p in doc.get("policies") or []],
                "parameters": [{**p, "vhost": vhost} for p in doc.get("parameters") or []],
            }
        )
    counts = import_entities(runtime.broker, doc, vhost)
    await runtime.save()
    return {"queues": counts.queues, "exchanges": counts.exchanges, "bindings": counts.bindings}


def connection_name(conn: ConnectionProtocol) -> str:
    """RabbitMQ's connection name: ``peer -> local address``."""
    shell = conn.shell
    return shell.info.name if shell is not None else conn.peer


def entity_verbs(admin: Admin) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
    host = admin.host

    def vhost_of(args: dict[str, Any]) -> Any:
        name = _str(args, "vhost", "/")
        vhost = host.broker.vhosts.get(name)
        if vhost is None:
            raise AdminError(f"Virtual host '{name}' does not exist")
        return vhost

    async def list_queues(args: dict[str, Any]) -> list[dict[str, Any]]:
        rows = []
        for queue in sorted(vhost_of(args).queues.values(), key=lambda q: q.name):
            ready, unacked = queue.message_count, queue.unacked_count
            rows.append(
                {
                    "name": queue.name,
                    "messages": ready + unacked,
                    "messages_ready": ready,
                    "messages_unacknowledged": unacked,
                    "consumers": len(queue.consumers),
                    "durable": queue.durable,
                    "auto_delete": queue.auto_delete,
                    "exclusive": queue.exclusive,
                    "arguments": json_value(dict(queue.arguments)),
                    "policy": queue.policy or "",
                    "operator_policy": queue.operator_policy or "",
                    "effective_policy_definition": json_value(queue.policy_definition),
                    "type": queue.config.queue_type,
                    "state": "running",
                    "vhost": queue.vhost_name,
                }
            )
        return rows

    async def list_exchanges(args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = vhost_of(args)
        return [
            {
                "name": name,
                "type": x.type_name,
                "durable": x.durable,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": json_value(dict(x.arguments)),
                "policy": x.policy or "",
                "vhost": vhost.name,
            }
            for name, x in sorted(vhost.exchanges.items())
        ]

    async def list_bindings(args: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "source_name": row["source"],
                "source_kind": "exchange",
                "destination_name": row["destination"],
                "destination_kind": row["destination_type"],
                "routing_key": row["routing_key"],
                "arguments": row["arguments"],
                "vhost": row["vhost"],
            }
            for row in binding_rows(vhost_of(args))
        ]

    def connection_rows() -> list[tuple[Any, dict[str, Any]]]:
        out = []
        for conn in sorted(host.connections, key=lambda c: c.connected_at):
            shell = conn.shell
            if shell is None:
                continue
            info = shell.info
            out.append(
                (
                    conn,
                    {
                        "name": info.name,
                        "user": info.user,
                        "vhost": info.vhost,
                        "peer_host": info.peer_host,
                        "peer_port": info.peer_port,
                        "state": info.state,
                        "channels": len(shell.channels()),
                        "recv_oct": info.recv_oct,
                        "send_oct": info.send_oct,
                        "protocol": info.protocol,
                        "auth_mechanism": info.auth_mechanism,
                    },
                )
            )
        return out

    async def list_connections(args: dict[str, Any]) -> list[dict[str, Any]]:
        return [row for _conn, row in connection_rows()]

    def sessions() -> list[tuple[dict[str, Any], ChannelInfo]]:
        out: list[tuple[dict[str, Any], ChannelInfo]] = []
        for conn, row in connection_rows():
            shell = conn.shell
            if shell is not None:
                out.extend((row, channel) for channel in shell.channels())
        return out

    async def list_channels(args: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "name": f"{row['name']} ({channel.number})",
                "connection": row["name"],
                "number": channel.number,
                "user": row["user"],
                "vhost": row["vhost"],
                "consumer_count": len(channel.consumers),
                "messages_unacknowledged": channel.unacked,
                "prefetch_count": channel.prefetch_count,
                "confirm": channel.confirm,
                "transactional": channel.transactional,
            }
            for row, channel in sessions()
        ]

    async def list_consumers(args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = _str(args, "vhost", "/")
        return [
            {
                "queue_name": consumer.queue.name,
                "channel_pid": f"{row['name']} ({channel.number})",
                "consumer_tag": consumer.tag,
                "ack_required": not consumer.auto_settle,
                "prefetch_count": channel.prefetch_count,
                "active": True,
                "arguments": json_value(dict(consumer.arguments)),
            }
            for row, channel in sessions()
            if row["vhost"] == vhost
            for consumer in channel.consumers.values()
        ]

    async def purge_queue(args: dict[str, Any]) -> int:
        vhost = vhost_of(args)
        name = _str(args, "queue")
        queue = vhost.queues.get(name)
        if queue is None:
            raise AdminError(f"Queue '{name}' in vhost '{vhost.name}' does not exist")
        if isinstance(queue, StreamQueue):
            raise AdminError("purge is not supported by stream queues")
        return int(queue.purge())

    async def delete_queue(args: dict[str, Any]) -> int:
        vhost = vhost_of(args)
        name = _str(args, "queue")
        queue = vhost.queues.get(name)
        if queue is None:
            raise AdminError(f"Queue '{name}' in vhost '{vhost.name}' does not exist")
        try:
            return int(
                vhost.delete_queue(
                    name,
                    owner=queue.exclusive_owner,
                    if_unused=bool(args.get("if_unused")),
                    if_empty=bool(args.get("if_empty")),
                )
            )
        except AMQPError as exc:
            raise AdminError(exc.reply_text) from None

    async def close_connection(args: dict[str, Any]) -> None:
        name = _str(args, "connection")
        reason = _str(args, "reason", "Closed via leveret ctl")
        for conn, row in connection_rows():
            if row["name"] == name or conn.peer == name:
                conn.shutdown(reason)
                return
        raise AdminError(f"Connection '{name}' does not exist")

    def policy_verbs(operator: bool) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
        async def set_policy(args: dict[str, Any]) -> None:
            runtime = _runtime(admin)
            runtime.set_policy(
                _str(args, "vhost", "/"),
                _str(args, "name"),
                args.get("pattern"),
                args.get("definition"),
                args.get("priority", 0),
                args.get("apply_to", "all"),
                operator=operator,
            )
            await runtime.save()

        async def clear_policy(args: dict[str, Any]) -> None:
            runtime = _runtime(admin)
            runtime.clear_policy(_str(args, "vhost", "/"), _str(args, "name"), operator=operator)
            await runtime.save()

        async def list_policies(args: dict[str, Any]) -> list[dict[str, Any]]:
            vhost = _str(args, "vhost", "/")
            return [
                {
                    "vhost": p["vhost"],
                    "name": p["name"],
                    "pattern": p["pattern"],
                    "apply-to": p["apply-to"],
                    "definition": p["definition"],
                    "priority": p["priority"],
                }
                for p in _runtime(admin).policies(vhost, operator=operator)
            ]

        prefix = "operator_policy" if operator else "policy"
        plural = "operator_policies" if operator else "policies"
        return {
            f"set_{prefix}": set_policy,
            f"clear_{prefix}": clear_policy,
            f"list_{plural}": list_policies,
        }

    async def export_definitions(args: dict[str, Any]) -> dict[str, Any]:
        return export_all(host.users, _runtime(admin))

    async def import_definitions(args: dict[str, Any]) -> dict[str, Any]:
        doc = args.get("definitions")
        counts = await import_document(host, doc) if hasattr(host, "admin") else {}
        return {"imported": counts}

    verbs: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
        "list_queues": list_queues,
        "list_exchanges": list_exchanges,
        "list_bindings": list_bindings,
        "list_connections": list_connections,
        "list_channels": list_channels,
        "list_consumers": list_consumers,
        "purge_queue": purge_queue,
        "delete_queue": delete_queue,
        "close_connection": close_connection,
        **policy_verbs(False),
        **policy_verbs(True),
    }
    if getattr(host, "runtime", None) is not None and getattr(host, "admin", None) is admin:
        verbs["export_definitions"] = export_definitions
        verbs["import_definitions"] = import_definitions
    return verbs
