"""Interop: aio-pika (connect and connect_robust) and aiormq against a real broker process.

Tests are plain sync functions that run one coroutine with ``asyncio.run`` under an
``asyncio.timeout`` guard, so no pytest plugin is needed.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import aio_pika
import aiormq
import pytest
from aio_pika.exceptions import DeliveryError
from pamqp.commands import Basic

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from aio_pika.abc import AbstractIncomingMessage

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

TEST_TIMEOUT = 20.0


def run(factory: Callable[[], Coroutine[Any, Any, None]], timeout: float = TEST_TIMEOUT) -> None:
    """Run ``factory()`` on a fresh event loop (debug on), failing after ``timeout`` seconds."""

    async def guarded() -> None:
        async with asyncio.timeout(timeout):
            await factory()

    asyncio.run(guarded(), debug=True)


def test_robust_connection_declare_publish_iterate(broker: Broker, name: str) -> None:
    """aio-pika's README consumer/producer, with a direct exchange and a bound queue."""

    async def main() -> None:
        connection = await aio_pika.connect_robust(broker.url)
        async with connection:
            channel = await connection.channel()  # publisher confirms on by default
            exchange = await channel.declare_exchange(
                f"{name}.direct", aio_pika.ExchangeType.DIRECT, auto_delete=True
            )
            queue = await channel.declare_queue(name, auto_delete=True)
            await queue.bind(exchange, routing_key="key")
            for i in range(5):
                confirmation = await exchange.publish(
                    aio_pika.Message(body=f"Hello {i}".encode()), routing_key="key"
                )
                assert isinstance(confirmation, Basic.Ack)
            bodies: list[bytes] = []
            async with queue.iterator() as queue_iter:
                async for message in queue_iter:
                    async with message.process():  # acks on a clean exit
                        bodies.append(message.body)
                        assert message.routing_key == "key"
                        assert message.exchange == exchange.name
                    if len(bodies) == 5:
                        break
            assert bodies == [f"Hello {i}".encode() for i in range(5)]
            declared = await channel.declare_queue(name, passive=True)
            assert declared.declaration_result.message_count == 0

    run(main)


def test_connect_advertises_capabilities(broker: Broker) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            underlay = await channel.get_underlay_channel()
            amqp_conn = underlay.connection
            assert amqp_conn.publisher_confirms is True
            assert amqp_conn.basic_nack is True
            assert amqp_conn.consumer_cancel_notify is True
            assert amqp_conn.exchange_exchange_bindings is True
            props = amqp_conn.server_properties
            assert isinstance(props.get("product"), str)
            assert isinstance(props.get("version"), str)

    run(main)


def test_process_requeue_and_reject(broker: Broker, name: str) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(name, auto_delete=False)
            try:
                await channel.default_exchange.publish(aio_pika.Message(b"one"), routing_key=name)
                first = await queue.get(timeout=5)
                assert first is not None
                assert not first.redelivered
                with pytest.raises(RuntimeError, match="boom"):
                    async with first.process(requeue=True):
                        raise RuntimeError("boom")  # process() rejects with requeue
                again = await queue.get(timeout=5)
                assert again is not None
                assert again.body == b"one"
                assert again.redelivered
                await again.reject(requeue=False)
                assert await queue.get(fail=False, timeout=5) is None
            finally:
                await queue.delete(if_unused=False, if_empty=False)

    run(main)


