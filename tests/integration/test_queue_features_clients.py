"""Queue features with kombu (py-amqp) and aio-pika: a dead-letter round trip with x-death,
TTL expiry, max-length reject-publish nacks under publisher confirms, priority queues and
direct reply-to RPC. Every test also passes against RabbitMQ 3.10.
"""

# kombu ships py.typed but leaves most of its API unannotated.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

import aio_pika
import pytest
from aio_pika.exceptions import DeliveryError
from amqp.exceptions import MessageNacked
from kombu.connection import Connection
from kombu.entity import Exchange, Queue

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator

    from aio_pika.abc import AbstractIncomingMessage

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

TIMEOUT = 10.0


# ---------------------------------------------------------------- kombu (py-amqp)


@pytest.fixture
def kconn(broker: Broker) -> Iterator[Connection]:
    connection = Connection(
        broker.url,
        transport="pyamqp",
        connect_timeout=5,
        transport_options={"confirm_publish": True},
    )
    try:
        connection.connect()
        yield connection
    finally:
        connection.release()


@pytest.fixture
def cleanup(kconn: Connection, name: str) -> Iterator[None]:
    yield
    channel = kconn.channel()
    for queue in (name, f"{name}.dead"):
        channel.queue_delete(queue)
    channel.exchange_delete(f"{name}.dlx")
    channel.close()


def _get(kconn: Connection, queue: Queue, timeout: float = TIMEOUT) -> Any:
    """Poll ``queue`` with basic.get until a message arrives (None after ``timeout``)."""
    bound = queue(kconn.default_channel)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = bound.get(no_ack=True)
        if message is not None:
            return message
        time.sleep(0.02)
    return None


def _dead_letter_pair(kconn: Connection, name: str, **arguments: Any) -> tuple[Queue, Queue]:
    """A source queue dead-lettering through a fanout exchange into ``<name>.dead``."""
    dlx = Exchange(f"{name}.dlx", type="fanout", auto_delete=True)
    dead = Queue(f"{name}.dead", exchange=dlx)
    source = Queue(
        name,
        routing_key=name,
        queue_arguments={"x-dead-letter-exchange": dlx.name, **arguments},
    )
    channel = kconn.default_channel
    dead(channel).declare()
    source(channel).declare()
    return source, dead


def test_kombu_dead_letter_round_trip_with_x_death(
    kconn: Connection, name: str, cleanup: None
) -> None:
    source, dead = _dead_letter_pair(kconn, name)
    with kconn.Producer() as producer:
        producer.publish({"n": 1}, routing_key=name, headers={"app": "kombu"}, retry=False)
    received: list[Any] = []

    def on_message(body: Any, message: Any) -> None:
        received.append(body)
        message.reject(requeue=False)

    with kconn.Consumer(source, callbacks=[on_message], accept=["json"]):
        deadline = time.monotonic() + TIMEOUT
        while not received and time.monotonic() < deadline:
            try:
                kconn.drain_events(timeout=0.5)
            except TimeoutError:
                pass
    assert received == [{"n": 1}]
    message = _get(kconn, dead)
    assert message is not None
    assert message.decode() == {"n": 1}
    headers = message.headers
    assert headers["app"] == "kombu"
    (death,) = headers["x-death"]
    assert death["reason"] == "rejected"
    assert death["queue"] == name
    assert death["count"] == 1
    assert death["routing-keys"] == [name]
    assert headers["x-first-death-reason"] == "rejected"
    assert message.delivery_info["exchange"] == f"{name}.dlx"


def test_kombu_ttl_expiry_dead_letters(kconn: Connection, name: str, cleanup: None) -> None:
    _source, dead = _dead_letter_pair(kconn, name, **{"x-message-ttl": 100})
    with kconn.Producer() as producer:
        producer.publish(b"queue-ttl", routing_key=name, retry=False)
        # kombu takes ``expiration`` in seconds and sends milliseconds.
        producer.publish(b"own-ttl", routing_key=name, expiration=0.05, retry=False)
    first = _get(kconn, dead)
    second = _get(kconn, dead)
    assert first is not None
    assert second is not None
    assert [first.body, second.body] == [b"queue-ttl", b"own-ttl"]
    for message in (first, second):
        assert message.headers["x-death"][0]["reason"] == "expired"
    assert second.properties.get("expiration") is None  # removed when dead-lettered


