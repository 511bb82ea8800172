"""A message routed to several queues of one leader crosses the inter-node link once: the
dialer sends one ``Publish`` and an ``Also`` for each other queue (``cluster/link.py``
``Peer.publish``), and the leader puts that one message into each, confirming and
accounting for each as for a ``Publish`` (``server/cluster_link/frontend.py``)."""

from __future__ import annotations

import asyncio

from leveret.convert.amqp091 import wire_message
from leveret.model.broker import Broker
from leveret.protocol.cluster import codec as c
from leveret.testing.client import run_turns
from tests.unit.cluster.dialled_link import dialled, remote_queue
from tests.unit.server.test_cluster_link_frontend import PROPS, handshake, link, send


def test_one_message_to_three_queues_of_a_leader_is_one_publish_and_two_alsos() -> None:
    async def run() -> None:
        server, peer, conn, transport = dialled()
        queues = [remote_queue(server, peer, name) for name in ("q1", "q2", "q3")]
        message = wire_message("fan", "", PROPS, b"body")
        for queue in queues:
            peer.publish(queue, message, True)
        other = wire_message("fan", "", PROPS, b"next")
        peer.publish(queues[0], other, False)
        peer.publish(queues[1], other, False)
        peer._flush()
        assert transport.ops() == [
            c.Publish(1, "/", "q1", "fan", "", 0, PROPS, b"body"),
            c.Also(2, "/", "q2"),
            c.Also(3, "/", "q3"),
            c.Publish(0, "/", "q1", "fan", "", 0, PROPS, b"next"),
            c.Also(0, "/", "q2"),
        ]
        # The window counts each queue's copy, as the leader's account does.
        weight = c.publish_weight(PROPS, b"body") * 3 + c.publish_weight(PROPS, b"next") * 2
        assert peer.sent_weight == weight
        # A new connection's leader knows no last message: the same message is sent whole.
        peer.lost(conn)
        peer.conn, peer.up = conn, True
        transport.written.clear()
        peer.publish(queues[2], other, False)
        peer._flush()
        assert transport.ops() == [c.Publish(0, "/", "q3", "fan", "", 0, PROPS, b"next")]
        await asyncio.sleep(0)

    asyncio.run(run())


def test_the_leader_puts_the_last_publishs_message_in_each_queue_and_confirms_each() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    queues = [vhost.declare_queue(name, owner=None) for name in ("q1", "q2")]
    front, _ = link(broker)
    handshake(front)
    out = send(
        front,
        c.Publish(1, "/", "q1", "fan", "", 0, PROPS, b"body"),
        c.Also(2, "/", "q2"),
        c.Also(3, "/", "missing"),  # deleted meanwhile: refused, as a Publish would be
    )
    weight = c.publish_weight(PROPS, b"body")
    assert out == [c.Confirm(2, True, True), c.Confirm(3, False, False), c.Taken(3 * weight)]
    assert [q.message_count for q in queues] == [1, 1]
    assert [q.n_publish for q in queues] == [1, 1]
    out = send(front, c.Get(7, "/", "q1", True), c.Get(8, "/", "q2", True))
    assert [(op.rid, op.exchange, op.body) for op in out if isinstance(op, c.Got)] == [
        (7, "fan", b"body"),
        (8, "fan", b"body"),
    ]


def test_an_also_before_any_publish_closes_the_link() -> None:
    front, _ = link(Broker())
    handshake(front)
    send(front, c.Also(0, "/", "q"))
    assert front.should_close_transport
    assert "before any Publish" in front.close_reason


def test_the_memory_alarm_holds_an_also_with_its_publish() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    queues = [vhost.declare_queue(name, owner=None) for name in ("q1", "q2")]
    front, _ = link(broker)
    handshake(front)
    shell = front.shell
    shell.block("low on memory")
    out = send(front, c.Publish(0, "/", "q1", "", "", 0, PROPS, b"m"), c.Also(0, "/", "q2"))
    assert not any(isinstance(op, c.Taken) for op in out)
    assert [q.message_count for q in queues] == [0, 0]
    assert not front.pending
    shell.unblock(2.0)
    run_turns(shell, 2.0)
    out = c.Reader().feed(b"".join(shell.take_output(2.0)))
    assert c.Taken(2 * c.publish_weight(PROPS, b"m")) in out
    assert [q.message_count for q in queues] == [1, 1]
