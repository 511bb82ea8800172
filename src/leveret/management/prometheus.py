"""The Prometheus endpoint (port 15692): ``/metrics`` (totals) and ``/metrics/per-object``
(one series per queue, channel and connection), with the rabbitmq_prometheus plugin's
metric names and labels so RabbitMQ's Grafana dashboards read Leveret; the text format is
prometheus_client's (``generate_latest``), never formatted here.

Per node, as RabbitMQ's: on a cluster node the figures are that node's own (its
connections and channels, the queues it leads), and ``rabbitmq_identity_info`` names the
node, the cluster and the cluster's permanent id (the same on every node), which is how
RabbitMQ's dashboards tell the nodes of one cluster apart.

Channel counters in ``/metrics`` are the sampler's running totals by vhost (monotonic:
they keep what closed channels did), so they move once per statistics interval, as
RabbitMQ's do.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from leveret import __version__
from leveret.management.shapes import connection_name, node_name
from leveret.management.stats import CHANNEL_COUNTERS
from leveret.server.parameters import cluster_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.metrics_core import Metric

    from leveret.management.plane import Plane
    from leveret.server.shell.info import ChannelInfo

# The text format version RabbitMQ's plugin answers with (every Prometheus reads it).
TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
# Channel counter -> the plugin's metric (without _total) and help text.
CHANNEL_METRICS = {
    "publish": ("rabbitmq_channel_messages_published", "Messages published into a channel"),
    "confirm": ("rabbitmq_channel_messages_confirmed", "Messages confirmed to publishers"),
    "return_unroutable": (
        "rabbitmq_channel_messages_unroutable_returned",
        "Messages returned to publishers as unroutable",
    ),
    "drop_unroutable": (
        "rabbitmq_channel_messages_unroutable_dropped",
        "Messages published as non-mandatory into an exchange and dropped as unroutable",
    ),
    "deliver": (
        "rabbitmq_channel_messages_delivered_ack",
        "Messages delivered to consumers in manual acknowledgement mode",
    ),
    "deliver_no_ack": (
        "rabbitmq_channel_messages_delivered",
        "Messages delivered to consumers in automatic acknowledgement mode",
    ),
    "get": ("rabbitmq_channel_get_ack", "Messages fetched with basic.get in manual ack mode"),
    "get_no_ack": ("rabbitmq_channel_get", "Messages fetched with basic.get in auto ack mode"),
    "ack": ("rabbitmq_channel_messages_acked", "Messages acknowledged by consumers"),
    "redeliver": ("rabbitmq_channel_messages_redelivered", "Messages redelivered to consumers"),
    "get_empty": ("rabbitmq_channel_get_empty", "Times basic.get found the queue empty"),
}


class _Collector:
    def __init__(self, server: Plane, per_object: bool) -> None:
        self.server = server
        self.per_object = per_object

    def collect(self) -> Iterator[Metric]:
        server = self.server
        host = server.host.admin_host
        broker = host.broker
        node = node_name()
        identity = GaugeMetricFamily(
            "rabbitmq_identity_info",
            "RabbitMQ node & cluster identity info",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id"],
        )
        # RabbitMQ's permanent id is the cluster's, the same on every node.
        cluster = getattr(host, "cluster", None)
        permanent = f"rabbitmq-cluster-id-{cluster.cluster_id}" if cluster is not None else node
        identity.add_metric([node, cluster_name(server.host.runtime), permanent], 1)
        yield identity
        build = GaugeMetricFamily(
            "rabbitmq_build_info",
            "RabbitMQ & Erlang/OTP version info",
            labels=["rabbitmq_version", "prometheus_plugin_version", "product"],
        )
        build.add_metric(["3.10.8", __version__, "Leveret"], 1)
        yield build
        shells = [(c, c.shell) for c in list(host.connections) if c.shell is not None]
        conns = [c for c, shell in shells if shell.front is not None]
        queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
        sessions: list[tuple[Any, ChannelInfo]] = [
            (conn, channel) for conn, shell in shells for channel in shell.channels()
        ]
        yield _gauge("rabbitmq_connections", "Connections currently open", len(conns))
        yield _gauge("rabbitmq_channels", "Channels currently open", len(sessions))
        yield _gauge(
            "rabbitmq_consumers",
            "Consumers currently connected",
            sum(len(q.consumers) for q in queues),
        )
        yield _gauge("rabbitmq_queues", "Queues available", len(queues))
        yield _gauge("rabbitmq_process_resident_memory_bytes", "Memory used in bytes", _rss())
        yield _gauge(
            "rabbitmq_resident_memory_limit_bytes",
            "Memory high watermark in bytes",
            server.host.alarm.high,
        )
        yield _gauge(
            "rabbitmq_alarms_memory_used_watermark",
            "is 1 if VM memory watermark alarm is in effect",
            int(server.host.alarm.local),  # this node's, as RabbitMQ's per-node metric
        )
        yield from _link_metrics(server)
        if self.per_object:
            yield from self._per_object(queues, sessions, conns)
            return
        ready = sum(q.message_count for q in queues)
        unacked = sum(q.unacked_count for q in queues)
        yield _gauge("rabbitmq_queue_messages_ready", "Messages ready to be delivered", ready)
        yield _gauge(
            "rabbitmq_queue_messages_unacked",
            "Messages delivered but not yet acknowledged",
            unacked,
        )
        yield _gauge("rabbitmq_queue_messages", "Sum of ready and unacknowledged", ready + unacked)
        yield _gauge(
            "rabbitmq_queue_consumers",
            "Consumers on a queue",
            sum(len(q.consumers) for q in queues),
        )
        totals = [0] * len(CHANNEL_COUNTERS)
        for running in server.sampler.vhost_totals.values():
            for i, value in enumerate(running):
                totals[i] += value
        for i, name in enumerate(CHANNEL_COUNTERS):
            metric, text = CHANNEL_METRICS[name]
            counter = CounterMetricFamily(metric, text)
            counter.add_metric([], totals[i])
            yield counter
        octets = [0, 0]
        for running in server.sampler.vhost_octets.values():
            octets[0] += running[0]
            octets[1] += running[1]
        received = CounterMetricFamily(
            "rabbitmq_connection_incoming_bytes", "Total number of bytes received on a connection"
        )
        received.add_metric([], octets[0])
        yield received
        sent = CounterMetricFamily(
            "rabbitmq_connection_outgoing_bytes", "Total number of bytes sent on a connection"
        )
        sent.add_metric([], octets[1])
        yield sent
        published = CounterMetricFamily(
            "rabbitmq_queue_messages_published", "Messages published to queues"
        )
        published.add_metric([], sum(q.n_publish for q in queues))
        yield published

    def _per_object(
        self, queues: list[Any], sessions: list[tuple[Any, ChannelInfo]], conns: list[Any]
    ) -> Iterator[Metric]:
        labels = ["vhost", "queue"]
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "ready": GaugeMetricFamily(
                "rabbitmq_queue_messages_ready", "Messages ready to be delivered", labels=labels
            ),
            "unacked": GaugeMetricFamily(
                "rabbitmq_queue_messages_unacked",
                "Messages delivered but not yet acknowledged",
                labels=labels,
            ),
            "messages": GaugeMetricFamily(
                "rabbitmq_queue_messages", "Sum of ready and unacknowledged", labels=labels
            ),
            "consumers": GaugeMetricFamily(
                "rabbitmq_queue_consumers", "Consumers on a queue", labels=labels
            ),
            "published": CounterMetricFamily(
                "rabbitmq_queue_messages_published", "Messages published to queues", labels=labels
            ),
        }
        for q in queues:
            key = [q.vhost_name, q.name]
            ready, unacked = q.message_count, q.unacked_count
            families["ready"].add_metric(key, ready)
            families["unacked"].add_metric(key, unacked)
            families["messages"].add_metric(key, ready + unacked)
            families["consumers"].add_metric(key, len(q.consumers))
            families["published"].add_metric(key, q.n_publish)
        yield from families.values()
        channel_labels = ["channel"]
        counters = {
            name: CounterMetricFamily(metric, text, labels=channel_labels)
            for name, (metric, text) in CHANNEL_METRICS.items()
        }
        for conn, channel in sessions:
            label = [f"{connection_name(conn)} ({channel.number})"]
            for i, value in enumerate(channel.counters):
                counters[CHANNEL_COUNTERS[i]].add_metric(label, value)
        yield from counters.values()
        received = CounterMetricFamily(
            "rabbitmq_connection_incoming_bytes",
            "Total number of bytes received on a connection",
            labels=["channel"],
        )
        sent = CounterMetricFamily(
            "rabbitmq_connection_outgoing_bytes",
            "Total number of bytes sent on a connection",
            labels=["channel"],
        )
        for conn in conns:
            label = [connection_name(conn)]
            received.add_metric(label, conn.shell.info.recv_oct)
            sent.add_metric(label, conn.shell.info.send_oct)
        yield received
        yield sent


def _link_metrics(server: Plane) -> Iterator[Metric]:
    """Shovels and federation links (``leveret.links``): RabbitMQ 3.10's plugin has no
    metrics for them, so these are Leveret's own names."""
    from leveret.links.supervisor import Links

    links = next((p for p in getattr(server.host, "plugins", ()) if isinstance(p, Links)), None)
    if links is None:
        return
    states = GaugeMetricFamily("leveret_shovels", "Shovels by state", labels=["state"])
    forwarded = CounterMetricFamily(
        "leveret_shovel_messages_forwarded",
        "Messages a shovel published to its destination",
        labels=["vhost", "shovel"],
    )
    acked = CounterMetricFamily(
        "leveret_shovel_messages_acknowledged",
        "Messages a shovel acknowledged at its source",
        labels=["vhost", "shovel"],
    )
    count: dict[str, int] = {"starting": 0, "running": 0, "terminated": 0}
    for (vhost, name), shovel in sorted(links.shovels.items()):
        count[shovel.status.state] = count.get(shovel.status.state, 0) + 1
        forwarded.add_metric([vhost, name], shovel.counters.forwarded)
        acked.add_metric([vhost, name], shovel.counters.acknowledged)
    for state, n in count.items():
        states.add_metric([state], n)
    yield states
    yield forwarded
    yield acked
    link_states = GaugeMetricFamily(
        "leveret_federation_links", "Federation links by status", labels=["status"]
    )
    link_forwarded = CounterMetricFamily(
        "leveret_federation_messages_forwarded",
        "Messages a federation link republished downstream",
        labels=["vhost", "type", "name", "upstream"],
    )
    by_status: dict[str, int] = {"starting": 0, "running": 0, "error": 0}
    for link in links.federation.active.values():
        by_status[link.status] = by_status.get(link.status, 0) + 1
        link_forwarded.add_metric(
            [link.vhost, link.kind, link.resource, link.upstream.name], link.forwarded
        )
    for status, n in by_status.items():
        link_states.add_metric([status], n)
    yield link_states
    yield link_forwarded


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, text)
    gauge.add_metric([], value)
    return gauge


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def make_app(server: Plane) -> web.Application:
    """The Prometheus listener's application (no authentication, as the plugin)."""
    registries = {}
    for per_object in (False, True):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(server, per_object))
        registries[per_object] = registry

    async def metrics(request: web.Request) -> web.Response:
        per_object = request.path.rstrip("/").endswith("per-object")
        body = generate_latest(registries[per_object])
        return web.Response(body=body, headers={"Content-Type": TEXT_0_0_4})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/per-object", metrics)
    return app
