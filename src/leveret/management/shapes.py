"""The JSON of each kind of object, with RabbitMQ 3.10's field names and types (recorded
side by side in ``tests/data/management/rabbitmq-3.10.8-shapes.json``; Leveret gives a
subset of RabbitMQ's fields, never a field of another type): the rows of
``server/rows.py``, which ``leveret ctl`` shows too, with the statistics (rates, message
counters) added, and the node's own. Imported by the API modules.
"""

from __future__ import annotations

import os
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
from leveret.server import rows
from leveret.server.rows import (
    channel_details,
    channel_row,
    connection_name,
    connection_row,
    consumer_row,
    exchange_row,
    queue_row,
)

if TYPE_CHECKING:
    from leveret.model.exchange import Exchange
    from leveret.model.queues.base import Queue
    from leveret.server.connection import ConnectionProtocol
    from leveret.server.shell.info import ChannelInfo

__all__ = ["Rates", "channel_details", "connection_name", "node_name"]

EXCHANGE_TYPES = [
    {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification"},
    {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification"},
    {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification"},
    {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification"},
    {"name": "x-delayed-message", "description": "Delayed Message Exchange."},
    {"name": "x-consistent-hash", "description": "Consistent Hashing Exchange"},
    {"name": "x-modulus-hash", "description": "Modulus Hashing Exchange"},
    {"name": "x-random", "description": "Randomly picks a binding (queue) to route via (to)."},
    {
        "name": "x-local-random",
        "description": "Picks one random local binding (queue) to route via (to).",
    },
    {"name": "x-lvc", "description": "Last-value cache exchange."},
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
    return rows.NODE


def _ts(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def queue_json(
    queue: Queue, sampler: Sampler, rates: Rates = Rates(), *, detail: bool = False
) -> dict[str, Any]:
    series = sampler.queue_series(queue.vhost_name, queue, queue.name)
    samples = series.samples if series is not None else None
    out = queue_row(queue)
    out["message_bytes_ready"] = queue.message_bytes
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
    consumers = queue.consumers
    if not consumers:
        out["idle_since"] = _ts(time.time())
    if detail:
        out["consumer_details"] = [consumer_json(c, None) for c in consumers]
        out["incoming"] = []
        out["deliveries"] = []
        out.update(queue.details())  # what its type adds (a keyed queue's groups)
    return out


def exchange_json(
    exchange: Exchange, vhost: str, sampler: Sampler, rates: Rates = Rates()
) -> dict[str, Any]:
    series = sampler.exchange_series(vhost, exchange, exchange.name)
    out = exchange_row(exchange, vhost)
    out["message_stats"] = message_stats(
        EXCHANGE_COUNTERS,
        (exchange.n_publish_in, exchange.n_publish_out),
        series.samples if series is not None else None,
        rates.age,
        rates.incr,
    )
    store = getattr(exchange.kind, "store", None)
    if store is not None:
        # The delayed-message plugin's count (shown on RabbitMQ's exchange page), and
        # Leveret's next due time (ms since the epoch; null when none is pending).
        out["messages_delayed"] = store.pending
        out["messages_delayed_next_due"] = store.next_due()
    return out


def connection_json(
    conn: ConnectionProtocol, sampler: Sampler, rates: Rates = Rates()
) -> dict[str, Any]:
    series = sampler.connections.get(id(conn))
    samples = series.samples if series is not None and series.obj is conn else None
    out = connection_row(conn)
    out["recv_oct_details"] = details(samples, 0, rates.age, rates.incr)
    out["send_oct_details"] = details(samples, 1, rates.age, rates.incr)
    return out


def channel_json(
    conn: ConnectionProtocol,
    channel: ChannelInfo,
    sampler: Sampler,
    rates: Rates = Rates(),
) -> dict[str, Any]:
    key = channel.key
    series = sampler.channels.get(id(key))
    samples = series.samples if series is not None and series.obj is key else None
    out = channel_row(conn, channel)
    out["message_stats"] = message_stats(
        CHANNEL_COUNTERS, channel.counters, samples, rates.age, rates.incr
    )
    return out


consumer_json = consumer_row


def node_json(host: Any, started_at: float, mem_used: int, mem_limit: int) -> dict[str, Any]:
    return {
        "name": rows.NODE,
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
