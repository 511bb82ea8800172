"""More ways a client lets a consumer of a queue led by another node go, each answered
once the queue's leader has (as ``test_cancels_through_proxies.py`` checks for 0-9-1's
cancel and closes, and 0-10's message.cancel): an AMQP 1.0 receiver's detach, its
session's end and its connection's close; a 0-10 session's detach and its connection's
close; an AMQP/Fast handle's, channel's or connection's close; and the broker's own
basic.cancel of a 0-9-1 consumer timed out.

The same pattern: the leader's node is stopped (SIGSTOP) while the client lets go through
a second node; an answer that does not wait for the leader arrives meanwhile, one that
waits arrives once the leader runs again (SIGCONT) and has taken the cancel, and an
exclusive consume through a third node is then accepted at once."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

import pika.exceptions
import pytest
from proton import Endpoint
from proton.utils import BlockingConnection as ProtonConnection

from leveret.protocol.amqp010._generated.commands import ExchangeQuery, MessageSubscribe
from leveret.protocol.amqp010.events import ConnectionClosed, SessionDetached
from leveret.testing.amqpfast_client import ChannelClosed as FastChannelClosed
from leveret.testing.amqpfast_client import ConnectionClosed as FastConnectionClosed
from leveret.testing.amqpfast_client import HandleClosed as FastHandleClosed
from leveret.testing.amqpfast_client import Replied
from leveret.testing.amqpfast_socket import FastSocket
from tests.cluster import nodes
from tests.cluster.nodes import connect
from tests.cluster.test_cancels_through_proxies import (
    _answered_while_stopped,
    _exclusive_consume,
    _queue_led_by,
)
from tests.integration.test_amqp010 import Client010

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture(scope="module")
def three(etcd_server: EtcdServer) -> Iterator[list[Node]]:
    yield from nodes.three_nodes(etcd_server, "cancels-more")


@contextlib.contextmanager
def _amqp10_holder(node: Node, queue: str, how: str) -> Iterator[Callable[[], object]]:
    """A proton receiver of ``queue`` on ``node``; yields what lets it go (``how``): its
    detach, its session's end or its connection's close, each waiting for the answer."""
    conn = ProtonConnection(f"amqp://guest:guest@127.0.0.1:{node.broker.port}", timeout=10)
    try:
        receiver = conn.create_receiver(f"/queues/{queue}", credit=10)
        if how == "detach":
            yield receiver.close
        elif how == "end":
            session = receiver.link.session

            def end() -> None:
                session.close()
                conn.wait(lambda: bool(session.state & Endpoint.REMOTE_CLOSED))

            yield end
        else:
            yield conn.close
    finally:
        conn.close()  # nothing when it is closed already


@pytest.mark.parametrize("how", ["detach", "end", "close"])
def test_an_amqp10_receiver_let_go_through_another_node_is_answered_once_the_leader_has(
    three: list[Node], how: str
) -> None:
    a, b, c = three
    queue = _queue_led_by(b, a, c)
    with connect(a) as other, _amqp10_holder(c, queue, how) as let_go:
        # The receiver is a consumer on the leader: an exclusive consume is refused.
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            _exclusive_consume(other, queue)
        assert refused.value.reply_code == 403
        assert _answered_while_stopped(b, let_go) is False
        _exclusive_consume(other, queue)


def test_a_0_10_session_detached_through_another_node_is_answered_once_the_leader_let_go(
    three: list[Node],
) -> None:
    """A 0-10 session detached (and so closed: no time-out to resume it in) with a live
    subscription, no message.cancel first: session.detached comes as message.cancel's
    completion does. (qpid.messaging's session.close cancels each receiver first and waits
    for that, which waits already: the raw client's detach is what had no wait.)"""
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
        holder.conn.request_timeout(1, 0)
        holder.result(ExchangeQuery(name="amq.direct"))

        def detach() -> None:
            holder.conn.detach(1)
            holder.wait(lambda: any(isinstance(e, SessionDetached) for e in holder.events))

        with connect(a) as other:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                _exclusive_consume(other, queue)
            assert _answered_while_stopped(b, detach) is False
            _exclusive_consume(other, queue)
    finally:
        holder.close()


@pytest.mark.parametrize("timeout", [0, 5])
def test_a_0_10_connection_closed_through_another_node_is_answered_once_the_leader_let_go(
    three: list[Node], timeout: int
) -> None:
    """A 0-10 connection.close with a session subscribed, no message.cancel or
    session.detach first: close-ok comes once the leader let the subscription go. A
    session with a time-out is kept for resume instead: nothing is let go, so close-ok
    comes at once and its subscription still holds the queue."""
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
        holder.conn.request_timeout(1, timeout)
        holder.result(ExchangeQuery(name="amq.direct"))

        def close() -> None:
            holder.conn.close()
            holder.wait(lambda: any(isinstance(e, ConnectionClosed) for e in holder.events))

        with connect(a) as other:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                _exclusive_consume(other, queue)
            if timeout:
                assert _answered_while_stopped(b, close) is True
                with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                    _exclusive_consume(other, queue)
                assert refused.value.reply_code == 403
            else:
                assert _answered_while_stopped(b, close) is False
                _exclusive_consume(other, queue)
    finally:
        holder.close()


@pytest.mark.parametrize("how", ["handle", "channel", "connection"])
def test_an_amqpfast_consumer_let_go_through_another_node_is_answered_once_the_leader_has(
    three: list[Node], how: str
) -> None:
    """AMQP/Fast's HANDLE CLOSE (CHANNEL CLOSE, CONNECTION CLOSE) of a consuming handle:
    the server's HANDLE CLOSE (CHANNEL CLOSE, CONNECTION CLOSE) answer comes once the
    leader let the consumer go."""
    a, b, c = three
    queue = _queue_led_by(b, a, c)
    with FastSocket.connect(c.broker.host, c.broker.port, client_name="cancels") as fast:
        client = fast.client
        client.open_channel(1)
        client.open_handle(1, 1, dest_name=queue, consumer=True)
        client.consume(1, prefetch=5, confirm_tag=3)
        fast.flush()
        assert fast.wait(Replied).confirm_tag == 3

        def close() -> None:
            if how == "handle":
                client.close_handle(1)
                fast.flush()
                fast.wait(FastHandleClosed, timeout=10)
            elif how == "channel":
                client.close_channel(1)
                fast.flush()
                fast.wait(FastChannelClosed, timeout=10)
            else:
                client.close()
                fast.flush()
                assert fast.wait(FastConnectionClosed, timeout=10).by_server is False

        with connect(a) as other:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                _exclusive_consume(other, queue)
            assert _answered_while_stopped(b, close) is False
            _exclusive_consume(other, queue)


def test_a_0_9_1_consumer_timed_out_through_another_node_is_told_once_the_leader_let_go(
    three: list[Node],
) -> None:
    """A consumer on c that does not acknowledge within its x-consumer-timeout is
    cancelled by the broker (its basic.cancel, consumer_cancel_notify): sent once the
    leader b let the consumer go. b is stopped from the delivery on, past the deadline."""
    a, b, c = three
    queue = _queue_led_by(b, a, c)
    with connect(b) as publisher:
        publisher.channel().basic_publish("", queue, b"unacknowledged")
    with connect(c) as conn, connect(a) as other:
        channel = conn.channel()
        delivered: list[int] = []
        cancelled = threading.Event()
        channel.add_on_cancel_callback(lambda _frame: cancelled.set())
        channel.basic_consume(
            queue,
            lambda _ch, method, _props, _body: delivered.append(method.delivery_tag),
            arguments={"x-consumer-timeout": 200},
        )
        while not delivered:
            conn.process_data_events(time_limit=0.05)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            _exclusive_consume(other, queue)

        def timed_out() -> None:
            while not cancelled.is_set():
                conn.process_data_events(time_limit=0.05)

        assert _answered_while_stopped(b, timed_out) is False
        _exclusive_consume(other, queue)
