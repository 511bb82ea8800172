"""Replicated streams through real clients: three ``leveret serve`` nodes on one etcd (lease
2 s), a stream declared with pika on node a, members on all three. The stream protocol's
``metadata`` names the leader and the replicas (rstream); a publisher with confirms on b,
then ``kill -9`` of a: a member is elected within seconds, publishing goes on (0-9-1 and
the stream protocol), a 0-9-1 consumer on a surviving node reads every confirmed message,
in order, at offsets without a gap, and so does rstream's consumer from the surviving
replica's copy; consumer offsets stored and queried (rstream) through any node are the
leader's and survive it; a comes back, follows and is in sync again."""

from __future__ import annotations

import asyncio
import signal
import time
from functools import partial
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
from rstream.exceptions import OffsetNotFound, ServerError

from tests.cluster import nodes
from tests.cluster.test_replicated_queues import (  # noqa: F401 (a fixture)
    NAMES,
    connect,
    publish,
    queue_info,
    record,
    three_nodes,
)
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


async def publish_confirmed(port: int, stream: str, body: bytes) -> None:
    """One stream-protocol publish, waiting for its publish_confirm."""
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await producer.send_wait(stream, AMQPMessage(body=body), timeout=10)


async def read_stream(port: int, stream: str, last: bytes) -> list[tuple[int, bytes]]:
    """(offset, body) of every message from the first until ``last``, by rstream's
    consumer (it subscribes on a replica when metadata lists one)."""
    got: list[tuple[int, bytes]] = []
    done = asyncio.Event()

    async def on_message(message: AMQPMessage, context: MessageContext) -> None:
        body = b"".join(message.body) if isinstance(message.body, list) else bytes(message.body)
        got.append((context.offset, body))
        if body == last:
            done.set()

    consumer = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    async with consumer:
        await consumer.subscribe(
            stream,
            on_message,
            decoder=amqp_decoder,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
        )
        await asyncio.wait_for(done.wait(), 20)
    return got


async def _leader_and_replicas(port: int, stream: str) -> tuple[int, list[int]]:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        client = await producer.default_client
        leader, replicas = await client.query_leader_and_replicas(stream)
        return int(leader.port), sorted(int(r.port) for r in replicas)


def consume_all(node: Node, stream: str, last: bytes) -> list[tuple[object, bytes]]:
    """(offset, body) of every message from the first until ``last`` is read."""
    conn = connect(node)
    got: list[tuple[object, bytes]] = []
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        for method, props, body in ch.consume(
            stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=10
        ):
            if method is None:
                break
            got.append(((props.headers or {}).get("x-stream-offset"), body))
            ch.basic_ack(method.delivery_tag)
            if body == last:
                break
        ch.cancel()
    finally:
        conn.close()
    return got


