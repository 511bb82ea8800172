"""The rows every listing shows, computed once: queues, exchanges, bindings, connections,
channels, consumers, vhosts, users and permissions, with RabbitMQ's field names.

The management API (``management/shapes.py``) returns these rows with its statistics added;
``leveret ctl`` (``server/ctl/``) shows a projection of them, rabbitmqctl's columns
(``ctl/entities.py``, ``ctl/admin.py``); the definitions export (``definitions.py``) reuses
the binding rows. Here because both stand on it: ``management/`` is above ``server/``.
"""

from __future__ import annotations

import datetime
import decimal
import socket
from typing import TYPE_CHECKING, Any

from leveret.auth import passwords

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.auth.users import User, UserStore, VhostInfo
    from leveret.model.exchange import Exchange
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.shell.info import ChannelInfo

# This node's name, as RabbitMQ's ``rabbit@host``; a cluster node's ``--node-name``, which
# ``server/server.py`` sets when it is built (one node per process).
NODE = f"leveret@{socket.gethostname()}"


def set_node_name(name: str) -> None:
    """Name the rows' ``node`` (and the management API's node) after this node."""
    global NODE
    NODE = name


def json_value(value: object) -> Any:
    """A field-table value as JSON (longstr bytes as text, decimals and timestamps as
    numbers), as RabbitMQ shows arguments and headers."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def properties_key(routing_key: str, arguments: Mapping[str, object]) -> str:
    """RabbitMQ's binding id in URLs: the routing key, or it plus a hash of the arguments
    (``~`` + a base64 of its digest); ``~`` alone for an empty key."""
    import base64
    import hashlib

    if not arguments:
        return routing_key.replace("%", "%25") if routing_key else "~"
    digest = hashlib.md5(  # noqa: S324 - an id, not security
        repr(sorted((k, repr(v)) for k, v in arguments.items())).encode()
    ).digest()
    return f"{routing_key}~{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def binding_rows(vhost: VirtualHost) -> list[dict[str, Any]]:
    """Every binding of a vhost, RabbitMQ's way: the default exchange's implicit ones first."""
    from leveret.model.exchange import Exchange
    from leveret.model.queues.base import Queue

    rows: list[dict[str, Any]] = [
        {
            "source": "",
            "vhost": vhost.name,
            "destination": name,
            "destination_type": "queue",
            "routing_key": name,
            "arguments": {},
            "properties_key": name,
        }
        for name in sorted(vhost.queues)
    ]
    for name, exchange in sorted(vhost.exchanges.items()):
        if not name:
            continue
        for destination, key, arguments in exchange.kind.bindings():
            if isinstance(destination, Queue):
                dest_type, dest_name = "queue", destination.name
            elif isinstance(destination, Exchange):
                dest_type, dest_name = "exchange", destination.name
            else:
                continue
            args = dict(arguments or {})
            rows.append(
                {
                    "source": name,
                    "vhost": vhost.name,
                    "destination": dest_name,
                    "destination_type": dest_type,
                    "routing_key": key,
                    "arguments": json_value(args),
                    "properties_key": properties_key(key, args),
                }
            )
    return rows


# -- queues and exchanges --------------------------------------------------------------------


def queue_row(queue: Queue) -> dict[str, Any]:
    """A queue: its declaration, policies, type, consumers and message counts."""
    ready = queue.message_count
    unacked = queue.unacked_count
    consumers = queue.consumers
    return {
        "name": queue.name,
        "vhost": queue.vhost_name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": json_value(dict(queue.arguments)),
        "node": NODE,
        "type": queue.type.name,
        "state": "running",
        "policy": queue.policy,
        "operator_policy": queue.operator_policy,
        "effective_policy_definition": json_value(queue.policy_definition),
        "consumers": len(consumers),
        "exclusive_consumer_tag": next((c.tag for c in consumers if c.exclusive), None),
        "single_active_consumer_tag": (
            consumers[0].tag if consumers and queue.config.single_active_consumer else None
        ),
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "messages_paged_out": queue.paged_count,
    }


def queue_record_row(record: Any, running: bool) -> dict[str, Any]:
    """A queue led by another node of a cluster, from its record in etcd
    (``cluster/keys.py``'s ``QueueRecord``): its declaration and leader; its counters stay
    on its leader (``running``: whether that node is)."""
    return {
        "name": record.name,
        "vhost": record.vhost,
        "durable": record.durable,
        "auto_delete": record.auto_delete,
        "exclusive": record.exclusive,
        "arguments": json_value(dict(record.arguments)),
        "node": record.leader,
        "type": str(record.arguments.get("x-queue-type", "classic")),
        "state": "running" if running else "down",
        "policy": None,
        "operator_policy": None,
        "effective_policy_definition": {},
        "consumers": 0,
        "exclusive_consumer_tag": None,
        "single_active_consumer_tag": None,
        "messages": 0,
        "messages_ready": 0,
        "messages_unacknowledged": 0,
        "messages_paged_out": 0,
    }


def exchange_row(exchange: Exchange, vhost: str) -> dict[str, Any]:
    """An exchange: its declaration and policy (a key only when it has one)."""
    out: dict[str, Any] = {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.type_name,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": json_value(dict(exchange.arguments)),
        "user_who_performed_action": "rmq-internal" if not exchange.name else "",
    }
    if exchange.policy is not None:
        out["policy"] = exchange.policy
    return out


# -- connections, channels, consumers ------------------------------------------------------


def connection_name(conn: ConnectionProtocol) -> str:
    """RabbitMQ's connection name: ``peer -> local address``."""
    shell = conn.shell
    return shell.info.name if shell is not None else conn.peer


def peer(conn: ConnectionProtocol) -> tuple[str, int]:
    shell = conn.shell
    if shell is None:
        host, _, port = conn.peer.rpartition(":")
        return host.strip("[]"), int(port) if port.isdigit() else 0
    return shell.info.peer_host, shell.info.peer_port


def connection_row(conn: ConnectionProtocol) -> dict[str, Any]:
    """A client connection as its introspection record (``server/shell/info.py``, RabbitMQ's
    info items) describes it: addresses, TLS, the protocol and its negotiated values, the
    login and the vhost once open, byte and read/write counts."""
    shell = conn.shell
    assert shell is not None  # listed while it is connected
    info = shell.info
    out: dict[str, Any] = {
        "name": info.name,
        "node": NODE,
        "type": "network",
        "protocol": info.protocol,
        "user": info.user,
        "vhost": info.vhost,
        "host": info.host,
        "port": info.port,
        "peer_host": info.peer_host,
        "peer_port": info.peer_port,
        "ssl": info.ssl,
        "state": shell.state(conn.loop.time()),
        "channels": len(shell.channels()),
        "channel_max": info.channel_max,
        "frame_max": info.frame_max,
        "timeout": info.timeout,
        "auth_mechanism": info.auth_mechanism,
        "client_properties": json_value(dict(info.client_properties)),
        "connected_at": int(info.connected_at * 1000),
        "recv_oct": info.recv_oct,
        "recv_cnt": info.recv_cnt,
        "send_oct": info.send_oct,
        "send_cnt": info.send_cnt,
        "send_pend": 0,
    }
    provided = info.user_provided_name
    if provided is not None:
        out["user_provided_name"] = provided
    if info.container_id is not None:
        out["container_id"] = info.container_id
    if info.ssl:
        out["ssl_protocol"] = info.ssl_protocol
        out["ssl_cipher"] = info.ssl_cipher
    return out


def channels(conns: list[ConnectionProtocol]) -> list[tuple[ConnectionProtocol, ChannelInfo]]:
    """Every open connection's channels (0-9-1 channels and their kin: 1.0 and 0-10
    sessions, AMQP/Fast channels), as their front ends describe them, by number."""
    out: list[tuple[ConnectionProtocol, ChannelInfo]] = []
    for conn in conns:
        shell = conn.shell
        if shell is not None:
            out.extend((conn, channel) for channel in shell.channels())
    return out


def channel_row(conn: ConnectionProtocol, channel: ChannelInfo) -> dict[str, Any]:
    """A channel: its connection, consumers, unacknowledged deliveries, prefetch, and
    whether it is in confirm or transaction mode."""
    shell = conn.shell
    user, vhost = (shell.info.user, shell.info.vhost) if shell is not None else ("", "")
    cname = connection_name(conn)
    peer_host, peer_port = peer(conn)
    return {
        "name": f"{cname} ({channel.number})",
        "number": channel.number,
        "node": NODE,
        "user": user,
        "vhost": vhost,
        "connection_details": {"name": cname, "peer_host": peer_host, "peer_port": peer_port},
        "consumer_count": len(channel.consumers),
        "messages_unacknowledged": channel.unacked,
        "messages_uncommitted": channel.uncommitted,
        "acks_uncommitted": 0,
        "prefetch_count": channel.prefetch_count,
        "global_prefetch_count": channel.global_prefetch_count,
        "confirm": channel.confirm,
        "transactional": channel.transactional,
        "state": "running",
    }


def channel_details(conn: ConnectionProtocol, number: int) -> dict[str, Any]:
    """A channel as a consumer row names it."""
    shell = conn.shell
    cname = connection_name(conn)
    peer_host, peer_port = peer(conn)
    return {
        "name": f"{cname} ({number})",
        "number": number,
        "connection_name": cname,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "node": NODE,
        "user": shell.info.user if shell is not None else "",
    }


def consumer_row(consumer: Any, channel: dict[str, Any] | None) -> dict[str, Any]:
    """A consumer: its tag, queue, settlement, credit and arguments, and its channel's
    ``channel_details`` when it has one."""
    queue = consumer.queue
    out: dict[str, Any] = {
        "consumer_tag": consumer.tag,
        "queue": {"name": queue.name, "vhost": queue.vhost_name},
        "ack_required": not consumer.auto_settle,
        "exclusive": consumer.exclusive,
        "prefetch_count": 0 if consumer.credit >= 1 << 59 else consumer.credit + consumer.unsettled,
        "arguments": json_value(dict(consumer.arguments)),
        "active": True,
        "activity_status": "up",
    }
    if channel is not None:
        out["channel_details"] = channel
    return out


# -- vhosts, users, permissions ------------------------------------------------------------


def vhost_row(info: VhostInfo) -> dict[str, Any]:
    """A virtual host as the auth registry has it."""
    return {
        "name": info.name,
        "description": info.description,
        "tags": list(info.tags),
        "default_queue_type": info.default_queue_type or "undefined",
        "metadata": {"description": info.description, "tags": list(info.tags)},
        "tracing": False,
        "cluster_state": {NODE: "running"},
    }


def user_row(user: User) -> dict[str, Any]:
    return {
        "name": user.name,
        "password_hash": passwords.encode_hash(user.password_hash),
        "hashing_algorithm": user.hashing_algorithm,
        "tags": list(user.tags),
        "limits": dict(user.limits),
    }


def permission_rows(
    users: UserStore, user: str | None = None, vhost: str | None = None
) -> list[dict[str, Any]]:
    """Permissions, by user then vhost (those of ``user`` or in ``vhost`` when given)."""
    return [
        {"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
        for (u, v), p in sorted(users.permissions.items())
        if (user is None or u == user) and (vhost is None or v == vhost)
    ]


def topic_permission_rows(
    users: UserStore, user: str | None = None, vhost: str | None = None
) -> list[dict[str, Any]]:
    """Topic permissions, by user, vhost then exchange."""
    return [
        {"user": u, "vhost": v, "exchange": x, "write": t.write, "read": t.read}
        for (u, v), by_exchange in sorted(users.topic_permissions.items())
        for x, t in sorted(by_exchange.items())
        if (user is None or u == user) and (vhost is None or v == vhost)
    ]
