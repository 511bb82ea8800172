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
    details,
    message_stats,
)
from leveret.model.stream import StreamQueue
from leveret.server.admin_entities import connection_name
from leveret.server.runtime import json_value

if TYPE_CHECKING:
    from leveret.model.exchange import Exchange
    from leveret.model.queue import Queue
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.shell.info import ChannelInfo

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
    return queue.config.queue_type


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
        "messages_paged_out": 0 if isinstance(queue, StreamQueue) else queue.paged_count,
        "message_bytes_ready": _ready_bytes(queue),
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


def _ready_bytes(queue: Queue) -> int:
    if isinstance(queue, StreamQueue):
        return 0
    if queue.uses_features:
        return int(queue.ready_bytes)
    return sum(len(e.message.body) for e in list(queue.ready)[:100_000])


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
    shell = conn.shell
    if shell is None:
        host, _, port = conn.peer.rpartition(":")
        return host.strip("[]"), int(port) if port.isdigit() else 0
    return shell.info.peer_host, shell.info.peer_port


def connection_json(
    conn: ConnectionProtocol, sampler: Sampler, rates: Rates = Rates()
) -> dict[str, Any]:
    """A connection as RabbitMQ's info items (``server/shell/info.py``) describe it."""
    shell = conn.shell
    assert shell is not None  # listed only while open
    info = shell.info
    series = sampler.connections.get(id(conn))
    samples = series.samples if series is not None and series.obj is conn else None
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
        "state": info.state,
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
        "recv_oct_details": details(samples, 0, rates.age, rates.incr),
        "send_oct_details": details(samples, 1, rates.age, rates.incr),
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


def channel_json(
    conn: ConnectionProtocol,
    channel: ChannelInfo,
    sampler: Sampler,
    rates: Rates = Rates(),
) -> dict[str, Any]:
    shell = conn.shell
    assert shell is not None
    info = shell.info
    number = channel.number
    series = sampler.channels.get(id(channel.key))
    samples = series.samples if series is not None and series.obj is channel.key else None
    cname = info.name
    return {
        "name": f"{cname} ({number})",
        "number": number,
        "node": NODE,
        "user": info.user,
        "vhost": info.vhost,
        "connection_details": {
            "name": cname,
            "peer_host": info.peer_host,
            "peer_port": info.peer_port,
        },
        "consumer_count": len(channel.consumers),
        "messages_unacknowledged": channel.unacked,
        "messages_uncommitted": channel.uncommitted,
        "acks_uncommitted": 0,
        "prefetch_count": channel.prefetch_count,
        "global_prefetch_count": channel.global_prefetch_count,
        "confirm": channel.confirm,
        "transactional": channel.transactional,
        "state": "running",
        "message_stats": message_stats(
            CHANNEL_COUNTERS, channel.counters, samples, rates.age, rates.incr
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
    cname = connection_name(conn)
    peer_host, peer_port = _peer(conn)
    shell = conn.shell
    return {
        "name": f"{cname} ({number})",
        "number": number,
        "connection_name": cname,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "node": NODE,
        "user": shell.info.user if shell is not None else "",
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
