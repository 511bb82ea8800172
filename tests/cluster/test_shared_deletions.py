"""A client's queue deletion on a cluster node goes to etcd before it is answered: once the
client has delete-ok (or its front end's answer), etcd has lost the record and the node
that led the queue has lost it too, so a passive declaration there gets 404 (before, the
model deleted first and the record went from etcd just after the answer).

Made deterministic by stopping etcd (SIGSTOP) while the deletion is asked: an answer that
does not wait for etcd arrives meanwhile, and the leader, which learns of deletions from
etcd's watch, still has the queue then; an answer that waits arrives once etcd runs again
(SIGCONT) and has accepted the deletion."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import uuid
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest
from rstream import Producer
from rstream.exceptions import StreamDoesNotExist

from leveret.protocol.amqp010._generated.commands import QueueDelete, QueueQuery
from leveret.protocol.amqpfast.events import ServiceType
from leveret.testing.amqpfast_client import Replied
from leveret.testing.amqpfast_socket import FastSocket
from tests.cluster import nodes
from tests.integration.test_amqp010 import Client010
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

# How long etcd stays stopped: well within the nodes' lease (nodes.LEASE_TTL, 2 s).
PAUSE = 0.6


@pytest.fixture(scope="module")
def two(etcd_server: EtcdServer) -> Iterator[tuple[Node, Node]]:
    yield from nodes.two_nodes(etcd_server, f"/leveret-test/deletes-{uuid.uuid4().hex[:8]}/")


def connect(node: Node) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )


def _queue_of(node: Node, name: str) -> dict[str, Any] | None:
    return next((q for q in node.get("queues/%2F") if q["name"] == name), None)


@contextlib.contextmanager
def _stopped(process: subprocess.Popen[Any] | None) -> Iterator[None]:
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        process.send_signal(signal.SIGCONT)


def _while_stopped(
    process: subprocess.Popen[Any] | None, delete: Callable[[], object]
) -> dict[str, object]:
    """Run ``delete`` (the client's deletion, then its look at the leader) in a thread
    while ``process`` (etcd, or the leader's node) is stopped for ``PAUSE`` seconds; what
    it saw, and whether it was answered while the process was stopped."""
    seen: dict[str, object] = {}
    answered = threading.Event()

    def run() -> None:
        seen["result"] = delete()
        answered.set()

    thread = threading.Thread(target=run)
    with _stopped(process):
        thread.start()
        seen["while_stopped"] = answered.wait(PAUSE)
    thread.join(30)
    assert answered.is_set()
    return seen


def _while_etcd_stopped(etcd: EtcdServer, delete: Callable[[], object]) -> dict[str, object]:
    return _while_stopped(etcd.process, delete)


def _answered_once_gone(
    seen: dict[str, object], etcd: EtcdServer, node: Node, name: str, result: object
) -> None:
    """The deletion was not answered while etcd was stopped, answered ``result``, and its
    queue's record is gone from etcd."""
    assert seen["while_stopped"] is False  # not answered before etcd had it
    assert seen["result"] == result
    assert nodes.etcd_values(etcd, f"{node.prefix}entities/queues/%2F/{name}") == []


def _passive(conn: pika.BlockingConnection, name: str) -> int:
    """A passive queue.declare of ``name`` on a new channel of ``conn`` (opened before the
    timed part of a test): 200, or the reply code refusing it."""
    try:
        conn.channel().queue_declare(name, passive=True)
        return 200
    except pika.exceptions.ChannelClosedByBroker as exc:
        return int(exc.reply_code)


def _passive_on(node: Node, name: str) -> int:
    """A passive queue.declare of ``name`` on ``node``: 200, or the reply code refusing it."""
    conn = connect(node)
    try:
        return _passive(conn, name)
    finally:
        if conn.is_open:
            conn.close()


def test_a_091_delete_through_another_node_is_answered_once_etcd_and_the_leader_lost_it(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    name = f"del091-{uuid.uuid4().hex[:6]}"
    conn = connect(b)  # led by b (client-local, the default locator)
    ch = conn.channel()
    ch.queue_declare(name, durable=True)
    ch.confirm_delivery()
    for _ in range(2):
        ch.basic_publish("", name, b"m")
    conn.close()
    assert nodes.eventually(lambda: _queue_of(a, name))["node"] == b.name
    deleter = connect(a)
    # A consumer on the deleting channel: its cancel comes after delete-ok, as on one node.
    cancelled: list[str] = []
    ch = deleter.channel()
    ch.add_on_cancel_callback(cancelled.append)
    ch.basic_qos(prefetch_count=1)  # one of the two delivered (unacknowledged), one ready
    ch.basic_consume(name, lambda *_: None)
    leader = connect(b)

    def delete() -> tuple[int, int]:
        count = ch.queue_delete(name).method.message_count
        return count, _passive(leader, name)

    try:
        seen = _while_etcd_stopped(etcd_server, delete)
        deleter.process_data_events(time_limit=0.2)
    finally:
        deleter.close()
        if leader.is_open:
            leader.close()
    _answered_once_gone(
        seen, etcd_server, a, name, (1, 404)
    )  # the leader's count; the leader has lost it
    assert len(cancelled) == 1
    assert _passive_on(a, name) == 404


def test_a_091_delete_on_the_leader_is_in_etcd_when_answered(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    name = f"del091l-{uuid.uuid4().hex[:6]}"
    conn = connect(a)
    ch = conn.channel()
    ch.queue_declare(name, durable=False)
    ch.confirm_delivery()
    ch.basic_publish("", name, b"m")
    nodes.eventually(lambda: _queue_of(b, name))

    def delete() -> int:
        return int(ch.queue_delete(name).method.message_count)

    try:
        seen = _while_etcd_stopped(etcd_server, delete)
    finally:
        conn.close()
    _answered_once_gone(seen, etcd_server, a, name, 1)
    assert _passive_on(b, name) == 404


async def _stream_command(port: int, command: Callable[[Any], Any]) -> None:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await command(producer)


def test_a_stream_protocol_delete_stream_is_answered_once_etcd_lost_it(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    stream = f"delstream-{uuid.uuid4().hex[:6]}"
    port = stream_port_of(a.broker)
    asyncio.run(_stream_command(port, lambda p: p.create_stream(stream)))
    nodes.eventually(lambda: _queue_of(b, stream))

    seen = _while_etcd_stopped(
        etcd_server, lambda: asyncio.run(_stream_command(port, lambda p: p.delete_stream(stream)))
    )
    assert seen["while_stopped"] is False
    assert nodes.etcd_values(etcd_server, f"{a.prefix}entities/queues/%2F/{stream}") == []
    assert _passive_on(b, stream) == 404


def test_a_stream_protocol_delete_of_a_stream_led_by_another_node_is_answered_once_it_lost_it(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    stream = f"delled-{uuid.uuid4().hex[:6]}"
    asyncio.run(_stream_command(stream_port_of(b.broker), lambda p: p.create_stream(stream)))
    assert nodes.eventually(lambda: _queue_of(a, stream))["node"] == b.name

    # Through a, which has only b's stream's proxy (RabbitMQ deletes a stream from any node).
    port_a = stream_port_of(a.broker)
    seen = _while_etcd_stopped(
        etcd_server,
        lambda: asyncio.run(_stream_command(port_a, lambda p: p.delete_stream(stream))),
    )
    assert seen["while_stopped"] is False
    assert nodes.etcd_values(etcd_server, f"{a.prefix}entities/queues/%2F/{stream}") == []
    assert _passive_on(b, stream) == 404  # the leader has lost it by the answer
    assert _passive_on(a, stream) == 404


async def _super_stream_command(port: int, command: Callable[[Any], Any]) -> Any:
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        return await command(await producer.default_client)


def test_a_delete_super_stream_through_another_node_is_answered_once_etcd_and_leader_lost_it(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    name = f"delsuper-{uuid.uuid4().hex[:6]}"
    port_a, port_b = stream_port_of(a.broker), stream_port_of(b.broker)
    partitions = [f"{name}-0", f"{name}-1"]
    asyncio.run(
        _super_stream_command(port_a, lambda c: c.create_super_stream(name, partitions, ["0", "1"]))
    )
    nodes.eventually(
        lambda: (
            asyncio.run(_super_stream_command(port_b, lambda c: c.partitions(name))) == partitions
        )
    )
    seen = _while_etcd_stopped(
        etcd_server,
        lambda: asyncio.run(_super_stream_command(port_b, lambda c: c.delete_super_stream(name))),
    )
    assert seen["while_stopped"] is False
    assert nodes.etcd_values(etcd_server, f"{a.prefix}entities/exchanges/%2F/{name}") == []
    records = f"{a.prefix}entities/queues/%2F/{name}-"
    assert nodes.etcd_values(etcd_server, records, prefix=True) == []
    # a led the partitions: it has lost them by the time b answered.
    assert all(_passive_on(a, stream) == 404 for stream in partitions)


async def _deletions_at_once(ports: list[int], name: str, etcd: EtcdServer) -> list[object]:
    """``delete_super_stream(name)`` through each of ``ports`` at once, asked while etcd is
    stopped (so each node checks its copy, which still has the super stream): what each
    answered, None for OK or the exception it raised."""
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for port in ports:
            producer = await stack.enter_async_context(
                Producer("127.0.0.1", port=port, username="guest", password="guest")
            )
            clients.append(await producer.default_client)
        with _stopped(etcd.process):
            asked = asyncio.gather(
                *(client.delete_super_stream(name) for client in clients), return_exceptions=True
            )
            await asyncio.sleep(PAUSE)
        return list(await asked)


@pytest.mark.parametrize("leader", [0, 1])
def test_concurrent_delete_super_streams_on_two_nodes_answer_one_ok_and_one_does_not_exist(
    two: tuple[Node, Node], etcd_server: EtcdServer, leader: int
) -> None:
    a, b = two
    ports = [stream_port_of(a.broker), stream_port_of(b.broker)]
    name = f"delrace-{uuid.uuid4().hex[:6]}"
    partitions = [f"{name}-0", f"{name}-1"]
    # Made through one node (its partitions led there), seen by the other.
    asyncio.run(
        _super_stream_command(
            ports[leader], lambda c: c.create_super_stream(name, partitions, ["0", "1"])
        )
    )
    other = ports[1 - leader]

    def listed() -> bool:
        return bool(
            asyncio.run(_super_stream_command(other, lambda c: c.partitions(name))) == partitions
        )

    nodes.eventually(listed)
    answers = asyncio.run(_deletions_at_once(ports, name, etcd_server))
    # One deletion won in etcd; the other answers as one node does for a super stream that
    # is not there (STREAM_DOES_NOT_EXIST). Before, both answered OK.
    assert answers.count(None) == 1, answers
    assert [type(x) for x in answers if x is not None] == [StreamDoesNotExist]
    assert nodes.etcd_values(etcd_server, f"{a.prefix}entities/exchanges/%2F/{name}") == []
    records = f"{a.prefix}entities/queues/%2F/{name}-"
    assert nodes.etcd_values(etcd_server, records, prefix=True) == []


def test_a_0_10_queue_delete_through_another_node_completes_once_etcd_and_leader_lost_it(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    name = f"del010-{uuid.uuid4().hex[:6]}"
    conn = connect(b)
    conn.channel().queue_declare(name, durable=True)
    conn.close()
    nodes.eventually(lambda: _queue_of(a, name))
    client = Client010(a.broker)
    leader = connect(b)

    def delete() -> int:
        client.conn.send_command(1, QueueDelete(queue=name))
        client.result(QueueQuery(queue=name))  # answered once the delete completed
        return _passive(leader, name)

    try:
        seen = _while_etcd_stopped(etcd_server, delete)
    finally:
        client.close()
        if leader.is_open:
            leader.close()
    _answered_once_gone(seen, etcd_server, a, name, 404)


def test_an_amqp10_management_delete_through_another_node_is_answered_once_etcd_and_leader_lost_it(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    """RabbitMQ's AMQP 1.0 client's DELETE of a queue address (HTTP over AMQP)."""
    rmq = pytest.importorskip("rabbitmq_amqp_python_client")
    a, b = two
    name = f"del10-{uuid.uuid4().hex[:6]}"
    conn = connect(b)
    conn.channel().queue_declare(name, durable=True)
    conn.close()
    nodes.eventually(lambda: _queue_of(a, name))
    env = rmq.Environment(f"amqp://guest:guest@127.0.0.1:{a.broker.port}/")
    client = env.connection()
    client.dial()
    management = client.management()
    leader = connect(b)

    def delete() -> int:
        management.delete_queue(name)
        return _passive(leader, name)

    try:
        seen = _while_etcd_stopped(etcd_server, delete)
    finally:
        management.close()
        client.close()
        if leader.is_open:
            leader.close()
    _answered_once_gone(seen, etcd_server, a, name, 404)


def test_an_amqp_fast_cancel_of_a_durable_subscription_is_confirmed_once_etcd_lost_its_queue(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, _b = two
    client_name = f"delfast{uuid.uuid4().hex[:6]}"
    queue = f"{client_name}.keep"
    record = f"{a.prefix}entities/queues/%2F/{queue}"
    with FastSocket.connect(a.broker.host, a.broker.port, client_name=client_name) as fast:
        client = fast.client
        client.open_channel(1)
        client.open_handle(1, 1, service=ServiceType.TOPIC, dest_name="delfast.", consumer=True)
        client.consume(1, prefetch=5, dest_name="news", identifier="keep", confirm_tag=4)
        fast.flush()
        assert fast.wait(Replied, timeout=10).confirm_tag == 4
        assert len(nodes.etcd_values(etcd_server, record)) == 1

        def cancel() -> int:
            client.cancel(1, "keep", dest_name="news", confirm_tag=5)
            fast.flush()
            return int(fast.wait(Replied, timeout=10).confirm_tag)

        seen = _while_etcd_stopped(etcd_server, cancel)
    assert seen["while_stopped"] is False
    assert seen["result"] == 5
    assert nodes.etcd_values(etcd_server, record) == []


def test_a_delete_through_another_node_waits_for_the_leader_to_lose_the_queue(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    """The leader learns of the deletion from its watch: the answer waits until it has
    (asked through the link), so with the leader's process stopped meanwhile, no answer
    comes until it runs again and has lost the queue. (0-10's queue.delete asks the leader
    nothing before the write, unlike 0-9-1's, which asks its count.)"""
    a, b = two
    name = f"delwait-{uuid.uuid4().hex[:6]}"
    conn = connect(b)
    conn.channel().queue_declare(name, durable=True)
    conn.close()
    assert nodes.eventually(lambda: _queue_of(a, name))["node"] == b.name
    client = Client010(a.broker)

    def delete() -> None:
        client.conn.send_command(1, QueueDelete(queue=name))
        client.result(QueueQuery(queue=name))  # answered once the delete completed

    try:
        seen = _while_stopped(b.broker.process, delete)
    finally:
        client.close()
    assert seen["while_stopped"] is False
    assert nodes.etcd_values(etcd_server, f"{a.prefix}entities/queues/%2F/{name}") == []
    assert _passive_on(b, name) == 404
