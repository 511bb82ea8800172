"""A 0-10 client's declarations on a cluster node go to etcd before they complete, as a
0-9-1 client's do (``test_shared_declarations.py``): a transient exchange, a transient
queue and the binding between them, declared over 0-10 on node a, are every node's, so a
0-9-1 publisher on node b routes into the queue (before, node b knew none of them: they
were a's alone). So do its ``exchange.delete`` and ``exchange.unbind``: once they complete,
etcd has lost the exchange or the binding, and node b follows (before, a transient one stayed
in etcd and on b). A 0-10 exclusive queue is in etcd too, owned by its session:
``test_exclusive_010.py``."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pika
import pika.exceptions
import pytest
import requests

from leveret.protocol.amqp010._generated.commands import (
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeQuery,
    ExchangeUnbind,
    MessageSubscribe,
    QueueDeclare,
    QueueDelete,
    QueueQuery,
)
from leveret.protocol.amqp010._generated.structs import ExchangeQueryResult, QueueQueryResult
from leveret.protocol.amqp010.events import ExceptionReceived
from tests.cluster import nodes
from tests.integration.test_amqp010 import Client010

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture(scope="module")
def two(etcd_server: EtcdServer) -> Iterator[tuple[Node, Node]]:
    yield from nodes.two_nodes(etcd_server, f"/leveret-test/shared010-{uuid.uuid4().hex[:8]}/")


def test_transient_declarations_over_0_10_are_every_nodes(two: tuple[Node, Node]) -> None:
    a, b = two
    suffix = uuid.uuid4().hex[:6]
    exchange, queue = f"x010-{suffix}", f"q010-{suffix}"
    client = Client010(a.broker)
    try:
        client.conn.send_command(1, ExchangeDeclare(exchange=exchange, type="direct"))
        client.conn.send_command(1, QueueDeclare(queue=queue))
        client.conn.send_command(1, ExchangeBind(queue=queue, exchange=exchange, binding_key="k"))
        # Answered after the three: the connection's input waits while each is written.
        query = client.result(QueueQuery(queue=queue))
        assert isinstance(query, QueueQueryResult)
        assert query.queue == queue
        assert not query.durable

        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            # Mandatory: unroutable on b (no binding there) would come back as an error.
            ch.basic_publish(exchange, "k", b"from b", mandatory=True)
        finally:
            conn.close()

        def counted() -> bool:
            result = client.result(QueueQuery(queue=queue))
            return isinstance(result, QueueQueryResult) and result.message_count == 1

        nodes.eventually(counted, timeout=10)
    finally:
        client.close()


def _passive_exchange_on(node: Node, exchange: str) -> int:
    """What a 0-9-1 passive ``exchange.declare`` of ``exchange`` gets on ``node``: 200 (ok)
    or the channel's reply code."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.broker.port))
    try:
        conn.channel().exchange_declare(exchange, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return int(exc.reply_code)
    finally:
        if conn.is_open:
            conn.close()
    return 200


def test_an_exchange_deleted_over_0_10_is_gone_from_every_node(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    exchange = f"xdel010-{uuid.uuid4().hex[:6]}"
    client = Client010(a.broker)
    try:
        client.conn.send_command(1, ExchangeDeclare(exchange=exchange, type="fanout"))
        assert not client.result(ExchangeQuery(name=exchange)).not_found
        nodes.eventually(lambda: _passive_exchange_on(b, exchange) == 200)
        client.conn.send_command(1, ExchangeDelete(exchange=exchange))
        # Answered after the delete completed: by then etcd has lost the exchange.
        query = client.result(ExchangeQuery(name=exchange))
        assert isinstance(query, ExchangeQueryResult)
        assert query.not_found
        assert nodes.etcd_values(etcd_server, f"{a.prefix}entities/exchanges/%2F/{exchange}") == []
        # ... and b, which learns it from its watch, answers 404.
        nodes.eventually(lambda: _passive_exchange_on(b, exchange) == 404, timeout=5)
    finally:
        client.close()


def test_an_unbind_over_0_10_stops_routing_on_every_node(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    suffix = uuid.uuid4().hex[:6]
    exchange, queue = f"xub010-{suffix}", f"qub010-{suffix}"
    client = Client010(a.broker)
    try:
        client.conn.send_command(1, ExchangeDeclare(exchange=exchange, type="direct"))
        client.conn.send_command(1, QueueDeclare(queue=queue))
        client.conn.send_command(1, ExchangeBind(queue=queue, exchange=exchange, binding_key="k"))
        client.result(QueueQuery(queue=queue))
        bindings = f"{a.prefix}entities/bindings/%2F/q/{queue}/"
        assert len(nodes.etcd_values(etcd_server, bindings, prefix=True)) == 1
        client.conn.send_command(1, ExchangeUnbind(queue=queue, exchange=exchange, binding_key="k"))
        client.result(QueueQuery(queue=queue))  # answered after the unbind completed
        assert nodes.etcd_values(etcd_server, bindings, prefix=True) == []

        def unroutable_on_b() -> bool:
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                ch.basic_publish(exchange, "k", b"from b", mandatory=True)
            except pika.exceptions.UnroutableError:
                return True
            finally:
                conn.close()
            return False

        nodes.eventually(unroutable_on_b, timeout=5)
    finally:
        client.close()


@pytest.mark.parametrize("through", ["b", "a"])
def test_a_0_10_subscription_its_leader_refuses_fails_as_on_one_node(
    two: tuple[Node, Node], through: str
) -> None:
    """A 0-10 subscription to a queue led by b that an exclusive 0-9-1 consumer on b holds
    fails with resource-locked (405) on b itself and through a alike: through a, the
    subscribe completes once b answered. Before, a took it and it got nothing."""
    a, b = two
    queue = f"excl-sub-{through}-{uuid.uuid4().hex[:6]}"
    holder = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    try:
        ch = holder.channel()
        ch.queue_declare(queue)
        ch.basic_consume(queue, lambda *_: None, exclusive=True)
        node = b if through == "b" else a
        nodes.eventually(lambda: node.get(f"queues/%2F/{queue}").get("name") == queue)
        client = Client010(node.broker)
        try:
            client.conn.send_command(1, MessageSubscribe(queue=queue, destination="d"), sync=True)
            client.wait(lambda: any(isinstance(e, ExceptionReceived) for e in client.events))
            [refused] = [e for e in client.events if isinstance(e, ExceptionReceived)]
            assert refused.exception.error_code == 405
            assert "exclusive use" in (refused.exception.description or "")
        finally:
            client.close()
    finally:
        holder.close()


def test_a_0_10_queue_delete_through_another_node_asks_the_leader(two: tuple[Node, Node]) -> None:
    """A 0-10 ``queue.delete`` with if-empty of a queue led by b, through a: b's counts
    decide, as 0-9-1's delete asks them and as one node answers: refused while it holds a
    message (not empty), deleted once it is empty. Before, a refused it either way (its
    if-empty could not be checked there)."""
    a, b = two
    queue = f"del010-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare(queue)
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"held")
        nodes.eventually(lambda: a.get(f"queues/%2F/{queue}").get("name") == queue)
        client = Client010(a.broker)
        try:
            client.conn.send_command(1, QueueDelete(queue=queue, if_empty=True), sync=True)
            client.wait(lambda: any(isinstance(e, ExceptionReceived) for e in client.events))
            [refused] = [e for e in client.events if isinstance(e, ExceptionReceived)]
            assert "is not empty" in (refused.exception.description or "")
        finally:
            client.close()
        ch.basic_get(queue, auto_ack=True)
        client = Client010(a.broker)
        try:
            client.conn.send_command(1, QueueDelete(queue=queue, if_empty=True))
            gone = client.result(QueueQuery(queue=queue))
            assert isinstance(gone, QueueQueryResult)
            assert not gone.queue
            assert not any(isinstance(e, ExceptionReceived) for e in client.events)
        finally:
            client.close()
        # ... on b, its leader, too.
        nodes.eventually(
            lambda: (
                requests.get(b.api(f"queues/%2F/{queue}"), auth=nodes.AUTH, timeout=5).status_code
                == 404
            ),
            timeout=5,
        )
    finally:
        if conn.is_open:
            conn.close()