def test_kombu_reject_publish_is_nacked_under_confirm_publish(
    kconn: Connection, name: str, cleanup: None
) -> None:
    queue = Queue(
        name,
        routing_key=name,
        queue_arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
    )
    queue(kconn.default_channel).declare()
    with kconn.Producer() as producer:
        producer.publish(b"fits", routing_key=name, retry=False)
        with pytest.raises(MessageNacked):
            producer.publish(b"refused", routing_key=name, retry=False)
        # The channel is still usable: the queue keeps the first message only.
        message = _get(kconn, queue)
        assert message is not None
        assert message.body == b"fits"
        producer.publish(b"fits again", routing_key=name, retry=False)


def test_kombu_priority_queue(kconn: Connection, name: str, cleanup: None) -> None:
    queue = Queue(name, routing_key=name, max_priority=10)
    queue(kconn.default_channel).declare()
    with kconn.Producer() as producer:
        for body, priority in ((b"low", 1), (b"none", None), (b"high", 9), (b"mid", 5)):
            producer.publish(body, routing_key=name, priority=priority, retry=False)
    bodies = []
    for _ in range(4):
        message = _get(kconn, queue)
        assert message is not None
        bodies.append(message.body)
    assert bodies == [b"high", b"mid", b"low", b"none"]


# ---------------------------------------------------------------- aio-pika


def run(factory: Callable[[], Coroutine[Any, Any, None]], timeout: float = 20.0) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(timeout):
            await factory()

    asyncio.run(guarded())


def test_aio_pika_direct_reply_to_rpc(broker: Broker, name: str) -> None:
    async def main() -> None:
        server_conn = await aio_pika.connect(broker.url)
        client_conn = await aio_pika.connect(broker.url)
        async with server_conn, client_conn:
            server = await server_conn.channel()
            requests = await server.declare_queue(name, auto_delete=True)

            async def serve(message: AbstractIncomingMessage) -> None:
                async with message.process():
                    assert message.reply_to is not None
                    assert message.reply_to.startswith("amq.rabbitmq.reply-to.")
                    await server.default_exchange.publish(
                        aio_pika.Message(
                            body=message.body.upper(), correlation_id=message.correlation_id
                        ),
                        routing_key=message.reply_to,
                    )

            await requests.consume(serve)
            client = await client_conn.channel()
            replies = await client.get_queue("amq.rabbitmq.reply-to", ensure=False)
            waiting: dict[str, asyncio.Future[bytes]] = {}

            async def on_reply(message: AbstractIncomingMessage) -> None:
                assert message.correlation_id is not None
                waiting.pop(message.correlation_id).set_result(message.body)

            await replies.consume(on_reply, no_ack=True)
            loop = asyncio.get_running_loop()
            results = []
            for text in (b"ping", b"pong"):
                correlation_id = uuid.uuid4().hex
                waiting[correlation_id] = loop.create_future()
                future = waiting[correlation_id]
                await client.default_exchange.publish(
                    aio_pika.Message(
                        body=text,
                        reply_to="amq.rabbitmq.reply-to",
                        correlation_id=correlation_id,
                    ),
                    routing_key=name,
                )
                results.append(await future)
            assert results == [b"PING", b"PONG"]

    run(main)


def test_aio_pika_dead_letter_and_reject_publish(broker: Broker, name: str) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(broker.url)
        async with connection:
            channel = await connection.channel()  # publisher confirms on by default
            dead = await channel.declare_queue(f"{name}.dead", auto_delete=True)
            queue = await channel.declare_queue(
                name,
                auto_delete=True,
                arguments={
                    "x-max-length": 1,
                    "x-overflow": "reject-publish",
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": dead.name,
                },
            )
            await channel.default_exchange.publish(aio_pika.Message(b"a"), routing_key=name)
            with pytest.raises(DeliveryError):
                await channel.default_exchange.publish(aio_pika.Message(b"b"), routing_key=name)
            message = await queue.get(timeout=5)
            await message.reject(requeue=False)
            deadline = time.monotonic() + TIMEOUT
            got = None
            while got is None and time.monotonic() < deadline:
                got = await dead.get(no_ack=True, fail=False)
                if got is None:
                    await asyncio.sleep(0.02)
            assert got is not None
            assert got.body == b"a"
            headers = got.headers
            deaths = headers["x-death"]
            assert isinstance(deaths, list)
            assert deaths[0]["reason"] == "rejected"  # type: ignore[index,call-overload]
            assert deaths[0]["queue"] == name  # type: ignore[index,call-overload]
            await queue.delete(if_unused=False, if_empty=False)

    run(main)