def test_properties_and_headers_round_trip(broker: Broker, name: str) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(name, auto_delete=True, exclusive=True)
            stamp = datetime.datetime(2024, 5, 17, 12, 30, 45, tzinfo=datetime.UTC)
            headers: dict[str, Any] = {
                "str": "text",
                "bytes": bytearray(b"raw\x00bytes"),  # field type x
                "int": 7,
                "big": -(2**40),
                "float": 0.25,
                "bool": True,
                "none": None,
                "list": [1, "a", [2]],
                "table": {"k": "v"},
                "decimal": Decimal("3.14"),
            }
            await channel.default_exchange.publish(
                aio_pika.Message(
                    b"{}",
                    headers=headers,
                    content_type="application/json",
                    content_encoding="utf-8",
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    priority=3,
                    correlation_id="c-1",
                    reply_to="r-1",
                    expiration=30,
                    message_id="m-1",
                    timestamp=stamp,
                    type="kind",
                    user_id="guest",
                    app_id="tests",
                ),
                routing_key=name,
            )
            message = await queue.get(timeout=5, no_ack=True)
            assert message is not None
            assert message.body == b"{}"
            assert message.headers == headers
            assert message.content_type == "application/json"
            assert message.content_encoding == "utf-8"
            assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
            assert message.priority == 3
            assert message.correlation_id == "c-1"
            assert message.reply_to == "r-1"
            assert message.expiration == 30
            assert message.message_id == "m-1"
            assert message.timestamp == stamp
            assert message.type == "kind"
            assert message.user_id == "guest"
            assert message.app_id == "tests"

    run(main)


def test_set_qos_prefetch(broker: Broker, name: str) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            publisher = await connection.channel()
            queue_name = (await publisher.declare_queue(name, auto_delete=False)).name
            try:
                for i in range(3):
                    await publisher.default_exchange.publish(
                        aio_pika.Message(str(i).encode()), routing_key=queue_name
                    )
                channel = await connection.channel()
                await channel.set_qos(prefetch_count=1)
                queue = await channel.declare_queue(queue_name, passive=True)
                inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
                await queue.consume(inbox.put)

                first = await inbox.get()
                assert first.body == b"0"
                await asyncio.sleep(0.3)
                assert inbox.empty()  # prefetch 1: the rest waits for the ack
                ready = await publisher.declare_queue(queue_name, passive=True)
                assert ready.declaration_result.message_count == 2
                await first.ack()
                second = await inbox.get()
                assert second.body == b"1"
                await second.ack()
                third = await inbox.get()
                assert third.body == b"2"
                await third.ack()
            finally:
                await publisher.queue_delete(queue_name)

    run(main)


def test_rpc_with_exclusive_callback_queue(broker: Broker, name: str) -> None:
    """aio-pika's RPC tutorial: server-named exclusive reply queue and correlation_id."""

    async def main() -> None:
        # Not robust: a robust channel names its queues itself instead of asking the broker.
        connection = await aio_pika.connect(broker.url)
        async with connection:
            # Server side.
            server_channel = await connection.channel()
            rpc_queue = await server_channel.declare_queue(name, auto_delete=True)
            exchange = server_channel.default_exchange

            async def on_request(message: AbstractIncomingMessage) -> None:
                async with message.process():
                    n = int(message.body)
                    assert message.reply_to is not None
                    await exchange.publish(
                        aio_pika.Message(
                            body=str(n * n).encode(), correlation_id=message.correlation_id
                        ),
                        routing_key=message.reply_to,
                    )

            await rpc_queue.consume(on_request)

            # Client side.
            channel = await connection.channel()
            callback_queue = await channel.declare_queue(exclusive=True)
            assert callback_queue.name.startswith("amq.gen-")
            futures: dict[str, asyncio.Future[bytes]] = {}

            async def on_response(message: AbstractIncomingMessage) -> None:
                assert message.correlation_id is not None
                futures.pop(message.correlation_id).set_result(message.body)

            await callback_queue.consume(on_response, no_ack=True)

            async def call(n: int) -> int:
                correlation_id = str(uuid.uuid4())
                future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
                futures[correlation_id] = future
                await channel.default_exchange.publish(
                    aio_pika.Message(
                        str(n).encode(),
                        content_type="text/plain",
                        correlation_id=correlation_id,
                        reply_to=callback_queue.name,
                    ),
                    routing_key=name,
                )
                return int(await future)

            assert await asyncio.gather(*(call(n) for n in range(10))) == [n * n for n in range(10)]

    run(main)


