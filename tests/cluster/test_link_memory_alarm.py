"""A leader over its memory watermark holds the publishes that reach it over the link, not
the link: consumers on another node still drain its queue, the alarm clears, and the held
publishes go on (RabbitMQ's alarm blocks publishers only)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pika
import pytest

from tests.cluster import nodes

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


def test_consumers_across_the_link_drain_a_leader_over_its_watermark(
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

        publisher = _connect(a)
        pch = publisher.channel()
        for i in range(COUNT):
            pch.basic_publish("", "q.alarm", b"%03d" % i + BODY)
        nodes.eventually(lambda: "memory alarm" in b.broker.log_text())

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
        consumer.close()
        publisher.close()
    finally:
        for node in (a, b):
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()
