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
from leveret.server.runtime import binding_rows, export_all, import_entities, json_value

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.server.admin import Admin
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.runtime import Runtime


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
    transport = conn.transport
    local = transport.get_extra_info("sockname") if transport is not None else None
    if not local:
        return conn.peer
    host, port = local[0], local[1]
    shown = f"[{host}]" if ":" in host else host
    return f"{conn.peer} -> {shown}:{port}"


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
            front = conn.amqp
            client = getattr(front, "client", None) if front is not None else None
            out.append(
                (
                    conn,
                    {
                        "name": connection_name(conn),
                        "user": client.user if client is not None else "",
                        "vhost": client.vhost.name if client is not None else "",
                        "peer_host": conn.peer.rpartition(":")[0].strip("[]"),
                        "peer_port": int(conn.peer.rpartition(":")[2] or 0)
                        if conn.peer.rpartition(":")[2].isdigit()
                        else 0,
                        "state": "running" if client is not None else "starting",
                        "channels": len(client.sessions) if client is not None else 0,
                        "recv_oct": conn.recv_oct,
                        "send_oct": conn.send_oct,
                        "protocol": getattr(front, "PROTOCOL_NAME", "AMQP 0-9-1"),
                    },
                )
            )
        return out

    async def list_connections(args: dict[str, Any]) -> list[dict[str, Any]]:
        return [row for _conn, row in connection_rows()]

    def sessions() -> list[tuple[dict[str, Any], int, Any]]:
        out = []
        for conn, row in connection_rows():
            client = getattr(conn.amqp, "client", None)
            if client is not None:
                for number, session in sorted(client.sessions.items()):
                    out.append((row, number, session))
        return out

    async def list_channels(args: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "name": f"{row['name']} ({number})",
                "connection": row["name"],
                "number": number,
                "user": row["user"],
                "vhost": row["vhost"],
                "consumer_count": len(getattr(session, "consumers", {}) or {}),
                "messages_unacknowledged": len(getattr(session, "unacked", {}) or {}),
                "prefetch_count": getattr(session, "prefetch_count", 0),
                "confirm": getattr(getattr(session, "publisher", None), "confirms", None)
                is not None,
                "transactional": getattr(getattr(session, "publisher", None), "tx", None)
                is not None,
            }
            for row, number, session in sessions()
        ]

    async def list_consumers(args: dict[str, Any]) -> list[dict[str, Any]]:
        vhost = _str(args, "vhost", "/")
        return [
            {
                "queue_name": consumer.queue.name,
                "channel_pid": f"{row['name']} ({number})",
                "consumer_tag": consumer.tag,
                "ack_required": not consumer.auto_settle,
                "prefetch_count": getattr(session, "prefetch_count", 0),
                "active": True,
                "arguments": json_value(dict(consumer.arguments)),
            }
            for row, number, session in sessions()
            if row["vhost"] == vhost
            for consumer in (getattr(session, "consumers", {}) or {}).values()
        ]

    async def purge_queue(args: dict[str, Any]) -> int:
        vhost = vhost_of(args)
        name = _str(args, "queue")
        queue = vhost.queues.get(name)
        if queue is None:
            raise AdminError(f"Queue '{name}' in vhost '{vhost.name}' does not exist")
        if not queue.type.purges:
            raise AdminError(f"purge is not supported by {queue.type.name} queues")
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
