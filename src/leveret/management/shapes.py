"""The JSON of each kind of object, with RabbitMQ 3.10's field names and types (recorded
side by side in ``tests/data/management/rabbitmq-3.10.8-shapes.json``; Leveret gives a
subset of RabbitMQ's fields, never a field of another type). Imported by the API modules.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret import __version__
from leveret.management.stats import (
    CHANNEL_COUNTERS,
    EXCHANGE_COUNTERS,
    QUEUE_COUNTERS,
    QUEUE_GAUGES,
    Sampler,
    channel_values,
    details,
    message_stats,
)
from leveret.server.admin_entities import connection_name
from leveret.server.runtime import json_value

if TYPE_CHECKING:
    from leveret.model.exchange import Exchange
    from leveret.model.queues.base import Queue
    from leveret.server.connection import ConnectionProtocol

__all__ = ["Rates", "connection_name", "node_name"]

NODE = f"leveret@{socket.gethostname()}"
EXCHANGE_TYPES = [
    {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification"},
    {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification"},
    {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification"},
    {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification"},
    {"name": "x-delayed-message", "description": "Delayed Message Exchange."},
]


@dataclass(frozen=True)
class Rates:
    """``msg_rates_age`` / ``msg_rates_incr`` (message counts) and ``lengths_age`` /
    ``lengths_incr`` (queue lengths) of a request (None: rates only)."""

    age: int | None = None
    incr: int | None = None
    lengths_age: int | None = None
    lengths_incr: int | None = None


def node_name() -> str:
    return NODE


def _ts(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def queue_type(queue: Queue) -> str:
    return queue.type.name


def queue_json(
    queue: Queue, sampler: Sampler, rates: Rates = Rates(), *, detail: bool = False
) -> dict[str, Any]:
    series = sampler.queue_series(queue.vhost_name, queue, queue.name)
    samples = series.samples if series is not None else None
    ready = queue.message_count
    unacked = queue.unacked_count
    consumers = queue.consumers
    out: dict[str, Any] = {
        "name": queue.name,
        "vhost": queue.vhost_name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": json_value(dict(queue.arguments)),
        "node": NODE,
        "type": queue_type(queue),
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
        "message_bytes_ready": queue.message_bytes,
    }
    for i, name in enumerate(QUEUE_GAUGES):
        out[name + "_details"] = details(
            samples, len(QUEUE_COUNTERS) + i, rates.lengths_age, rates.lengths_incr
        )
    out["message_stats"] = message_stats(
        QUEUE_COUNTERS,
        (
            queue.n_publish,
            queue.n_deliver,
            queue.n_deliver_no_ack,
            queue.n_get,
            queue.n_get_no_ack,
            queue.n_ack,
            queue.n_redeliver,
            queue.n_get_empty,
        ),
        samples,
        rates.age,
        rates.incr,
    )
    if not consumers:
        out["idle_since"] = _ts(time.time())
    if detail:
        out["consumer_details"] = [consumer_json(c, None) for c in consumers]
        out["incoming"] = []
        out["deliveries"] = []
    return out


def exchange_json(
    exchange: Exchange, vhost: str, sampler: Sampler, rates: Rates = Rates()
) -> dict[str, Any]:
    series = sampler.exchange_series(vhost, exchange, exchange.name)
    out: dict[str, Any] = {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.type_name,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": json_value(dict(exchange.arguments)),
        "user_who_performed_action": "rmq-internal" if not exchange.name else "",
        "message_stats": message_stats(
            EXCHANGE_COUNTERS,
            (exchange.n_publish_in, exchange.n_publish_out),
            series.samples if series is not None else None,
            rates.age,
            rates.incr,
        ),
    }
    if exchange.policy is not None:
        out["policy"] = exchange.policy
    store = getattr(exchange.kind, "store", None)
    if store is not None:
        # The delayed-message plugin's count (shown on RabbitMQ's exchange page), and
        # Leveret's next due time (ms since the epoch; null when none is pending).
        out["messages_delayed"] = store.pending
        out["messages_delayed_next_due"] = store.next_due()
    return out


def _peer(conn: ConnectionProtocol) -> tuple[str, int]:
    host, _, port = conn.peer.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def connection_json(
    conn: ConnectionProtocol, sampler: Sampler, rates: Rates = Rates()
) -> dict[str, Any]:
    front = conn.amqp
    client = getattr(front, "client", None) if front is not None else None
    series = sampler.connections.get(id(conn))
    samples = series.samples if series is not None and series.obj is conn else None
    peer_host, peer_port = _peer(conn)
    transport = conn.transport
    local = transport.get_extra_info("sockname") if transport is not None else None
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    user = getattr(front, "user", None)
    props = getattr(front, "client_properties", {}) or {}
    out: dict[str, Any] = {
        "name": connection_name(conn),
        "node": NODE,
        "type": "network",
        "protocol": getattr(front, "PROTOCOL_NAME", "AMQP 0-9-1"),
        "user": client.user if client is not None else getattr(user, "name", ""),
        "vhost": client.vhost.name if client is not None else "",
        "host": local[0] if local else "",
        "port": local[1] if local else 0,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "ssl": ssl_object is not None,
        "state": "blocked" if getattr(front, "blocked", False) else "running",
        "channels": len(client.sessions) if client is not None else 0,
        "channel_max": getattr(front, "channel_max", 0),
        "frame_max": getattr(front, "frame_max", 0),
        "timeout": getattr(front, "heartbeat", 0),
        "auth_mechanism": getattr(front, "mechanism", "PLAIN") or "PLAIN",
        "client_properties": json_value(dict(props)),
        "connected_at": int(conn.connected_at * 1000),
        "recv_oct": conn.recv_oct,
        "recv_cnt": conn.recv_cnt,
        "send_oct": conn.send_oct,
        "send_cnt": conn.send_cnt,
        "recv_oct_details": details(samples, 0, rates.age, rates.incr),
        "send_oct_details": details(samples, 1, rates.age, rates.incr),
        "send_pend": 0,
    }
    provided = props.get("connection_name")
    if isinstance(provided, str | bytes):
        out["user_provided_name"] = json_value(provided)
    if ssl_object is not None:
        out["ssl_protocol"] = ssl_object.version()
        cipher = ssl_object.cipher()
        out["ssl_cipher"] = cipher[0] if cipher else None
    return out


def channel_json(
    conn: ConnectionProtocol,
    number: int,
    session: Any,
    sampler: Sampler,
    rates: Rates = Rates(),
) -> dict[str, Any]:
    front = conn.amqp
    client = getattr(front, "client", None)
    series = sampler.channels.get(id(session))
    samples = series.samples if series is not None and series.obj is session else None
    cname = connection_name(conn)
    peer_host, peer_port = _peer(conn)
    consumers = getattr(session, "consumers", {}) or {}
    unacked = getattr(session, "unacked", {}) or {}
    publisher = getattr(session, "publisher", None)
    tx = getattr(publisher, "tx", None)
    confirms = getattr(publisher, "confirms", None)
    return {
        "name": f"{cname} ({number})",
        "number": number,
        "node": NODE,
        "user": client.user if client is not None else "",
        "vhost": client.vhost.name if client is not None else "",
        "connection_details": {"name": cname, "peer_host": peer_host, "peer_port": peer_port},
        "consumer_count": len(consumers),
        "messages_unacknowledged": len(unacked),
        "messages_uncommitted": len(tx.publishes) if tx is not None else 0,
        "acks_uncommitted": 0,
        "prefetch_count": getattr(session, "prefetch_count", 0),
        "global_prefetch_count": getattr(session, "global_prefetch_count", 0),
        "confirm": confirms is not None,
        "transactional": tx is not None,
        "state": "running",
        "message_stats": message_stats(
            CHANNEL_COUNTERS, channel_values(session), samples, rates.age, rates.incr
        ),
    }


def consumer_json(consumer: Any, channel: dict[str, Any] | None) -> dict[str, Any]:
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


def channel_details(conn: ConnectionProtocol, number: int) -> dict[str, Any]:
    front = conn.amqp
    client = getattr(front, "client", None)
    cname = connection_name(conn)
    peer_host, peer_port = _peer(conn)
    return {
        "name": f"{cname} ({number})",
        "number": number,
        "connection_name": cname,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "node": NODE,
        "user": client.user if client is not None else "",
    }


def node_json(host: Any, started_at: float, mem_used: int, mem_limit: int) -> dict[str, Any]:
    return {
        "name": NODE,
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "uptime": int((time.time() - started_at) * 1000),
        "processors": os.cpu_count() or 1,
        "mem_used": mem_used,
        "mem_limit": mem_limit,
        "mem_alarm": False,
        "disk_free_alarm": False,
        "fd_used": _fd_used(),
        "sockets_used": len(host.connections),
        "proc_used": 1,
        "run_queue": 0,
        "rates_mode": "basic",
        "exchange_types": [{**t, "enabled": True} for t in EXCHANGE_TYPES],
        "auth_mechanisms": [
            {"name": m, "description": "", "enabled": True} for m in ("PLAIN", "AMQPLAIN")
        ],
        "applications": [
            {"name": "leveret", "description": "Leveret AMQP broker", "version": __version__}
        ],
        "partitions": [],
        "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
        "db_dir": str(host.data_path),
        "fd_total": _fd_total(),
        "sockets_total": _fd_total(),
        "disk_free": _disk_free(str(host.data_path)),
        "config_files": [],
        "log_files": ["<stderr>"],
        "contexts": [
            {
                "description": "RabbitMQ Management",
                "path": "/",
                "port": str(host.settings.management_port),
            }
        ],
    }


def _fd_total() -> int:
    import resource

    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _disk_free(path: str) -> int:
    import shutil

    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def _fd_used() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0
