"""A stream client connected over TLS (``stream_tls_port``, RabbitMQ's
``stream.listeners.ssl``) is told the TLS listener's port, in ``open``'s
``advertised_port`` and in ``metadata``'s brokers, or ``stream_advertised_tls_port``
(RabbitMQ's ``stream.advertised_tls_port``) when set, as RabbitMQ 3.10 does; a plain client
is told the plain port as before. rstream (with ``ssl_context``) publishes on a connection to
the leader metadata names, so it publishes only if that address speaks TLS."""

from __future__ import annotations

import asyncio
import re
import ssl
import time
import uuid
from typing import TYPE_CHECKING

import pytest
import trustme
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
    from pathlib import Path

    from tests.integration.conftest import Broker

# Left out of the compiled pass (scripts/test): the TLS listeners are not compiled.
pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

_STREAM_TLS = re.compile(r"listening on rabbitmq-stream\+tls://127\.0\.0\.1:(\d+)")


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls_env(directory: Path, ca: trustme.CA) -> dict[str, str]:
    """The settings of a broker with its TLS listeners on free ports."""
    certfile, keyfile = directory / "server.crt", directory / "server.key"
    cert = ca.issue_cert("127.0.0.1", "localhost", common_name="broker")
    cert.private_key_pem.write_to_path(str(keyfile))
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    return {
        "LEVERET_TLS_PORT": "0",
        "LEVERET_STREAM_TLS_PORT": "0",
        "LEVERET_TLS_CERTFILE": str(certfile),
        "LEVERET_TLS_KEYFILE": str(keyfile),
    }


def stream_tls_port_of(broker: Broker) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        match = _STREAM_TLS.search(broker.log_text())
        if match:
            return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError("no stream TLS listener:\n" + broker.log_text())


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def told_and_published(
    port: int, stream: str, context: ssl.SSLContext | None, *, create: bool = True
) -> tuple[str, tuple[str, int], list[bytes]]:
    """What a client on ``port`` (over TLS with ``context``) is told in ``open`` and for
    ``stream``'s leader in ``metadata``, and what it reads back after publishing there."""
    bodies = [f"m{i}".encode() for i in range(3)]
    login = {"username": "guest", "password": "guest", "ssl_context": context}
    async with Producer("127.0.0.1", port=port, **login) as producer:  # type: ignore[arg-type]
        if create:
            await producer.create_stream(stream)
        client = await producer.default_client
        assert client.server_properties is not None
        opened = client.server_properties["advertised_port"]
        leader, _replicas = await client.query_leader_and_replicas(stream)
        # rstream publishes on a connection to the leader metadata names (with TLS).
        await asyncio.wait_for(
            producer.send_batch(stream, [AMQPMessage(body=b) for b in bodies]), 20
        )
    got: list[bytes] = []
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        got.append(bytes(message.body))
        if len(got) >= len(bodies):
            done.set()

    async with Consumer("127.0.0.1", port=port, **login) as consumer:  # type: ignore[arg-type]
        await consumer.subscribe(
            stream,
            on_message,
            decoder=amqp_decoder,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
        )
        await asyncio.wait_for(done.wait(), 20)
    # (the stream may hold earlier publishes of the caller's: these come first)
    assert got[: len(bodies)] == bodies
    return opened, (leader.host, int(leader.port)), got


@pytest.fixture
def tls_broker(tmp_path: Path, ca: trustme.CA) -> Iterator[Broker]:
    broker = start_broker(env=tls_env(tmp_path, ca))
    try:
        yield broker
    finally:
        broker.stop()


def test_a_tls_stream_client_is_told_the_tls_port_and_a_plain_one_the_plain_port(
    tls_broker: Broker, ca: trustme.CA
) -> None:
    plain, tls = stream_port_of(tls_broker), stream_tls_port_of(tls_broker)
    stream = f"advtls-{uuid.uuid4().hex[:8]}"
    opened, leader, _ = asyncio.run(told_and_published(tls, stream, client_context(ca)))
    assert opened == str(tls)
    assert leader == ("127.0.0.1", tls)
    opened, leader, _ = asyncio.run(told_and_published(plain, f"{stream}-plain", None))
    assert opened == str(plain)
    assert leader == ("127.0.0.1", plain)


def test_a_tls_stream_client_is_told_stream_advertised_tls_port(
    tmp_path: Path, ca: trustme.CA
) -> None:
    forwarder = Forwarder("127.0.0.1")
    env = {
        **tls_env(tmp_path, ca),
        "LEVERET_STREAM_ADVERTISED_TLS_PORT": str(forwarder.port),
    }
    broker = start_broker(env=env)
    try:
        plain, tls = stream_port_of(broker), stream_tls_port_of(broker)
        forwarder.upstream = ("127.0.0.1", tls)
        stream = f"advtls-{uuid.uuid4().hex[:8]}"
        opened, leader, _ = asyncio.run(told_and_published(tls, stream, client_context(ca)))
        assert opened == str(forwarder.port)
        assert leader == ("127.0.0.1", forwarder.port)
        assert forwarder.accepted >= 1, "rstream published through the advertised TLS port"
        # The plain listener's clients are told the plain port all the same.
        opened, leader, _ = asyncio.run(told_and_published(plain, f"{stream}-plain", None))
        assert (opened, leader) == (str(plain), ("127.0.0.1", plain))
    finally:
        broker.stop()
        forwarder.close()
