"""An AMQP/Fast client's declarations on a cluster node go to etcd before they are
confirmed, as a 0-9-1 client's do (``test_shared_declarations.py``): a temporary queue
(exclusive to its connection) and a topic subscription's queue and binding are every
node's, so two nodes' clients opening the same temporary queue at once agree on one owner
and a 0-9-1 publisher on the other node routes into a subscription (before, each node made
its own, and the other node knew neither). A consume that the queue's leader on another
node refuses closes the handle as one node closes it (403), rather than being confirmed and
ending later as if the queue were deleted."""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING

import pika
import pytest

from leveret.protocol.amqpfast.events import ServiceType
from leveret.testing.amqpfast_client import Created, Delivered, HandleClosed, Indexed, Replied
from leveret.testing.amqpfast_socket import FastSocket
from tests.cluster import nodes

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.amqpfast_client import ClientEvent
    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture(scope="module")
def two(etcd_server: EtcdServer) -> Iterator[tuple[Node, Node]]:
    yield from nodes.two_nodes(etcd_server, f"/leveret-test/sharedfast-{uuid.uuid4().hex[:8]}/")


def _fast(node: Node, name: str = "") -> FastSocket:
    fast = FastSocket.connect(node.broker.host, node.broker.port, client_name=name)
    fast.client.open_channel(1)
    return fast


def _answer(fast: FastSocket, handle_id: int, confirm_tag: int) -> ClientEvent:
    """The handle's HANDLE REPLY of ``confirm_tag`` or its HANDLE CLOSE, whichever came."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for event in fast.drain(0.3):
            if isinstance(event, Replied) and event.confirm_tag == confirm_tag:
                return event
            if isinstance(event, HandleClosed) and event.handle_id == handle_id:
                return event
        if fast.closed:
            raise AssertionError("connection closed")
    raise AssertionError(f"no answer to confirm tag {confirm_tag}")


def test_a_temporary_queue_is_in_etcd_when_confirmed_and_one_node_wins_a_race(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    name = f"fast-tmp-{uuid.uuid4().hex[:6]}"
    fasts = [_fast(a), _fast(b)]
    try:
        barrier = threading.Barrier(2)
        answers: list[ClientEvent] = [Created(0, ""), Created(0, "")]

        def open_temporary(i: int) -> None:
            fast = fasts[i]
            fast.client.open_handle(
                1, 1, dest_name=name, consumer=True, temporary=True, confirm_tag=9
            )
            barrier.wait()
            fast.flush()
            answers[i] = _answer(fast, 1, 9)

        threads = [threading.Thread(target=open_temporary, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        # One owner: the other is refused as one node refuses another connection's queue.
        replied = [x for x in answers if isinstance(x, Replied)]
        closed = [x for x in answers if isinstance(x, HandleClosed)]
        assert (len(replied), len(closed)) == (1, 1), answers
        assert closed[0].reply_code == 405
        winner = b if isinstance(answers[1], Replied) else a
        # In etcd once confirmed, led by the winner's node; the other node refuses it too.
        [record] = nodes.etcd_values(etcd_server, f"{a.prefix}entities/queues/%2F/{name}")
        assert record["exclusive"]
        assert record["leader"] == winner.name
        other = a if winner is b else b
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", other.broker.port))
        try:

            def locked() -> bool:
                try:
                    conn.channel().queue_declare(name, passive=True)
                except pika.exceptions.ChannelClosedByBroker as exc:
                    return bool(exc.reply_code == 405)
                return False

            nodes.eventually(locked, timeout=5)
        finally:
            conn.close()
    finally:
        for fast in fasts:
            fast.close()


def test_a_temporary_topic_subscription_gets_what_another_node_publishes(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    topic = f"fast{uuid.uuid4().hex[:6]}."
    with _fast(a) as fast:
        client = fast.client
        client.open_handle(1, 1, service=ServiceType.TOPIC, dest_name=topic, consumer=True)
        client.consume(1, prefetch=5, dest_name="news", confirm_tag=4)
        fast.flush()
        assert fast.wait(Replied, timeout=10).confirm_tag == 4
        # Confirmed once etcd has the subscription's queue and its binding to amq.topic.
        bindings = nodes.etcd_values(etcd_server, f"{a.prefix}entities/bindings/%2F/", prefix=True)
        assert any(x["routing_key"] == topic + "news" for x in bindings), bindings

        def bound_on_b() -> bool:
            found = b.get("bindings/%2F")
            return any(x["routing_key"] == topic + "news" for x in found)

        nodes.eventually(bound_on_b, timeout=5)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("amq.topic", topic + "news", b"from b", mandatory=True)
        finally:
            conn.close()
        delivered = fast.wait(Delivered, timeout=10)
        assert delivered.body == b"from b"


@pytest.mark.parametrize("through", ["b", "a"])
def test_a_consume_its_leader_refuses_closes_the_handle_as_on_one_node(
    two: tuple[Node, Node], through: str
) -> None:
    """A queue led by b that an exclusive 0-9-1 consumer on b holds: an AMQP/Fast consume
    of it is refused with 403 on b itself and through a alike (through a, the HANDLE REPLY
    waits for b's answer). Before, a confirmed it and closed the handle later with 404, as
    if the queue had been deleted."""
    a, b = two
    queue = f"fast-excl-{through}-{uuid.uuid4().hex[:6]}"
    holder = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    try:
        ch = holder.channel()
        ch.queue_declare(queue)
        ch.basic_consume(queue, lambda *_: None, exclusive=True)
        node = b if through == "b" else a
        nodes.eventually(lambda: node.get(f"queues/%2F/{queue}").get("name") == queue)
        with _fast(node) as fast:
            fast.client.open_handle(1, 1, dest_name=queue, consumer=True)
            fast.client.consume(1, prefetch=1, confirm_tag=3)
            fast.flush()
            answer = _answer(fast, 1, 3)
            assert isinstance(answer, HandleClosed), answer
            assert answer.reply_code == 403
            assert "exclusive use" in answer.reply_text
    finally:
        holder.close()


def test_query_and_browse_of_a_queue_led_by_another_node_see_its_leaders_messages(
    two: tuple[Node, Node],
) -> None:
    """AMQP/Fast's HANDLE QUERY and BROWSE through a of a queue led by b: the leader's ready
    messages, numbered in its order, none taken (before, a saw none: its proxy holds no
    message)."""
    a, b = two
    name = f"fastbrowse-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare(name, durable=True)
        ch.confirm_delivery()
        for body in (b"m1", b"m2", b"m3"):
            ch.basic_publish("", name, body)
    finally:
        conn.close()
    nodes.eventually(lambda: any(q["name"] == name for q in a.get("queues/%2F")))
    with _fast(a) as fast:
        client = fast.client
        client.open_handle(1, 5, service=ServiceType.QUEUE, dest_name=name, browser=True)
        client.query(5)
        fast.flush()
        assert fast.wait(Indexed, timeout=10).message_list == b"1-3"
        client.browse(5, 2)
        fast.flush()
        browsed = fast.wait(Delivered, timeout=10)
        assert (browsed.body, browsed.delivered) == (b"m2", False)
        client.browse(5, 9, confirm_tag=8)
        fast.flush()
        missing = _answer(fast, 5, 8)
        assert isinstance(missing, Replied)
        assert missing.reply_code == 310
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    try:
        # Nothing was taken: the leader still holds all three, in order.
        ch = conn.channel()
        got = [ch.basic_get(name, auto_ack=True)[2] for _ in range(3)]
        assert got == [b"m1", b"m2", b"m3"]
    finally:
        conn.close()
