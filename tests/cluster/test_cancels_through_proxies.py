"""A consumer's cancel through a node that does not lead its queue is answered once the
queue's leader has let the consumer go: after cancel-ok (or a channel's close-ok) a
consume reaching the leader through a third node is not refused for it, as on one node,
where the queue is free once cancel-ok is out (RabbitMQ's cancel-ok comes from the
queue's process). Before, the proxy answered at once and the leader took the link's
``Cancel`` a moment later: an exclusive consume through another node could still get 403
"in exclusive use" (seen once in ``test_cluster_link.py``'s exclusive-use test).

Made deterministic by stopping the leader's node (SIGSTOP) while the client cancels: an
answer that does not wait for the leader arrives meanwhile; one that waits arrives once
the leader runs again (SIGCONT) and has taken the cancel, and an exclusive consume through
the third node is then accepted at once."""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import uuid
from typing import TYPE_CHECKING

import amqp
import pika
import pika.exceptions
import pytest

from leveret.protocol.amqp010._generated.commands import (
    ExchangeQuery,
    MessageCancel,
    MessageSubscribe,
)
from tests.cluster import nodes
from tests.cluster.nodes import connect, visible
from tests.integration.test_amqp010 import Client010

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

# How long the leader's node stays stopped: well within the nodes' lease (nodes.LEASE_TTL).
PAUSE = 0.6


@pytest.fixture(scope="module")
def three(etcd_server: EtcdServer) -> Iterator[list[Node]]:
    yield from nodes.three_nodes(etcd_server, "cancels")


def _queue_led_by(leader: Node, *others: Node) -> str:
    """A durable queue declared through ``leader`` (so led by it), served by ``others``."""
    name = f"q.cancel-{uuid.uuid4().hex[:6]}"
    conn = connect(leader)
    conn.channel().queue_declare(name, durable=True)
    conn.close()
    for other in others:
        nodes.eventually(functools.partial(visible, other, name))
    return name


@contextlib.contextmanager
def _stopped(node: Node) -> Iterator[None]:
    process = node.broker.process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        process.send_signal(signal.SIGCONT)


def _answered_while_stopped(node: Node, act: Callable[[], object]) -> bool:
    """Run ``act`` (a client's cancel or close, through another node) in a thread while
    ``node`` is stopped for ``PAUSE`` seconds: whether it was answered meanwhile (it must
    be answered once the node runs again)."""
    answered = threading.Event()

    def run() -> None:
        act()
        answered.set()

    thread = threading.Thread(target=run)
    with _stopped(node):
        thread.start()
        meanwhile = answered.wait(PAUSE)
    thread.join(30)
    assert answered.is_set()
    return meanwhile


def _exclusive_consume(conn: pika.BlockingConnection, queue: str) -> None:
    """An exclusive consume of ``queue`` on a new channel of ``conn``: raises pika's
    ChannelClosedByBroker (403 "in exclusive use") when another consumer holds it."""
    conn.channel().basic_consume(queue, lambda *_: None, auto_ack=True, exclusive=True)


@contextlib.contextmanager
def _holder(node: Node, queue: str, how: str) -> Iterator[Callable[[], object]]:
    """A client of ``node`` holding ``queue`` with an exclusive consumer; yields what lets
    it go (``how``): pika's basic.cancel, or py-amqp's channel.close or connection.close,
    which send no cancel first (pika's closes cancel each consumer before)."""
    if how == "cancel":
        conn = connect(node)
        try:
            channel = conn.channel()
            tag = channel.basic_consume(queue, lambda *_: None, auto_ack=True, exclusive=True)
            yield functools.partial(channel.basic_cancel, tag)
        finally:
            if conn.is_open:
                conn.close()
        return
    client = amqp.Connection(f"127.0.0.1:{node.broker.port}")
    client.connect()
    try:
        session = client.channel()
        session.basic_consume(queue, callback=lambda _m: None, no_ack=True, exclusive=True)
        yield session.close if how == "channel.close" else client.close
    finally:
        client.close()  # nothing when it is closed already


@pytest.mark.parametrize("how", ["cancel", "channel.close", "connection.close"])
def test_a_cancel_through_another_node_is_answered_once_the_leader_let_the_consumer_go(
    three: list[Node], how: str
) -> None:
    a, b, c = three
    queue = _queue_led_by(b, a, c)
    # The consume through a: on a connection opened before the timed part.
    with connect(a) as other, _holder(c, queue, how) as let_go:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            _exclusive_consume(other, queue)
        assert refused.value.reply_code == 403
        # Not answered before the leader took it: it was stopped all along.
        assert _answered_while_stopped(b, let_go) is False
        # And once answered, the leader holds nothing for it: accepted at once, no retry.
        _exclusive_consume(other, queue)


def test_a_0_10_cancel_through_another_node_completes_once_the_leader_let_it_go(
    three: list[Node],
) -> None:
    """0-10's message.cancel is completed as 0-9-1's cancel-ok is answered."""
    a, b, c = three
    queue = _queue_led_by(b, a, c)
    holder = Client010(c.broker)
    try:
        holder.conn.send_command(
            1,
            MessageSubscribe(
                queue=queue, destination="d", accept_mode=1, acquire_mode=0, exclusive=True
            ),
        )
        # A command answered on c, after the subscribe (the connection's input waits).
        holder.result(ExchangeQuery(name="amq.direct"))

        def cancel() -> None:
            holder.conn.send_command(1, MessageCancel(destination="d"))
            holder.result(ExchangeQuery(name="amq.direct"))

        with connect(a) as other:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                _exclusive_consume(other, queue)
            assert _answered_while_stopped(b, cancel) is False
            _exclusive_consume(other, queue)
    finally:
        holder.close()
