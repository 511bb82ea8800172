"""AMQP 1.0 consumer outcomes and filters through real clients: the ``modified`` outcome
(RabbitMQ's 1.0 client's ``requeue_with_annotations`` / ``discard_with_annotations``,
Proton's ``delivery-failed``) — annotations merged into the message, which a 0-9-1 consumer
then sees as headers, the delivery count, dead-lettering when undeliverable here — and
the JMS selector filter of Proton's "selected receive" example. Leveret only (RabbitMQ
3.10's plugin has no v2 addresses)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import Delivery, Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, Selector
from proton.utils import BlockingConnection, LinkDetached

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(60)]


def _url(broker: Broker) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}"


def _pika(broker: Broker) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters(host=broker.host, port=broker.port))


# -- modified ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_rabbitmq_client_requeue_and_discard_with_annotations(
    broker: Broker, name: str, kind: str
) -> None:
    rmq = pytest.importorskip("rabbitmq_amqp_python_client")
    dead = f"{name}.dead"
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(dead)
        ch.queue_declare(
            name,
            durable=True,
            arguments={
                "x-queue-type": kind,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": dead,
            },
        )
    env = rmq.Environment(f"amqp://guest:guest@{broker.host}:{broker.port}/")
    conn = env.connection()
    conn.dial()
    try:
        publisher = conn.publisher(rmq.AddressHelper.queue_address(name))
        publisher.publish(rmq.Message(body=b"once"))
        publisher.close()
        seen: list[dict[str, Any]] = []

        base: Any = rmq.AMQPMessagingHandler

        class Handler(base):  # type: ignore[misc]
            def on_amqp_message(self, event: Any) -> None:
                seen.append(dict(event.message.annotations or {}))
                if len(seen) == 1:
                    self.delivery_context.requeue_with_annotations(
                        event, {"x-opt-attempt": 1, "x-opt-note": "retry"}
                    )
                else:
                    self.delivery_context.discard_with_annotations(
                        event, {"x-opt-attempt": 2, "x-opt-reason": "gave up"}
                    )
                    raise StopIteration

        consumer = conn.consumer(rmq.AddressHelper.queue_address(name), message_handler=Handler())
        with pytest.raises(StopIteration):
            consumer.run()
        consumer.close()
    finally:
        conn.close()
    assert symbol("x-opt-attempt") not in seen[0]
    assert seen[1][symbol("x-opt-attempt")] == 1
    assert seen[1][symbol("x-opt-note")] == "retry"
    # Dead-lettered with the second outcome's annotations; a 0-9-1 consumer sees headers.
    with _pika(broker) as conn:
        method, props, body = conn.channel().basic_get(dead, auto_ack=True)
    assert method is not None
    assert body == b"once"
    headers = props.headers or {}
    assert headers["x-opt-attempt"] == 2
    assert headers["x-opt-note"] == "retry"
    assert headers["x-opt-reason"] == "gave up"
    assert headers["x-death"][0]["reason"] == "rejected"


class _Retrier(MessagingHandler):
    """Hands the one message back as failed three times, then not failed (modified without
    delivery-failed, then released), then accepts it; records each delivery-count."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__(auto_accept=False)
        self.url, self.address = url, address
        self.counts: list[int] = []

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        event.container.create_receiver(conn, self.address)

    def on_message(self, event: Any) -> None:
        self.counts.append(event.message.delivery_count)
        delivery = event.delivery
        n = len(self.counts)
        if n <= 3:
            delivery.local.failed = True
            self.settle(delivery, Delivery.MODIFIED)
        elif n == 4:
            self.settle(delivery, Delivery.MODIFIED)
        elif n == 5:
            self.settle(delivery, Delivery.RELEASED)
        else:
            self.accept(delivery)
            event.connection.close()