def test_stream_leader_killed_goes_on_from_a_replica_and_nothing_confirmed_is_lost(
    etcd_server: EtcdServer,
    three_nodes: tuple[str, list[Node]],  # noqa: F811 (the fixture)
) -> None:
    prefix, (a, b, c) = three_nodes
    stream = "rs"
    conn = connect(a)
    conn.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    shown = nodes.eventually(
        lambda: (q := queue_info(c, stream)).get("online") == list(NAMES) and q, timeout=10
    )
    assert shown["leader"] == "a@test"
    saved = record(etcd_server, prefix, stream)
    assert (saved["members"], saved["epoch"], saved["in_sync"]) == (list(NAMES), 1, list(NAMES))

    # metadata (asked of c) names a's stream listener as the leader, b's and c's as replicas.
    ports = {n.name: stream_port_of(n.broker) for n in (a, b, c)}
    leader, replicas = asyncio.run(_leader_and_replicas(ports["c@test"], stream))
    assert leader == ports["a@test"]
    assert replicas == sorted((ports["b@test"], ports["c@test"]))

    # Server-side offset tracking (rstream's store_offset/query_offset) through replicas'
    # nodes goes to the leader's log, as RabbitMQ's does: stored through b and through a,
    # read back through c (not the leader either); the leader sends each to its followers.
    asyncio.run(_store_offset(ports["b@test"], stream, "app", 7))
    asyncio.run(_store_offset(ports["a@test"], stream, "other", 3))
    assert asyncio.run(_query_offset(ports["c@test"], stream, "app")) == 7
    assert asyncio.run(_query_offset(ports["c@test"], stream, "other")) == 3
    assert asyncio.run(_query_offset(ports["b@test"], stream, "never stored")) is None
    asyncio.run(_store_offset(ports["c@test"], stream, "app", 8))

    # Publisher on b (not the leader), with confirms.
    pub = connect(b)
    ch = pub.channel()
    ch.confirm_delivery()
    confirmed: list[bytes] = []
    for i in range(100):
        body = f"m{i}".encode()
        assert publish(ch, stream, body)
        confirmed.append(body)

    a.broker.stop(signal.SIGKILL)
    killed = time.monotonic()
    # Publishing goes on from b: refused until a member is elected, then confirmed.
    first_confirm = None
    i = 100
    while time.monotonic() - killed < 20:
        body = f"m{i}".encode()
        i += 1
        if publish(ch, stream, body):
            confirmed.append(body)
            if first_confirm is None:
                first_confirm = time.monotonic() - killed
            if len(confirmed) >= 150:
                break
        else:
            time.sleep(0.05)
    pub.close()
    assert first_confirm is not None, "no confirm after the leader was killed"
    print(f"stream failover: first confirm {first_confirm:.3f} s after kill -9 of the leader")
    assert first_confirm < 3 * nodes.LEASE_TTL + 5
    info = queue_info(c, stream)
    assert info["leader"] in ("b@test", "c@test")
    assert info["online"] == ["b@test", "c@test"]
    saved = record(etcd_server, prefix, stream)
    assert saved["epoch"] == 2
    assert "a@test" not in saved["in_sync"]
    # The followers' copies kept the stored offsets: the elected member answers them,
    # through its own node and through the link to it; a store through the other goes on.
    for name in ("b@test", "c@test"):
        answer = nodes.eventually(partial(_answered, ports[name], stream, "app"), timeout=10)
        assert answer == 8
        assert asyncio.run(_query_offset(ports[name], stream, "other")) == 3
    follower = "b@test" if info["leader"] == "c@test" else "c@test"
    asyncio.run(_store_offset(ports[follower], stream, "app", 9))
    assert asyncio.run(_query_offset(ports[info["leader"]], stream, "app")) == 9

    # Read through the node that does not lead it now: every confirmed message, in
    # publishing order, at offsets 0, 1, 2, ... (what was refused may be there too).
    survivor = c if info["leader"] == "b@test" else b
    got = consume_all(survivor, stream, confirmed[-1])
    offsets = [offset for offset, _body in got]
    assert offsets == list(range(len(got)))
    bodies = [body for _offset, body in got]
    assert bodies[:100] == confirmed[:100]
    kept = iter(bodies)
    assert all(any(body == seen for seen in kept) for body in confirmed), "a confirm lost"

    # metadata names the new leader and the survivor as its one running replica; a
    # stream-protocol publish (the client goes to the leader) is confirmed, and rstream's
    # consumer, which subscribes on a replica, reads the same stream from the survivor's copy.
    leader, replicas = asyncio.run(_leader_and_replicas(ports[survivor.name], stream))
    assert leader == ports[info["leader"]]
    assert replicas == [ports[survivor.name]]
    asyncio.run(publish_confirmed(ports[survivor.name], stream, b"by the stream protocol"))
    read = asyncio.run(read_stream(ports[survivor.name], stream, b"by the stream protocol"))
    assert [(offset, body) for offset, body in read[: len(got)]] == got
    assert read[-1] == (len(read) - 1, b"by the stream protocol")

    # a comes back: its old log (epoch 1, perhaps with a tail nobody else has) is not the
    # stream; it follows the new leader with a copy of its own and is in sync again, and a
    # consumer through it reads the same stream.
    a2 = nodes.start_node(etcd_server, prefix, "a@test", a.data_dir)
    three_nodes[1][0] = a2
    nodes.eventually(lambda: "a@test" in record(etcd_server, prefix, stream)["in_sync"], timeout=15)
    assert queue_info(a2, stream)["online"] == list(NAMES)
    again = consume_all(a2, stream, b"by the stream protocol")
    assert again[: len(got)] == got


