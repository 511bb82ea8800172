"""A node over its memory watermark: the alarm is cluster-wide, as RabbitMQ's (publishers on
every node get ``connection.blocked``), and the node holds the publishes that reach it over
the link, not the link: consumers on another node still drain its queue, the alarm clears
everywhere, and the held publishes go on."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pika
import pytest
import requests

from tests.cluster import nodes
from tests.integration.ctl_support import ok

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer

pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]

WATERMARK = 200_000
BODY = b"x" * 10_000
COUNT = 60  # 600 kB: three times b's watermark


def _connect(node: nodes.Node) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )


def _alarms(node: nodes.Node) -> list[dict[str, str]]:
    """The alarms ``node``'s health check reports (none: an empty list)."""
    response = requests.get(node.api("health/checks/alarms"), auth=nodes.AUTH, timeout=10)
    alarms: list[dict[str, str]] = response.json().get("alarms", [])
    return alarms


def test_a_nodes_memory_alarm_blocks_the_cluster_and_its_consumers_elsewhere_drain_it(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    a = nodes.start_node(etcd_server, etcd_prefix, "a@test")
    try:
        b = nodes.start_node(
            etcd_server,
            etcd_prefix,
            "b@test",
            env={"LEVERET_MEMORY_HIGH_WATERMARK": str(WATERMARK)},
        )
    except Exception:
        a.broker.stop()
        raise
    try:
        conn = _connect(b)
        conn.channel().queue_declare("q.alarm", durable=True)
        conn.close()
        nodes.eventually(lambda: "q.alarm" in nodes.queue_names(a))

        conn = _connect(a)
        conn.channel().queue_declare("q.local", durable=True)
        conn.close()

        publisher = _connect(a)
        pch = publisher.channel()
        for i in range(COUNT):
            pch.basic_publish("", "q.alarm", b"%03d" % i + BODY)
        nodes.eventually(lambda: "memory alarm" in b.broker.log_text())
        # b's alarm is in its record: a's health check names it.
        health = nodes.eventually(lambda: _alarms(a))
        assert health == [{"node": "b@test", "resource": "memory"}]
        status = json.loads(ok(a.data_dir, "--formatter", "json", "cluster_status"))
        assert status["alarms"] == {"a@test": [], "b@test": ["memory"]}

        # A publisher on a, to a queue a leads, is blocked too and told so.
        events: list[str] = []
        other = _connect(a)
        other.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
        other.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
        och = other.channel()
        och.basic_publish("", "q.local", b"local")
        nodes.eventually(lambda: other.process_data_events(time_limit=0.05) or events)
        assert events == ["blocked"]

        # Every message comes through a's consumer: its acks and credit reach b while b
        # holds a's publishes, so b drains, its alarm clears and the rest follow.
        consumer = _connect(a)
        cch = consumer.channel()
        cch.basic_qos(prefetch_count=10)
        got: list[int] = []
        deadline = time.monotonic() + 30
        for method, _props, body in cch.consume("q.alarm", inactivity_timeout=0.5):
            if method is not None:
                got.append(int(body[:3]))
                cch.basic_ack(method.delivery_tag)
            publisher.process_data_events(time_limit=0)
            if len(got) == COUNT or time.monotonic() > deadline:
                break
        cch.cancel()
        assert got == list(range(COUNT))
        assert "memory alarm cleared" in b.broker.log_text()

        # Cleared on b, cleared on a: the other publisher goes on.
        nodes.eventually(lambda: other.process_data_events(time_limit=0.05) or len(events) > 1)
        assert events == ["blocked", "unblocked"]
        assert _alarms(a) == []
        method, _props, body = cch.basic_get("q.local", auto_ack=True)
        assert body == b"local"
        for connection in (consumer, publisher, other):
            connection.close()
    finally:
        for node in (a, b):
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()
