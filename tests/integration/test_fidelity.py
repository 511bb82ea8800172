"""RabbitMQ 3.10.8's behaviour where clients' own test suites found Leveret different
(issue 11), each through a real client. The wire-level scenarios with RabbitMQ's recorded
outcomes are in ``tests/conformance``; these show what an application sees. Every test here
also passes against RabbitMQ (``LEVERET_TEST_AMQP_URL``)."""

from __future__ import annotations

import asyncio
import datetime
import re
from typing import TYPE_CHECKING, Any

import aiormq
import amqp
import pika
import pika.exceptions
import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop


def test_aiormq_opens_channel_numbers_above_channel_max(broker: Broker) -> None:
    # aiormq picks channel numbers freely; channel_max bounds how many are open at once.
    async def run() -> list[int]:
        connection = await aiormq.connect(broker.url)
        try:
            numbers = []
            for number in (3000, 65535):
                channel = await connection.channel(channel_number=number)
                numbers.append(channel.number)
            return numbers
        finally:
            await connection.close()

    assert asyncio.run(run()) == [3000, 65535]


def test_py_amqp_gets_delete_ok_before_the_cancel_of_its_own_consumer(
    broker: Broker, name: str
) -> None:
    # kombu's "ack from another thread" test: py-amqp waits for queue.delete-ok and would
    # raise ConsumerCancelled if the server's basic.cancel came first.
    connection = amqp.Connection(f"{broker.host}:{broker.port}")
    connection.connect()
    try:
        channel = connection.channel()
        channel.queue_declare(name, auto_delete=False)
        cancelled: list[str] = []
        channel.basic_consume(name, callback=lambda m: None, on_cancel=cancelled.append)
        assert channel.queue_delete(name) == 0
        connection.drain_events(timeout=1)
        assert len(cancelled) == 1
    finally:
        connection.close()


def test_per_consumer_qos_after_a_global_one_lifts_it(broker: Broker, name: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = connection.channel()
        ch.queue_declare(name, exclusive=True)
        for _ in range(10):
            ch.basic_publish("", name, b"m")
        ch.basic_qos(prefetch_count=3, global_qos=True)
        ch.basic_qos(prefetch_count=2)
        got = {"a": 0, "b": 0}

        def count(tag: str) -> Any:
            return lambda *_: got.__setitem__(tag, got[tag] + 1)

        for tag in ("a", "b"):
            ch.basic_consume(name, count(tag), consumer_tag=tag)
        connection.process_data_events(time_limit=1.0)
        assert got == {"a": 2, "b": 2}
    finally:
        connection.close()


def test_publish_validation_of_delivery_mode_and_expiration(broker: Broker, name: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = connection.channel()
        ch.queue_declare(name)
        ch.confirm_delivery()
        ch.basic_publish("", name, b"a", pika.BasicProperties(expiration="+60000"))
        method, properties, _ = ch.basic_get(name, auto_ack=True)
        assert method is not None
        assert properties.expiration == "+60000"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.basic_publish("", name, b"b", pika.BasicProperties(delivery_mode=3))
        assert refused.value.reply_code == 406
        assert "delivery_mode_unknown,3" in refused.value.reply_text
        ch = connection.channel()
        ch.confirm_delivery()
        too_long = str(315_360_000_001)  # RabbitMQ's limit is ten years, in ms
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.basic_publish("", name, b"c", pika.BasicProperties(expiration=too_long))
        assert refused.value.reply_code == 406
        assert "value_too_large" in refused.value.reply_text
        connection.channel().queue_delete(name)
    finally:
        connection.close()


def test_declarations_as_rabbitmq_answers_them(broker: Broker, name: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = connection.channel()
        # Exchange arguments other than alternate-exchange may differ on redeclaration.
        ch.exchange_declare(name, "direct", arguments={"x-custom": 1})
        ch.exchange_declare(name, "direct", arguments={"x-custom": 2, "x-other": "y"})
        # Unbinding what does not exist succeeds.
        ch.queue_declare(name, exclusive=True)
        ch.queue_unbind(name, "no-such-exchange." + name, "k")
        ch.queue_unbind("no-such-queue." + name, name, "k")
        ch.exchange_delete(name)
        # Even a passive declare of the default exchange is refused.
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.exchange_declare("", "direct", passive=True)
        assert refused.value.reply_code == 403
    finally:
        connection.close()


def test_server_made_consumer_tags_have_rabbitmqs_shape(broker: Broker, name: str) -> None:
    # pika makes its own tags: py-amqp leaves it to the server.
    connection = amqp.Connection(f"{broker.host}:{broker.port}")
    connection.connect()
    try:
        channel = connection.channel()
        channel.queue_declare(name, exclusive=True)
        tag = channel.basic_consume(name, callback=lambda m: None)
        assert re.fullmatch(r"amq\.ctag-[A-Za-z0-9_-]{22}", tag)
    finally:
        connection.close()


def test_headers_exchange_compares_timestamps_as_integers(broker: Broker, name: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = connection.channel()
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, "amq.headers", arguments={"x-match": "all", "at": 1000})
        stamp = datetime.datetime.fromtimestamp(1000, tz=datetime.UTC)
        ch.basic_publish("amq.headers", "", b"t", pika.BasicProperties(headers={"at": stamp}))
        method, _properties, body = ch.basic_get(name, auto_ack=True)
        assert method is not None
        assert body == b"t"
    finally:
        connection.close()
