"""A message a fanout put in several queues of one leader crosses back once while their
consumers on the other node take it in turn: the leader writes one ``Deliver`` and a
``DeliverAlso`` for each next consumer of that message (``server/cluster_link/frontend.py``
``_deliver``), and the dialling node hands each consumer the one message it made
(``cluster/link.py`` ``Peer._handle``), each delivery settled on its own."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from leveret.model.broker import Broker
from leveret.model.consumer import CallbackOwner
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import dialled, remote_queue
from tests.unit.server.test_cluster_link_frontend import PROPS, handshake, link, send

if TYPE_CHECKING:
    from leveret.model.consumer import Consumer
    from leveret.model.entry import QueuedMessage


def test_the_leader_writes_a_fanouts_message_once_for_its_consumers() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    for name in ("q1", "q2", "q3"):
        vhost.declare_queue(name, owner=None)
    front, _ = link(broker)
    handshake(front, features=c.FEATURES)
    send(front, *(c.Consume(cid, "/", f"q{cid}", False, False, 10, 0, {}) for cid in (1, 2, 3)))
    out = send(
        front,
        c.Publish(0, "/", "q1", "fan", "k", 0, PROPS, b"body"),
        c.Also(0, "/", "q2"),
        c.Also(0, "/", "q3"),
        c.Publish(0, "/", "q2", "fan", "k", 0, PROPS, b"next"),
    )
    # The fanout's message is kept (``keep``: an Also put it in several queues), the
    # next one not (published to one queue).
    assert [op for op in out if not isinstance(op, c.Taken)] == [
        c.Deliver(1, 1, False, "fan", "k", 0, PROPS, b"body", keep=True),
        c.DeliverAlso(2, 2, False),
        c.DeliverAlso(3, 3, False),
        c.Deliver(2, 4, False, "fan", "k", 0, PROPS, b"next"),
    ]
    # Each delivery is its own: settled (or requeued) one by one. The requeued one goes
    # again by the slot the peer keeps it in: the last message delivered was another
    # (``DeliverKept``, tests/unit/cluster/test_link_deliver_kept.py).
    out = send(front, c.Settle(c.ACCEPT, (2,)), c.Settle(c.REQUEUE, (3,)))
    assert out == [c.DeliverKept(3, 5, True, 0)]
    assert sorted(front.unsettled) == [1, 4, 5]


def test_a_browsers_copy_between_two_deliveries_of_a_message_is_not_the_last() -> None:
    """The peer keeps the last message sent whole, a browser's copy included: after a
    copy of another message, the fanout's next delivery names the message's kept slot
    (a ``DeliverAlso`` would hand the peer's consumer the copy's message)."""
    broker = Broker()
    vhost = broker.vhosts["/"]
    for name in ("q1", "q2", "q3"):
        vhost.declare_queue(name, owner=None)
    front, _ = link(broker)
    handshake(front, features=c.FEATURES)
    send(
        front,
        c.Consume(1, "/", "q1", False, False, 10, 0, {}),
        c.Consume(2, "/", "q2", False, False, 10, 0, {c.BROWSE: True}),
        c.Consume(3, "/", "q3", False, False, 0, 0, {}),
    )
    out = send(
        front,
        c.Publish(0, "/", "q1", "fan", "k", 0, PROPS, b"body"),
        c.Also(0, "/", "q3"),
        c.Publish(0, "/", "q2", "", "q2", 0, PROPS, b"other"),
    )
    assert [op for op in out if not isinstance(op, c.Taken)] == [
        c.Deliver(1, 1, False, "fan", "k", 0, PROPS, b"body", keep=True),
        c.Deliver(2, c.BROWSED | 1, False, "", "q2", 0, PROPS, b"other"),
    ]
    assert send(front, c.Credit(3, 1, 0)) == [c.DeliverKept(3, 2, False, 0)]
    kept = front.kept[0]
    assert kept is not None
    assert kept.body == b"body"


def test_the_dialling_node_hands_each_consumer_the_one_message() -> None:
    async def run() -> None:
        server, peer, conn, _transport = dialled()
        got: list[tuple[str, QueuedMessage]] = []

        def deliver(consumer: Consumer, entry: QueuedMessage) -> None:
            got.append((consumer.tag, entry))

        owner = CallbackOwner(deliver)
        for name in ("q1", "q2"):
            queue = remote_queue(server, peer, name)
            queue.add_consumer(queue.consumer(name, owner, auto_settle=False))
        peer.received(
            conn,
            c.encode(c.Deliver(1, 7, False, "fan", "k", 0, PROPS, b"body"))
            + c.encode(c.DeliverAlso(2, 8, True)),
        )
        (t1, e1), (t2, e2) = got
        assert (t1, t2) == ("q1", "q2")
        assert e2.message is e1.message
        assert (e1.message.exchange, e1.message.routing_key, e1.message.body) == (
            "fan",
            "k",
            b"body",
        )
        assert (e1.redelivered, e2.redelivered) == (False, True)
        assert e1.seq != e2.seq
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_deliver_also_before_any_deliver_closes_the_link() -> None:
    async def run() -> None:
        server, peer, conn, transport = dialled()
        remote_queue(server, peer, "q1")
        peer.received(conn, c.encode(c.DeliverAlso(1, 7, False)))
        assert transport.aborted
        await asyncio.sleep(0)

    asyncio.run(run())
