"""The older protocols' own classes against a real broker process, crossing to the
mainstream ones through the one core: 0-9's ``message`` transfers, 0-8/0-9 ``file``
staging and ``stream`` publishes, and AMQP/Fast, each consumed over AMQP 0-9-1 (pika) and
AMQP 1.0 (Qpid Proton), and messages of those protocols consumed by the older classes'
consumers. The older sides are the project's own clients over sockets
(``leveret.testing.LegacySocket``, ``FastSocket``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import Message, symbol
from proton.utils import BlockingConnection

from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp08._generated import properties as p08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09._generated import properties as p09
from leveret.protocol.amqp09.wiretypes import Content
from leveret.protocol.amqpfast.commands import MessageHeader
from leveret.protocol.amqpfast.events import ServiceType
from leveret.server.legacy.dialects import AMQP08, AMQP09
from leveret.testing import FastSocket, LegacySocket
from leveret.testing.amqpfast_client import Delivered, Replied

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(60)]


def _pika(broker: Broker) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters(host=broker.host, port=broker.port))


@pytest.fixture
def queue(broker: Broker, name: str) -> Iterator[str]:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    yield name
    with _pika(broker) as conn:
        conn.channel().queue_delete(name)


def _proton(broker: Broker) -> Any:
    return BlockingConnection(f"amqp://guest:guest@{broker.host}:{broker.port}", timeout=10)


def _receive_10(broker: Broker, queue: str) -> Any:
    c = _proton(broker)
    try:
        receiver = c.create_receiver(f"/queues/{queue}")
        message = receiver.receive(timeout=5)
        receiver.accept()
        return message
    finally:
        c.close()


def _send_10(broker: Broker, queue: str, message: Message) -> None:
    c = _proton(broker)
    try:
        c.create_sender(f"/queues/{queue}").send(message)
    finally:
        c.close()


def _legacy(broker: Broker, dialect: Any = AMQP09) -> LegacySocket:
    client = LegacySocket.open(broker.host, broker.port, dialect)
    client.handshake()
    client.open_channel(1)
    return client


def _answer(client: LegacySocket) -> Any:
    return client.next().method


def test_message_transfers_to_0_9_1_and_1_0(broker: Broker, queue: str) -> None:
    with _legacy(broker) as client:
        for i in range(2):
            client.send(
                1,
                m09.MessageTransfer(
                    routing_key=queue,
                    message_id=f"m-{i}",
                    content_type="text/plain",
                    delivery_mode=2,
                    application_headers={"n": i},
                    body=Content(b"over 0-9 #%d" % i),
                ),
            )
            assert isinstance(_answer(client), m09.MessageOk)
    with _pika(broker) as conn:
        _method, props, body = conn.channel().basic_get(queue, auto_ack=True)
    assert body == b"over 0-9 #0"
    assert (props.message_id, props.content_type, props.headers) == ("m-0", "text/plain", {"n": 0})
    got = _receive_10(broker, queue)
    assert bytes(got.body) == b"over 0-9 #1"
    assert (got.id, got.content_type, got.properties, got.durable) == (
        "m-1",
        "text/plain",
        {"n": 1},
        True,
    )


def test_1_0_and_0_9_1_messages_reach_a_message_consumer(broker: Broker, queue: str) -> None:
    _send_10(
        broker, queue, Message(body=b"from 1.0", inferred=True, id="p-1", properties={"k": "v"})
    )
    with _pika(broker) as conn:
        conn.channel().basic_publish(
            "", queue, b"from 0-9-1", pika.BasicProperties(correlation_id="c-2")
        )
    with _legacy(broker) as client:
        client.send(1, m09.MessageConsume(queue=queue, destination="in"))
        assert isinstance(_answer(client), m09.MessageOk)
        first, second = _answer(client), _answer(client)
        assert (first.destination, first.body, first.message_id) == (
            "in",
            Content(b"from 1.0"),
            "p-1",
        )
        assert first.application_headers["k"] == "v"
        assert (second.body, second.correlation_id) == (Content(b"from 0-9-1"), "c-2")
        client.send(1, m09.MessageOk())
        client.send(1, m09.MessageOk())
        client.send(1, m09.MessageCancel(destination="in"))
        assert isinstance(_answer(client), m09.MessageOk)
    with _pika(broker) as conn:
        assert conn.channel().queue_declare(queue, passive=True).method.message_count == 0


@pytest.mark.parametrize("dialect", [AMQP08, AMQP09], ids=["0-8", "0-9"])
def test_files_staged_over_the_old_protocols_and_back(
    broker: Broker, queue: str, dialect: Any
) -> None:
    mm = m08 if dialect is AMQP08 else m09
    pp = p08 if dialect is AMQP08 else p09
    payload = bytes(range(256)) * 1024  # 256 KiB: several frames
    with _legacy(broker, dialect) as client:
        client.send(1, mm.FileOpen(identifier=f"{queue}-f", content_size=len(payload)))
        assert client.expect(1, mm.FileOpenOk).staged_size == 0
        client.send_content(
            1, mm.FileStage(), payload, pp.FileProperties(filename="data.bin"), class_id=70
        )
        client.send(1, mm.FilePublish(routing_key=queue, identifier=f"{queue}-f"))
        client.send(1, mm.FileOpen(identifier=f"{queue}-g", content_size=5))
        client.expect(1, mm.FileOpenOk)  # the publish before it went through
    got = _receive_10(broker, queue)
    assert bytes(got.body) == payload
    # 0-9-1 headers named x-... are 1.0 message annotations (RabbitMQ's mapping).
    assert got.annotations[symbol("x-amqp-0-9-filename")] == "data.bin"
    assert got.durable
    # Back: a 1.0 message to a file consumer of the old protocol.
    _send_10(broker, queue, Message(body=b"to the file consumer", inferred=True, id="back"))
    with _legacy(broker, dialect) as client:
        client.send(1, mm.FileConsume(queue=queue, consumer_tag="files"))
        client.expect(1, mm.FileConsumeOk)
        offer = client.expect(1, mm.FileOpen)
        client.send(1, mm.FileOpenOk(staged_size=0))
        stage = client.expect_content(1, mm.FileStage)
        deliver = client.expect(1, mm.FileDeliver)
        assert (stage.body, stage.properties.message_id) == (b"to the file consumer", "back")
        assert deliver.identifier == offer.identifier
        client.send(1, mm.FileAck(delivery_tag=deliver.delivery_tag))
        client.send(1, mm.FileCancel(consumer_tag="files"))
        client.expect(1, mm.FileCancelOk)


def test_streamed_messages_cross_both_ways(broker: Broker, queue: str) -> None:
    with _legacy(broker, AMQP08) as client:
        props = p08.StreamProperties(content_type="audio/ogg", priority=7)
        client.send_content(1, m08.StreamPublish(routing_key=queue), b"packet", props, 80)
        client.send(1, m08.StreamQos(consume_rate=0))
        client.expect(1, m08.StreamQosOk)
    got = _receive_10(broker, queue)
    assert (bytes(got.body), got.content_type, got.priority, got.durable) == (
        b"packet",
        "audio/ogg",
        7,
        False,
    )
    with _legacy(broker, AMQP08) as client:
        client.send(1, m08.StreamConsume(queue=queue, consumer_tag="live"))
        client.expect(1, m08.StreamConsumeOk)
        _send_10(broker, queue, Message(body=b"live from 1.0", inferred=True, content_type="a/b"))
        delivered = client.expect_content(1, m08.StreamDeliver)
        assert (delivered.body, delivered.properties.content_type) == (b"live from 1.0", "a/b")
        assert (delivered.method.consumer_tag, delivered.method.queue) == ("live", queue)


def test_amqp_fast_and_1_0_exchange_messages(broker: Broker, queue: str) -> None:
    with FastSocket.connect(broker.host, broker.port, client_name=queue) as fast:
        client = fast.client
        client.open_channel(1)
        client.open_handle(
            1, 1, service=ServiceType.QUEUE, dest_name=queue, producer=True, consumer=True
        )
        header = MessageHeader(persistent=True, mime_type="text/plain", identifier="f-1")
        client.send(1, b"fast to 1.0", header=header, confirm_tag=3)
        fast.flush()
        assert fast.wait(Replied).confirm_tag == 3
        got = _receive_10(broker, queue)
        assert (bytes(got.body), got.id, got.content_type) == (b"fast to 1.0", "f-1", "text/plain")
        _send_10(broker, queue, Message(body=b"1.0 to fast", inferred=True, id="p"))
        client.consume(1, prefetch=5)
        fast.flush()
        delivered = fast.wait(Delivered)
        assert (delivered.body, delivered.header.identifier) == (b"1.0 to fast", "p")
        client.ack(1, delivered.message_nbr)
        fast.flush()
        fast.drain(0.2)
