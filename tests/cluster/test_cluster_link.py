"""The inter-node link through real clients: three ``leveret serve`` nodes on one etcd,
each queue led by one node and used through the others (pika publishing with confirms on
one node, consuming and getting on another), and a queue whose node is down answering as
RabbitMQ 3.10 answers for a classic queue on a down node, then back with its node."""

from __future__ import annotations

import functools
import json
import time
from typing import TYPE_CHECKING

import pika
import pika.exceptions
import pytest

from tests.cluster import down_node, nodes

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture
def three_nodes(etcd_server: EtcdServer, etcd_prefix: str) -> Iterator[list[Node]]:
    started: list[Node] = []
    try:
        for name in ("a@test", "b@test", "c@test"):
            node = nodes.start_node(etcd_server, etcd_prefix, name)
            started.append(node)
        yield started
    finally:
        for node in started:
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()


def connect(node: Node) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )


def visible(node: Node, queue: str) -> bool:
    """Whether ``node`` serves ``queue`` (a passive declare answers)."""
    conn = connect(node)
    try:
        conn.channel().queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()


def declare_on(node: Node, queue: str, *others: Node) -> None:
    """A durable queue declared through ``node`` (so led by it), served by ``others``."""
    conn = connect(node)
    conn.channel().queue_declare(queue, durable=True)
    conn.close()
    for other in others:
        nodes.eventually(functools.partial(visible, other, queue))


def publish_confirmed(node: Node, queue: str, bodies: list[bytes]) -> None:
    conn = connect(node)
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        # With confirms, pika's BlockingChannel raises if the broker nacks.
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    conn.close()


def consume(node: Node, queue: str, count: int, *, prefetch: int = 10) -> list[bytes]:
    conn = connect(node)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    for method, _props, body in ch.consume(queue, inactivity_timeout=1):
        if method is None:
            if time.monotonic() > deadline:
                break
            continue
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    ch.cancel()
    conn.close()
    return got


def test_publish_on_a_to_a_queue_led_by_b_consumed_on_c(three_nodes: list[Node]) -> None:
    a, b, c = three_nodes
    declare_on(b, "q.link", a, c)
    bodies = [b"m%d" % i for i in range(300)]
    publish_confirmed(a, "q.link", bodies)
    # The messages are on b (its queue's counters), not on a or c.
    listed = nodes.eventually(
        lambda: next(
            (q for q in b.get("queues/%2F") if q["name"] == "q.link" and q.get("messages") == 300),
            None,
        )
    )
    assert listed["node"] == "b@test"
    assert consume(c, "q.link", 300) == bodies  # in order, through the link
    assert consume(b, "q.link", 1, prefetch=1) == []  # every one acked away on b


def test_get_ack_reject_and_requeue_across_nodes(three_nodes: list[Node]) -> None:
    a, b, c = three_nodes
    declare_on(c, "q.get", a)
    publish_confirmed(b, "q.get", [b"one", b"two", b"three"])
    conn = connect(a)
    ch = conn.channel()
    method, _props, body = ch.basic_get("q.get")
    assert (body, method.message_count, method.redelivered) == (b"one", 2, False)
    ch.basic_nack(method.delivery_tag, requeue=True)  # back on c, redelivered
    method, _props, body = ch.basic_get("q.get")
    assert (body, method.redelivered) == (b"one", True)
    ch.basic_ack(method.delivery_tag)
    method, _props, body = ch.basic_get("q.get")
    assert body == b"two"
    ch.basic_reject(method.delivery_tag, requeue=False)  # dropped (no dead-letter exchange)
    method, _props, body = ch.basic_get("q.get", auto_ack=True)
    assert body == b"three"
    assert ch.basic_get("q.get") == (None, None, None)
    # Unacked deliveries of a channel that closes go back to the leader.
    publish_confirmed(b, "q.get", [b"four"])
    method, _props, body = ch.basic_get("q.get")
    assert body == b"four"
    ch.close()
    conn.close()
    assert consume(c, "q.get", 1) == [b"four"]


def test_a_queue_on_a_down_node_answers_as_rabbitmq_and_returns_with_it(
    three_nodes: list[Node], etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    a, b, _c = three_nodes
    declare_on(b, down_node.QUEUE, a)
    found = down_node.probe(a.broker.port, b.broker.port, b.name, lambda: b.broker.stop())
    # RabbitMQ 3.10.8's answers (a durable classic queue whose node is down), as data.
    assert found == json.loads(down_node.RECORDED.read_text())
    # b comes back with its data directory: every confirmed message is still there.
    back = nodes.start_node(etcd_server, etcd_prefix, "b@test", b.data_dir)
    three_nodes[1] = back
    nodes.eventually(lambda: visible(a, down_node.QUEUE))
    assert consume(a, down_node.QUEUE, 5) == [b"kept"] * 5
