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
from proton.reactor import Container
from proton.utils import BlockingConnection

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