def test_proton_delivery_failed_counts_and_released_does_not(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        c.create_sender(f"/queues/{name}").send(Message(body="m"))
    finally:
        c.close()
    retrier = _Retrier(_url(broker), f"/queues/{name}")
    Container(retrier).run()
    assert retrier.counts == [0, 1, 2, 3, 3, 3]
    with _pika(broker) as conn:
        assert conn.channel().queue_declare(name, passive=True).method.message_count == 0


# -- selectors -------------------------------------------------------------------------------


class _SelectedRecv(MessagingHandler):
    """Proton's selected_recv.py example: a receiver with ``Selector("colour = 'green'")``."""

    def __init__(self, url: str, address: str, expected: int) -> None:
        super().__init__()
        self.url, self.address, self.expected = url, address, expected
        self.bodies: list[str] = []
        self.filters: Any = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        event.container.create_receiver(conn, self.address, options=Selector("colour = 'green'"))

    def on_link_opened(self, event: Any) -> None:
        found = event.receiver.remote_source.filter
        found.rewind()
        found.next()
        self.filters = found.get_object()

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        if len(self.bodies) == self.expected:
            event.connection.close()


def test_proton_selected_receive_takes_only_what_matches(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    colours = ["red", "green"] * 5
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        sender = c.create_sender(f"/queues/{name}")
        for i, colour in enumerate(colours):  # proton's colour_send.py
            sender.send(Message(body=f"{colour} {i + 1}", properties={"colour": colour}))
    finally:
        c.close()
    recv = _SelectedRecv(_url(broker), f"/queues/{name}", 5)
    Container(recv).run()
    assert recv.bodies == [f"green {i}" for i in (2, 4, 6, 8, 10)]
    assert next(iter(recv.filters.values())).value == "colour = 'green'"  # applied: echoed
    # The others stayed, in order, for everyone else.
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        receiver = c.create_receiver(f"/queues/{name}", credit=10)
        rest = []
        for _ in range(5):
            rest.append(receiver.receive(timeout=5).body)
            receiver.accept()  # settles the oldest unsettled one
    finally:
        c.close()
    assert rest == [f"red {i}" for i in (1, 3, 5, 7, 9)]
    with _pika(broker) as conn:
        assert conn.channel().queue_declare(name, passive=True).method.message_count == 0


def test_selector_sees_later_and_released_messages_and_0_9_1_headers(
    broker: Broker, name: str
) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        receiver: Any = c.create_receiver(
            f"/queues/{name}", credit=10, options=Selector("size > 10 AND kind LIKE 'b%'")
        )
        with _pika(broker) as conn:
            ch = conn.channel()
            for size, kind in ((5, "big"), (20, "big"), (30, "small"), (40, "bulk")):
                ch.basic_publish(
                    "",
                    name,
                    f"{size}".encode(),
                    pika.BasicProperties(headers={"size": size, "kind": kind}),
                )
        # (proton's memoryview bodies do not outlive the next receive: compare properties)
        first = receiver.receive(timeout=5)
        assert first.properties == {"size": 20, "kind": "big"}
        receiver.release(delivered=False)  # back in front: the selector sees it again
        # 40 was sent already (credit 10), 20 comes again after it.
        again = []
        for _ in range(2):
            again.append(receiver.receive(timeout=5).properties["size"])
            receiver.accept()
        assert again == [40, 20]
        with pytest.raises(Exception, match="timed out"):
            receiver.receive(timeout=0.5)
    finally:
        c.close()
    with _pika(broker) as conn:
        assert conn.channel().queue_declare(name, passive=True).method.message_count == 2


def test_a_selector_receiver_of_a_deleted_queue_is_detached(broker: Broker, name: str) -> None:
    """The queue of a receiver with a selector is deleted: its link is detached with
    amqp:resource-deleted, as a plain receiver's is (before, it stayed attached to
    nothing, waiting for messages that could not come)."""
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        c.create_receiver(f"/queues/{name}", credit=10, options=Selector("size > 10"))
        with _pika(broker) as conn:
            conn.channel().queue_delete(name)
        with pytest.raises(LinkDetached, match="amqp:resource-deleted"):
            c.wait(lambda: False, timeout=5)
    finally:
        c.close()


def test_invalid_selector_is_refused(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        with pytest.raises(Exception, match="invalid-field"):
            c.create_receiver(f"/queues/{name}", options=Selector("colour = "))
    finally:
        c.close()
