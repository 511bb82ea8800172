"""The inter-node link through real clients: three ``leveret serve`` nodes on one etcd,
each queue led by one node and used through the others (pika publishing with confirms on
one node, consuming and getting on another), and a queue whose node is down answering as
RabbitMQ 3.10 answers for a classic queue on a down node, then back with its node."""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.cluster import nodes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

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


def test_a_queue_on_a_down_node_answers_404_and_returns_with_it(
    three_nodes: list[Node], etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    a, b, _c = three_nodes
    declare_on(b, "q.down", a)
    publish_confirmed(a, "q.down", [b"kept-%d" % i for i in range(50)])
    # A consumer on a sees a basic.cancel when b goes.
    conn = connect(a)
    ch = conn.channel()
    cancelled: list[str] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    ch.basic_qos(prefetch_count=5)
    tag = ch.basic_consume("q.down", lambda *args: None)
    conn.process_data_events(time_limit=0.5)
    assert b.broker.stop() == 0
    nodes.eventually(lambda: conn.process_data_events(time_limit=0.1) or cancelled)
    assert cancelled == [tag]
    conn.close()
    # RabbitMQ 3.10, a durable classic queue whose node is down: 404 for declare, consume
    # and get; a publish routed to it is not confirmed (nack).
    expected = (
        "NOT_FOUND - home node 'b@test' of durable queue 'q.down' in vhost '/' "
        "is down or inaccessible"
    )
    attempts: dict[str, Callable[[Any], object]] = {
        "declare": lambda ch: ch.queue_declare("q.down", durable=True),
        "passive": lambda ch: ch.queue_declare("q.down", passive=True),
        "consume": lambda ch: ch.basic_consume("q.down", lambda *args: None),
        "get": lambda ch: ch.basic_get("q.down"),
    }
    for attempt, operation in attempts.items():
        conn = connect(a)
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as caught:
            operation(ch)
        assert (caught.value.reply_code, caught.value.reply_text) == (404, expected), attempt
        conn.close()
    conn = connect(a)
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", "q.down", b"lost", pika.BasicProperties(delivery_mode=2))
    conn.close()
    # b comes back with its data directory: every confirmed message is still there.
    back = nodes.start_node(etcd_server, etcd_prefix, "b@test", b.data_dir)
    three_nodes[1] = back
    nodes.eventually(lambda: visible(a, "q.down"))
    got = consume(a, "q.down", 50)
    assert sorted(got) == sorted(b"kept-%d" % i for i in range(50))
