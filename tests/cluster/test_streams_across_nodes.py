"""A stream led by another node, through the stream protocol: ``metadata`` on any node
names the leader node's stream listener, as RabbitMQ names the leader's, so RabbitMQ's own
client (rstream) connected to one node publishes and reads where the stream lives."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pika
import pika.exceptions
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
from rstream.exceptions import PreconditionFailed, StreamAlreadyExists

from tests.cluster import nodes
from tests.integration.test_stream_protocol import stream_port_of, told_of_deletion

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture(scope="module")
def two(etcd_server: EtcdServer) -> Iterator[tuple[Node, Node]]:
    yield from nodes.two_nodes(etcd_server, f"/leveret-test/streams-{uuid.uuid4().hex[:8]}/")


async def _leader_port(port: int, stream: str) -> int | None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        client = await producer.default_client
        try:
            leader, _replicas = await client.query_leader_and_replicas(stream)
        except Exception:
            return None
        return int(leader.port)


async def _publish_and_read(port: int, stream: str, bodies: list[bytes]) -> list[bytes]:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
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
    return got


def test_a_stream_led_by_b_is_used_through_a(two: tuple[Node, Node]) -> None:
    a, b = two
    stream = f"s-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    conn.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    a_port, b_port = stream_port_of(a.broker), stream_port_of(b.broker)
    leader = nodes.eventually(lambda: asyncio.run(_leader_port(a_port, stream)))
    assert leader == b_port
    bodies = [b"one", b"two", b"three"]
    assert asyncio.run(_publish_and_read(a_port, stream, bodies)) == bodies


def test_an_amqp091_consumer_on_a_reads_a_stream_led_by_b_from_its_offset(
    two: tuple[Node, Node],
) -> None:
    """The consumer's x-stream-offset crosses the link with its consume: it starts where
    it asked (here at offset 2 of 5), each delivery stamped with its offset."""
    a, b = two
    stream = f"s091-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    ch = conn.channel()
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", stream, f"m{i}".encode())
    conn.close()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", a.broker.port))
    try:
        ch = conn.channel()
        nodes.eventually(lambda: _declared(ch, stream))
        ch.basic_qos(prefetch_count=10)
        got: list[tuple[bytes, object]] = []
        for method, props, body in ch.consume(
            stream, arguments={"x-stream-offset": 2}, inactivity_timeout=5
        ):
            if method is None:
                break
            got.append((body, (props.headers or {}).get("x-stream-offset")))
            ch.basic_ack(method.delivery_tag)
            if len(got) == 3:
                break
        ch.cancel()
    finally:
        conn.close()
    assert got == [(b"m2", 2), (b"m3", 3), (b"m4", 4)]


def _declared(ch: pika.adapters.blocking_connection.BlockingChannel, stream: str) -> bool:
    ch.queue_declare(stream, passive=True)
    return True


def test_a_bad_stream_offset_through_another_node_is_406_and_the_link_goes_on(
    two: tuple[Node, Node],
) -> None:
    """As on one node: basic.consume with an unusable x-stream-offset closes the channel
    with 406; the leader, had it been asked, would refuse the consumer without dropping
    the link that every other queue of b uses from a."""
    a, b = two
    stream = f"sbad-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    conn.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", a.broker.port))
    try:
        ch = conn.channel()
        nodes.eventually(lambda: _declared(ch, stream))
        ch.basic_qos(prefetch_count=10)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.basic_consume(stream, lambda *_: None, arguments={"x-stream-offset": "5X"})
        assert refused.value.reply_code == 406
        assert '{invalid_stream_offset_arg,{longstr,<<"5X">>}}' in refused.value.reply_text
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", stream, b"after")  # confirmed by b: the link is up
    finally:
        conn.close()
    assert not any("internal error" in line for line in b.broker.log)


async def _create(port: int, stream: str, arguments: dict[str, object]) -> str:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        try:
            await producer.create_stream(stream, arguments=arguments)
        except StreamAlreadyExists:
            return "exists"
        except PreconditionFailed:
            return "precondition failed"
        return "ok"


async def _create_on_both(ports: tuple[int, int], stream: str) -> list[str]:
    return list(
        await asyncio.gather(
            _create(ports[0], stream, {"max-length-bytes": 1_000_000}),
            _create(ports[1], stream, {"max-length-bytes": 1_000_000}),
        )
    )


def test_a_stream_created_on_both_nodes_at_once_is_made_once(two: tuple[Node, Node]) -> None:
    """The stream protocol's create goes to etcd before it is answered: of two nodes'
    clients creating the same stream at once, one is told OK and the other that it exists
    (each node used to make its own and answer OK), and both nodes name one leader."""
    a, b = two
    ports = (stream_port_of(a.broker), stream_port_of(b.broker))
    for round_ in range(3):
        stream = f"both-{round_}-{uuid.uuid4().hex[:6]}"
        answers = asyncio.run(_create_on_both(ports, stream))
        assert sorted(answers) == ["exists", "ok"], answers
        leaders = {asyncio.run(_leader_port(port, stream)) for port in ports}
        assert len(leaders) == 1
        assert leaders <= set(ports)


async def _create_super_stream(port: int, name: str, count: int) -> str:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        client = await producer.default_client
        keys = [str(i) for i in range(count)]
        try:
            await client.create_super_stream(name, [f"{name}-{k}" for k in keys], keys)
        except StreamAlreadyExists:
            return "exists"
        except PreconditionFailed:
            return "precondition failed"
        return "ok"


async def _create_super_stream_on_both(ports: tuple[int, int], name: str) -> list[str]:
    return list(
        await asyncio.gather(
            _create_super_stream(ports[0], name, 2), _create_super_stream(ports[1], name, 3)
        )
    )


def test_a_super_stream_created_on_both_nodes_at_once_is_made_once(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    """The stream protocol's create_super_stream goes to etcd before it is answered, its
    exchange deciding: of two nodes' clients creating one super stream at once (2
    partitions through a, 3 through b), one is told OK and the other that it exists, and
    etcd holds the winner's partitions and bindings only (each node used to make its own
    and answer OK, etcd keeping a mix of the two)."""
    a, b = two
    ports = (stream_port_of(a.broker), stream_port_of(b.broker))
    for round_ in range(3):
        name = f"super-{round_}-{uuid.uuid4().hex[:6]}"
        answers = asyncio.run(_create_super_stream_on_both(ports, name))
        assert sorted(answers) == ["exists", "ok"], answers
        count = 2 if answers[0] == "ok" else 3
        partitions = [f"{name}-{i}" for i in range(count)]
        bindings = nodes.etcd_values(etcd_server, f"{a.prefix}entities/bindings/%2F/", prefix=True)
        bound = sorted(x["destination"] for x in bindings if x["source"] == name)
        assert bound == partitions
        queues = nodes.etcd_values(
            etcd_server, f"{a.prefix}entities/queues/%2F/{name}-", prefix=True
        )
        assert len(queues) == count
        assert len(nodes.etcd_values(etcd_server, f"{a.prefix}entities/exchanges/%2F/{name}")) == 1


async def _partitions_and_route(port: int, name: str, key: str) -> tuple[list[str], list[str]]:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        client = await producer.default_client
        return list(await client.partitions(name)), list(await client.route(key, name))


async def _delete_super_stream(port: int, name: str) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        client = await producer.default_client
        await client.delete_super_stream(name)


def test_a_super_stream_made_through_a_is_listed_routed_and_deleted_on_b(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    """Its partitions are led by a (client-local); on b they are proxies, which b's
    ``partitions`` and ``route`` answer as a's do, and which b's ``delete_super_stream``
    deletes with the exchange (before, b answered none of them, and its deletion left
    the partitions in the cluster)."""
    a, b = two
    name = f"listed-{uuid.uuid4().hex[:6]}"
    port_a, port_b = stream_port_of(a.broker), stream_port_of(b.broker)
    assert asyncio.run(_create_super_stream(port_a, name, 3)) == "ok"
    expected = ([f"{name}-0", f"{name}-1", f"{name}-2"], [f"{name}-1"])
    assert asyncio.run(_partitions_and_route(port_a, name, "1")) == expected
    nodes.eventually(
        lambda: asyncio.run(_partitions_and_route(port_b, name, "1")) == expected, timeout=5
    )
    asyncio.run(_delete_super_stream(port_b, name))
    records = f"{a.prefix}entities/queues/%2F/{name}-"
    nodes.eventually(lambda: nodes.etcd_values(etcd_server, records, prefix=True) == [], timeout=5)
    nodes.eventually(
        lambda: asyncio.run(_partitions_and_route(port_a, name, "1")) == ([], []), timeout=5
    )


def _known(port: int, stream: str) -> bool:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        conn.channel().queue_declare(stream, passive=True)
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if conn.is_open:
            conn.close()
    return True


def test_a_stream_deleted_through_another_node_tells_its_stream_clients(
    two: tuple[Node, Node],
) -> None:
    """A stream led by b alone (one member: no replication tells of a leader deposed),
    published to and read by rstream clients of b, deleted through a over 0-9-1: b
    applies the deletion from etcd's watch, and its clients are told (metadata_update), as
    RabbitMQ tells them whichever node deleted it."""
    a, b = two
    stream = f"sgone-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    conn.channel().queue_declare(
        stream,
        durable=True,
        arguments={"x-queue-type": "stream", "x-initial-cluster-size": 1},
    )
    conn.close()
    nodes.eventually(lambda: _known(a.broker.port, stream))

    def delete_through_a() -> None:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", a.broker.port))
        try:
            conn.channel().queue_delete(stream)
        finally:
            conn.close()

    told = asyncio.run(told_of_deletion(stream_port_of(b.broker), stream, delete_through_a))
    assert told == ([stream], [stream])