def test_stream_readers_go_on_after_their_offset_when_the_leader_is_killed(
    three_nodes: tuple[str, list[Node]],  # noqa: F811 (the fixture)
) -> None:
    """0-9-1 readers of the stream on b and on c, attached while a leads it: after ``kill
    -9`` of a, one of them is on the new leader (its reader moves into that node's copy)
    and the other reads through the link from the new leader; neither is cancelled, and
    each gets every offset once, in order, from where it was."""
    _prefix, (a, b, c) = three_nodes
    stream = "rs-readers"
    conn = connect(a)
    conn.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    nodes.eventually(lambda: queue_info(c, stream).get("online") == list(NAMES), timeout=10)

    readers = {node.name: connect(node) for node in (b, c)}
    got: dict[str, list[tuple[object, bytes]]] = {name: [] for name in readers}
    cancelled: list[str] = []
    for name, reader in readers.items():
        ch = reader.channel()
        ch.basic_qos(prefetch_count=20)

        def on_message(
            ch: object, method: object, props: object, body: bytes, name: str = name
        ) -> None:
            got[name].append(((props.headers or {}).get("x-stream-offset"), body))  # type: ignore[attr-defined]
            ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

        ch.add_on_cancel_callback(lambda _frame, name=name: cancelled.append(name))
        ch.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})

    def pump(until: bytes, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(
            got[n] and got[n][-1][1] == until for n in readers
        ):
            for reader in readers.values():
                reader.process_data_events(time_limit=0.02)

    pub = connect(b)
    ch = pub.channel()
    ch.confirm_delivery()
    confirmed: list[bytes] = []
    for i in range(60):
        body = f"r{i}".encode()
        assert publish(ch, stream, body)
        confirmed.append(body)
    pump(confirmed[-1], 10)
    assert all(len(got[n]) == 60 for n in readers), {n: len(v) for n, v in got.items()}

    a.broker.stop(signal.SIGKILL)
    killed = time.monotonic()
    i = 60
    while time.monotonic() - killed < 20 and len(confirmed) < 100:
        body = f"r{i}".encode()
        i += 1
        if publish(ch, stream, body):
            confirmed.append(body)
        else:
            time.sleep(0.05)
        for reader in readers.values():
            reader.process_data_events(time_limit=0)
    pub.close()
    assert len(confirmed) == 100, "publishing did not go on after the leader was killed"
    pump(confirmed[-1], 20)
    for reader in readers.values():
        reader.close()

    assert cancelled == []
    for name, seen in got.items():
        offsets = [offset for offset, _body in seen]
        assert offsets == list(range(len(seen))), f"{name}: offsets {offsets}"
        bodies = [body for _offset, body in seen]
        assert bodies[:60] == confirmed[:60]
        left = iter(bodies)
        assert all(any(m == body for body in left) for m in confirmed), f"{name}: a confirm lost"


async def _store_offset(port: int, stream: str, reference: str, offset: int) -> None:
    """rstream's store_offset through the node at ``port``, then its query on the same
    connection (the stream protocol's store has no answer: the query shows it landed)."""
    consumer = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    async with consumer:
        await consumer.store_offset(stream, reference, offset)
        assert await consumer.query_offset(stream, reference) == offset


async def _query_offset(port: int, stream: str, reference: str) -> int | None:
    consumer = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    async with consumer:
        try:
            return await consumer.query_offset(stream, reference)
        except OffsetNotFound:
            return None


def _answered(port: int, stream: str, reference: str) -> int | None:
    """The query's answer, None while the stream is not available (a failover)."""
    try:
        return asyncio.run(_query_offset(port, stream, reference))
    except ServerError:
        return None
