"""A node behind an address other than the one it binds (a container, a NAT): node b's
``cluster_advertise`` and ``stream_advertised_host``/``_port`` name forwarders in front of
its real ports, and the other node dials them: a's link to b goes through the link's
forwarder (a queue led by b used through a with pika), and a's ``metadata`` names the
stream forwarder for a stream b leads (rstream)."""

from __future__ import annotations

import asyncio
import socket
import uuid
from typing import TYPE_CHECKING

import pika
import pytest
from rstream import Producer

from leveret.cluster.keys import Layout
from tests.cluster import nodes
from tests.integration.forwarder import Forwarder
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

# Loopback, but not where the nodes listen (127.0.0.1): only the forwarders are there.
ADVERTISED_HOST = "127.0.0.2"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _connect(node: Node) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )


async def _stream_leader(port: int, stream: str, *, create: bool) -> tuple[str, int]:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        if create:
            await producer.create_stream(stream)
        client = await producer.default_client
        leader, _replicas = await client.query_leader_and_replicas(stream)
        return leader.host, int(leader.port)


def test_the_others_dial_a_nodes_advertised_addresses(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    b_cluster_port = _free_port()
    link = Forwarder(ADVERTISED_HOST)
    link.upstream = ("127.0.0.1", b_cluster_port)
    streams = Forwarder(ADVERTISED_HOST)
    a = nodes.start_node(etcd_server, etcd_prefix, "a@test")
    started = [a]
    try:
        b = nodes.start_node(
            etcd_server,
            etcd_prefix,
            "b@test",
            cluster_port=b_cluster_port,
            env={
                "LEVERET_CLUSTER_ADVERTISE": f"{ADVERTISED_HOST}:{link.port}",
                "LEVERET_STREAM_ADVERTISED_HOST": ADVERTISED_HOST,
                "LEVERET_STREAM_ADVERTISED_PORT": str(streams.port),
            },
        )
        started.append(b)
        b_stream_port = stream_port_of(b.broker)
        streams.upstream = ("127.0.0.1", b_stream_port)

        # b's record names the advertised addresses, not the ones it binds.
        key = Layout(etcd_prefix).node("b@test").decode()
        [record] = nodes.etcd_values(etcd_server, key)
        assert record["cluster"] == f"{ADVERTISED_HOST}:{link.port}"
        assert record["stream"] == f"{ADVERTISED_HOST}:{streams.port}"

        # A queue b leads, published to and read through a: over the link a dialled at
        # b's advertised address (the forwarder), the only way it reaches b there.
        conn = _connect(b)
        conn.channel().queue_declare("q.advertised")
        conn.close()
        conn = _connect(a)
        ch = conn.channel()
        nodes.eventually(lambda: "q.advertised" in nodes.queue_names(a))
        ch.confirm_delivery()
        bodies = [b"m%d" % i for i in range(20)]
        for body in bodies:
            ch.basic_publish("", "q.advertised", body, mandatory=True)
        got = []
        for _ in bodies:
            method, _props, body = ch.basic_get("q.advertised", auto_ack=True)
            assert method is not None
            got.append(body)
        conn.close()
        assert got == bodies
        leader = next(q for q in b.get("queues/%2F") if q["name"] == "q.advertised")
        assert leader["node"] == "b@test"
        assert link.accepted >= 1, "a dialled b's link at its advertised address"

        # A stream b leads: a's metadata names b's advertised stream address.
        stream = f"advertised-{uuid.uuid4().hex[:8]}"
        own = asyncio.run(_stream_leader(b_stream_port, stream, create=True))
        assert own == (ADVERTISED_HOST, streams.port)
        a_stream_port = stream_port_of(a.broker)
        through_a = nodes.eventually(lambda: _leader_or_none(a_stream_port, stream), timeout=10)
        assert through_a == (ADVERTISED_HOST, streams.port)
    finally:
        for node in started:
            node.broker.stop()
        link.close()
        streams.close()


def _leader_or_none(port: int, stream: str) -> tuple[str, int] | None:
    try:
        return asyncio.run(_stream_leader(port, stream, create=False))
    except Exception:
        return None