def test_mandatory_publish_to_nowhere(broker: Broker, name: str) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            raising = await connection.channel(on_return_raises=True)
            with pytest.raises(DeliveryError) as excinfo:
                await raising.default_exchange.publish(
                    aio_pika.Message(b"lost"), routing_key=f"{name}.nowhere", mandatory=True
                )
            frame = excinfo.value.frame
            assert isinstance(frame, Basic.Return)
            assert frame.reply_code == 312
            assert frame.reply_text == "NO_ROUTE"

            returned: list[AbstractIncomingMessage] = []
            channel = await connection.channel()
            channel.return_callbacks.add(lambda _ch, message: returned.append(message))
            result = await channel.default_exchange.publish(
                aio_pika.Message(b"back", message_id="id-1"),
                routing_key=f"{name}.nowhere",
                mandatory=True,
            )
            assert not isinstance(result, Basic.Ack)  # the returned message, not an ack
            assert [(m.body, m.message_id) for m in returned] == [(b"back", "id-1")]

            # Without mandatory an unroutable message is dropped but still confirmed.
            result = await channel.default_exchange.publish(
                aio_pika.Message(b"dropped"), routing_key=f"{name}.nowhere", mandatory=False
            )
            assert isinstance(result, Basic.Ack)

    run(main)


def test_exchange_to_exchange_binding(broker: Broker, name: str) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()
            source = await channel.declare_exchange(
                f"{name}.src", aio_pika.ExchangeType.TOPIC, auto_delete=True
            )
            dest = await channel.declare_exchange(
                f"{name}.dst", aio_pika.ExchangeType.FANOUT, auto_delete=True
            )
            await dest.bind(source, routing_key="a.#")
            queue = await channel.declare_queue(exclusive=True)
            await queue.bind(dest)
            for key in ("a.b", "b.a", "a"):
                await source.publish(aio_pika.Message(key.encode()), routing_key=key)
            got = []
            while (message := await queue.get(fail=False, no_ack=True)) is not None:
                got.append(message.body)
            assert got == [b"a.b", b"a"]
            await dest.unbind(source, routing_key="a.#")
            # RabbitMQ deletes an auto-delete exchange when its last binding as a source goes,
            # exchange-to-exchange bindings included.
            with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):
                await channel.declare_exchange(source.name, passive=True)

    run(main)


def test_aiormq_low_level(broker: Broker, name: str) -> None:
    async def main() -> None:
        connection = await aiormq.connect(broker.url)
        try:
            channel = await connection.channel()
            declare_ok = await channel.queue_declare(name, auto_delete=True)
            assert declare_ok.queue == name
            assert declare_ok.message_count == 0
            for i in range(3):
                confirmation = await channel.basic_publish(
                    f"m{i}".encode(),
                    routing_key=name,
                    properties=aiormq.spec.Basic.Properties(headers={"i": i}),
                )
                assert isinstance(confirmation, Basic.Ack)
            got = await channel.basic_get(name, no_ack=False)
            assert got.body == b"m0"
            assert got.header.properties.headers == {"i": 0}
            assert isinstance(got.delivery, Basic.GetOk)
            assert got.delivery.message_count == 2
            assert got.delivery_tag is not None
            await channel.basic_ack(got.delivery_tag)

            received: asyncio.Queue[aiormq.abc.DeliveredMessage] = asyncio.Queue()
            consume_ok = await channel.basic_consume(name, received.put, no_ack=False)
            assert consume_ok.consumer_tag is not None
            for expected in (b"m1", b"m2"):
                message = await received.get()
                assert message.body == expected
                assert isinstance(message.delivery, Basic.Deliver)
                assert message.delivery_tag is not None
                await channel.basic_ack(message.delivery_tag)
            await channel.basic_cancel(consume_ok.consumer_tag)
            delete_ok = await channel.queue_delete(name)
            assert delete_ok.message_count == 0
        finally:
            await connection.close()

    run(main)
