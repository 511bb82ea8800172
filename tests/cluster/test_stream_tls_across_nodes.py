"""A stream led by another node, asked of over TLS: ``metadata`` on node a names the leader
node's TLS stream listener (its ``rabbitmq-stream+tls://`` listener, or its
``stream_advertised_tls_port`` from its record's ``stream_tls``) to a client that came over
TLS, as RabbitMQ 3.10 names each node's ``tls_port``, and its plain listener to a plain
client; rstream with ``ssl_context`` connected to a publishes where the stream lives."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pika
import pytest
import trustme
from rstream import Producer
from rstream.exceptions import LeaderNotAvailable

from tests.cluster import nodes
from tests.integration.forwarder import Forwarder
from tests.integration.test_stream_advertised_tls import (
    client_context,
    stream_tls_port_of,
    tls_env,
    told_and_published,
)
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterator
    from pathlib import Path

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def cluster(
    etcd_server: EtcdServer, tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA
) -> Iterator[tuple[EtcdServer, str, Node, Node]]:
    """Nodes a and b, each with its TLS listeners on free ports."""
    prefix = f"/leveret-test/streams-tls-{uuid.uuid4().hex[:8]}/"
    started: list[Node] = []
    try:
        for name in ("a@test", "b@test"):
            env = tls_env(tmp_path_factory.mktemp(name.split("@")[0]), ca)
            started.append(nodes.start_node(etcd_server, prefix, name, env=env))
        yield etcd_server, prefix, started[0], started[1]
    finally:
        for node in started:
            node.broker.stop()


def _led_by(node: Node, stream: str) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.broker.port))
    conn.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()


def _leader_told(port: int, stream: str, context: ssl.SSLContext | None) -> tuple[str, int]:
    """The leader a client on ``port`` (over TLS with ``context``) is told of in
    ``metadata`` once ``stream``'s record reached that node."""

    async def told() -> tuple[str, int] | None:
        login = {"username": "guest", "password": "guest", "ssl_context": context}
        async with Producer("127.0.0.1", port=port, **login) as producer:  # type: ignore[arg-type]
            client = await producer.default_client
            try:
                leader, _replicas = await client.query_leader_and_replicas(stream)
            except LeaderNotAvailable:  # not yet: the record reaches a after b made it
                return None
            return leader.host, int(leader.port)

    leader: tuple[str, int] = nodes.eventually(lambda: asyncio.run(told()), timeout=20)
    return leader


def _publishes(port: int, stream: str, context: ssl.SSLContext | None) -> tuple[str, int]:
    """The leader rstream published to and read from (it dials the one ``metadata``
    names, with TLS when it came over TLS); it fails unless that address answers."""
    _opened, leader, _got = asyncio.run(told_and_published(port, stream, context, create=False))
    return leader


def test_a_tls_client_on_a_is_told_b_tls_listener_for_a_stream_b_leads(
    cluster: tuple[EtcdServer, str, Node, Node], ca: trustme.CA
) -> None:
    _etcd, _prefix, a, b = cluster
    stream = f"stls-{uuid.uuid4().hex[:6]}"
    _led_by(b, stream)
    a_tls, b_tls = stream_tls_port_of(a.broker), stream_tls_port_of(b.broker)
    assert _leader_told(a_tls, stream, client_context(ca)) == ("127.0.0.1", b_tls)
    assert _publishes(a_tls, stream, client_context(ca)) == ("127.0.0.1", b_tls)
    # A plain client on a is told b's plain listener, as before.
    b_plain = ("127.0.0.1", stream_port_of(b.broker))
    assert _leader_told(stream_port_of(a.broker), stream, None) == b_plain
    assert _publishes(stream_port_of(a.broker), stream, None) == b_plain


def test_a_tls_client_on_a_is_told_the_leader_advertised_tls_port(
    cluster: tuple[EtcdServer, str, Node, Node],
    ca: trustme.CA,
    tmp_path: Path,
) -> None:
    etcd, prefix, a, _b = cluster
    forwarder = Forwarder("127.0.0.1")
    env = {**tls_env(tmp_path, ca), "LEVERET_STREAM_ADVERTISED_TLS_PORT": str(forwarder.port)}
    c = nodes.start_node(etcd, prefix, "c@test", env=env)
    try:
        forwarder.upstream = ("127.0.0.1", stream_tls_port_of(c.broker))
        stream = f"stls-{uuid.uuid4().hex[:6]}"
        _led_by(c, stream)
        a_tls = stream_tls_port_of(a.broker)
        assert _leader_told(a_tls, stream, client_context(ca)) == ("127.0.0.1", forwarder.port)
        assert _publishes(a_tls, stream, client_context(ca)) == ("127.0.0.1", forwarder.port)
        assert forwarder.accepted >= 1, "rstream published through c's advertised TLS port"
    finally:
        c.broker.stop()
        forwarder.close()
