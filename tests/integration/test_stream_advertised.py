"""``stream_advertised_host`` / ``stream_advertised_port`` (RabbitMQ's
``stream.advertised_host``/``_port``): a broker behind a forwarder (a container's published
port, a NAT) tells stream clients the forwarder's address, in ``open``'s
``advertised_host``/``advertised_port`` and in ``metadata``'s brokers, and RabbitMQ's own
client (rstream) publishes through it after asking the listener where the stream lives."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)

from tests.integration.conftest import start_broker
from tests.integration.forwarder import Forwarder
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

# Loopback, but not where the broker listens (127.0.0.1): only the forwarder is there.
ADVERTISED_HOST = "127.0.0.2"


@pytest.fixture
def behind_forwarder() -> Iterator[tuple[Broker, int, Forwarder]]:
    """A broker advertising the forwarder's address, its stream listener's port, and the
    forwarder (to that port)."""
    forwarder = Forwarder(ADVERTISED_HOST)
    broker = start_broker(
        env={
            "LEVERET_STREAM_ADVERTISED_HOST": ADVERTISED_HOST,
            "LEVERET_STREAM_ADVERTISED_PORT": str(forwarder.port),
        }
    )
    try:
        port = stream_port_of(broker)
        forwarder.upstream = ("127.0.0.1", port)
        yield broker, port, forwarder
    finally:
        broker.stop()
        forwarder.close()


async def _advertised_and_published(
    port: int, stream: str, bodies: list[bytes]
) -> tuple[tuple[str, str], tuple[str, int], list[bytes]]:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await producer.create_stream(stream)
        client = await producer.default_client
        assert client.server_properties is not None
        opened = (
            client.server_properties["advertised_host"],
            client.server_properties["advertised_port"],
        )
        leader, _replicas = await client.query_leader_and_replicas(stream)
        # rstream publishes on a connection to the leader metadata names: the forwarder.
        await producer.send_batch(stream, [AMQPMessage(body=b) for b in bodies])
    got: list[bytes] = []
    done = asyncio.Event()
    consumer = Consumer("127.0.0.1", port=port, username="guest", password="guest")

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        got.append(bytes(message.body))
        if len(got) == len(bodies):
            done.set()

    async with consumer:
        await consumer.subscribe(
            stream,
            on_message,
            decoder=amqp_decoder,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
        )
        await asyncio.wait_for(done.wait(), 20)
    return opened, (leader.host, int(leader.port)), got


def test_stream_clients_are_told_the_advertised_address_and_use_it(
    behind_forwarder: tuple[Broker, int, Forwarder],
) -> None:
    _broker, port, forwarder = behind_forwarder
    stream = f"advertised-{uuid.uuid4().hex[:8]}"
    bodies = [f"m{i}".encode() for i in range(5)]
    opened, leader, got = asyncio.run(_advertised_and_published(port, stream, bodies))
    assert opened == (ADVERTISED_HOST, str(forwarder.port))
    assert leader == (ADVERTISED_HOST, forwarder.port)
    assert got == bodies
    assert forwarder.accepted >= 1, "rstream published through the advertised address"
