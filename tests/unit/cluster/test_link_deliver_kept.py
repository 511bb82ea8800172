"""A fanout's message crosses back once even when its queues deliver it at different
times: each queue led here delivers to the peer's consumer as that consumer's credit comes,
a burst of its own, so the same message seldom goes twice in a row (a ``DeliverAlso``).
The leader asks the peer to keep a message an Also put in several of its queues (of at
most ``codec.KEEP_MAX`` bytes: a Deliver's ``keep``); both keep the last ``codec.KEPT``
of them, by the slot each took in turn, and a message delivered again crosses as a
``DeliverKept`` naming its slot (``server/cluster_link/frontend.py`` ``_send_delivery``,
``cluster/link.py`` ``Peer._handle``). A message in one queue is never kept."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from leveret.model.broker import Broker
from leveret.model.consumer import CallbackOwner
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import RecordingTransport, dialled, remote_queue
from tests.unit.server.test_cluster_link_frontend import PROPS, handshake, link, send

if TYPE_CHECKING:
    from leveret.cluster.link import Peer, _Connection
    from leveret.model.consumer import Consumer
    from leveret.model.entry import QueuedMessage
    from leveret.server.cluster_link.frontend import LinkFrontEnd


def _leader(queues: int, credit: int) -> LinkFrontEnd:
    broker = Broker()
    vhost = broker.vhosts["/"]
    for i in range(1, queues + 1):
        vhost.declare_queue(f"q{i}", owner=None)
    front, _ = link(broker)
    handshake(front, features=c.FEATURES)
    send(
        front,
        *(c.Consume(i, "/", f"q{i}", False, False, credit, 0, {}) for i in range(1, queues + 1)),
    )
    return front


def _fanout(front: LinkFrontEnd, queues: int, *bodies: bytes) -> list[c.Op]:
    ops: list[c.Op] = []
    for body in bodies:
        ops.append(c.Publish(0, "/", "q1", "fan", "k", 0, PROPS, body))
        ops += [c.Also(0, "/", f"q{i}") for i in range(2, queues + 1)]
    return [op for op in send(front, *ops) if not isinstance(op, c.Taken)]


def test_a_message_a_later_burst_delivers_again_crosses_as_its_slot() -> None:
    front = _leader(2, 0)
    assert _fanout(front, 2, b"m1", b"m2") == []  # no credit yet
    # q1's consumer's credit comes first: both messages whole, each taking a slot.
    assert send(front, c.Credit(1, 2, 0)) == [
        c.Deliver(1, 1, False, "fan", "k", 0, PROPS, b"m1", keep=True),
        c.Deliver(1, 2, False, "fan", "k", 0, PROPS, b"m2", keep=True),
    ]
    # Then q2's: the same two messages, m1 by its slot, m2 as the last sent whole.
    assert send(front, c.Credit(2, 2, 0)) == [
        c.DeliverKept(2, 3, False, 0),
        c.DeliverAlso(2, 4, False),
    ]
    # Each delivery is its own: settled or requeued one by one; a requeued one is kept
    # still, and goes again by its slot.
    out = send(front, c.Settle(c.ACCEPT, (3,)), c.Settle(c.REQUEUE, (1,)), c.Credit(1, 1, 2))
    assert out == [c.DeliverKept(1, 5, True, 0)]
    assert sorted(front.unsettled) == [2, 4, 5]


def test_a_message_too_large_to_keep_takes_no_slot_and_crosses_whole_each_time() -> None:
    front = _leader(2, 0)
    large = b"x" * (c.KEEP_MAX - len(PROPS) + 1)
    _fanout(front, 2, b"m1", large, b"m3")
    send(front, c.Credit(1, 3, 0))
    assert send(front, c.Credit(2, 3, 0)) == [
        c.DeliverKept(2, 4, False, 0),
        c.Deliver(2, 5, False, "fan", "k", 0, PROPS, large),  # not kept: too large
        c.DeliverKept(2, 6, False, 1),  # m3 took the slot after m1's
    ]


def test_a_slot_is_taken_again_after_kept_messages_sent_whole() -> None:
    front = _leader(2, 0)
    bodies = [b"m%d" % i for i in range(c.KEPT + 1)]
    _fanout(front, 2, *bodies)
    send(front, c.Credit(1, c.KEPT + 1, 0))
    out = send(front, c.Credit(2, c.KEPT + 1, 0))
    # The last message took m0's slot: m0 crosses whole again and takes the next slot,
    # m1's, and so on: a burst further apart than the slots kept crosses whole, each
    # message evicted before it is asked for, never named by a slot another holds.
    assert out == [
        c.Deliver(2, c.KEPT + 2 + i, False, "fan", "k", 0, PROPS, body, keep=True)
        for i, body in enumerate(bodies)
    ]
    assert len(front.kept_slots) == c.KEPT


def _dialling(queues: int) -> tuple[list[tuple[str, QueuedMessage]], Peer, _Connection]:
    server, peer, conn, _transport = dialled()
    got: list[tuple[str, QueuedMessage]] = []

    def deliver(consumer: Consumer, entry: QueuedMessage) -> None:
        got.append((consumer.tag, entry))

    owner = CallbackOwner(deliver)
    for i in range(1, queues + 1):
        queue = remote_queue(server, peer, f"q{i}")
        consumer = queue.consumer(f"q{i}", owner, auto_settle=False)
        consumer.credit = 1 << 20
        queue.add_consumer(consumer)
    return got, peer, conn


def _aborted(conn: _Connection) -> bool:
    transport = conn.transport
    assert isinstance(transport, RecordingTransport)
    return transport.aborted


def test_the_dialling_node_hands_a_kept_message_to_each_consumer() -> None:
    async def run() -> None:
        got, peer, conn = _dialling(2)
        large = b"x" * (c.KEEP_MAX - len(PROPS) + 1)
        peer.received(
            conn,
            b"".join(
                c.encode(op)
                for op in (
                    c.Deliver(1, 7, False, "fan", "k", 0, PROPS, b"m1", keep=True),
                    c.Deliver(1, 8, False, "fan", "k", 0, PROPS, large),
                    c.Deliver(1, 9, False, "fan", "k", 0, PROPS, b"m3", keep=True),
                    c.DeliverKept(2, 10, True, 1),
                    c.DeliverKept(2, 11, False, 0),
                )
            ),
        )
        assert [(tag, e.message.body, e.redelivered) for tag, e in got] == [
            ("q1", b"m1", False),
            ("q1", large, False),
            ("q1", b"m3", False),
            ("q2", b"m3", True),
            ("q2", b"m1", False),
        ]
        assert got[3][1].message is got[2][1].message
        assert got[4][1].message is got[0][1].message
        assert len({e.seq for _tag, e in got}) == 5
        assert not _aborted(conn)
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_deliver_kept_of_an_empty_slot_or_of_an_older_connection_closes_the_link() -> None:
    async def run() -> None:
        _got, peer, conn = _dialling(1)
        peer.received(conn, c.encode(c.DeliverKept(1, 7, False, 0)))
        assert _aborted(conn)

        _got, peer, conn = _dialling(1)
        peer.received(
            conn, c.encode(c.Deliver(1, 7, False, "fan", "k", 0, PROPS, b"m1", keep=True))
        )
        # The connection goes and another comes: the leader's new link keeps nothing.
        peer.lost(conn)
        peer.connected(conn)
        peer.up = True
        peer.received(conn, c.encode(c.DeliverKept(1, 8, False, 0)))
        assert _aborted(conn)
        await asyncio.sleep(0)

    asyncio.run(run())


def test_both_sides_agree_on_every_slot_whatever_the_credit_and_sizes() -> None:
    """The leader's output, read by the dialling node: each consumer gets each message
    it was delivered, whole or by slot, in any order of credits, sizes and requeues."""

    async def run() -> None:
        rng = random.Random(24)
        queues = 4
        front = _leader(queues, 0)
        got, peer, conn = _dialling(queues)
        sizes = [8, 200, c.KEEP_MAX - len(PROPS), c.KEEP_MAX - len(PROPS) + 1]
        bodies = [b"%05d:" % n + b"." * max(0, rng.choice(sizes) - 6) for n in range(3 * c.KEPT)]
        leader_ops: list[c.Op] = _fanout(front, queues, *bodies)
        for _ in range(400):
            cid = rng.randint(1, queues)
            leader_ops += send(front, c.Credit(cid, rng.randint(1, 40), front.sent[cid]))
            if front.unsettled and rng.random() < 0.2:
                did = rng.choice(sorted(front.unsettled))
                leader_ops += send(front, c.Settle(c.REQUEUE, (did,)))
        writer = c.Writer()
        for op in leader_ops:
            if not isinstance(op, c.Taken):
                writer.add(op)
        assert any(isinstance(op, c.DeliverKept) for op in leader_ops)
        peer.received(conn, writer.take())
        assert not _aborted(conn)
        sent = [op for op in leader_ops if isinstance(op, (c.Deliver, c.DeliverKept))]
        assert len(got) == len(sent)
        for (tag, entry), op in zip(got, sent, strict=True):
            assert tag == f"q{op.cid}"
            # What the leader holds as that delivery is what the consumer got.
            _queue, held = front.unsettled.get(op.did, (None, None))
            if held is not None:
                assert entry.message.body == held.message.body
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_message_in_one_queue_is_never_kept() -> None:
    """Only a message an Also put in several queues is kept: a one-queue message's
    deliveries (scenarios a, b, c, e) keep nothing on either node, and a requeued one goes
    whole again."""
    front = _leader(1, 0)
    send(front, *(c.Publish(0, "/", "q1", "", "q1", 0, PROPS, b"m%d" % i) for i in range(3)))
    assert send(front, c.Credit(1, 3, 0)) == [
        c.Deliver(1, i + 1, False, "", "q1", 0, PROPS, b"m%d" % i) for i in range(3)
    ]
    out = send(front, c.Settle(c.REQUEUE, (1,)), c.Credit(1, 1, 3))
    assert out == [c.Deliver(1, 4, True, "", "q1", 0, PROPS, b"m0")]
    assert front.kept_slots == {}
    assert front.kept == [None] * c.KEPT


def test_a_peer_that_did_not_announce_deliver_kept_is_never_asked_to_keep() -> None:
    """A dialler of 2026-11-28's main (its Hello announces nothing): every delivery of a
    fanout's message a later burst sends again crosses whole, no Deliver says keep."""
    broker = Broker()
    vhost = broker.vhosts["/"]
    for name in ("q1", "q2"):
        vhost.declare_queue(name, owner=None)
    front, _ = link(broker)
    handshake(front)
    send(front, *(c.Consume(i, "/", f"q{i}", False, False, 0, 0, {}) for i in (1, 2)))
    _fanout(front, 2, b"m1", b"m2")
    first = send(front, c.Credit(1, 2, 0))
    again = send(front, c.Credit(2, 2, 0))
    assert first == [
        c.Deliver(1, 1, False, "fan", "k", 0, PROPS, b"m1"),
        c.Deliver(1, 2, False, "fan", "k", 0, PROPS, b"m2"),
    ]
    assert again == [
        c.Deliver(2, 3, False, "fan", "k", 0, PROPS, b"m1"),
        c.Deliver(2, 4, False, "fan", "k", 0, PROPS, b"m2"),
    ]


def test_the_leaders_kept_messages_count_in_the_memory_gauge_until_the_link_goes() -> None:
    """Each slot's message counts its properties and body in the broker's memory gauge
    while the slot holds it (the consumers here settle as they take, so the queues hold
    nothing and the gauge is the ring alone)."""
    broker = Broker()
    vhost = broker.vhosts["/"]
    for name in ("q1", "q2"):
        vhost.declare_queue(name, owner=None)
    front, _ = link(broker)
    handshake(front, features=c.FEATURES)
    send(front, *(c.Consume(i, "/", f"q{i}", True, False, 1 << 20, 0, {}) for i in (1, 2)))
    gauge = broker.gauge
    start = gauge.bytes
    large = b"L" * (c.KEEP_MAX - len(PROPS))
    _fanout(front, 2, large, large)
    assert gauge.bytes == start + 2 * c.KEEP_MAX
    # Neither a message too large to keep nor a one-queue message takes a slot.
    _fanout(front, 2, large + b"!")
    send(front, c.Publish(0, "/", "q1", "", "q1", 0, PROPS, b"one queue"))
    assert gauge.bytes == start + 2 * c.KEEP_MAX
    # The ring goes round: the small messages take the large ones' slots, and the gauge
    # falls by what left.
    _fanout(front, 2, *(b"s%04d" % i for i in range(c.KEPT)))
    assert gauge.bytes == start + c.KEPT * (len(PROPS) + 5)
    front.shell.connection_lost(2.0)
    assert gauge.bytes == start
    assert front.kept_slots == {}


def test_the_dialling_nodes_kept_messages_count_in_the_memory_gauge_until_it_goes() -> None:
    async def run() -> None:
        _got, peer, conn = _dialling(1)
        gauge = peer.links.server.broker.gauge
        start = gauge.bytes
        large = b"L" * (c.KEEP_MAX - len(PROPS))

        def deliver(*ops: c.Op) -> None:
            peer.received(conn, b"".join(c.encode(op) for op in ops))

        did = iter(range(1, 1 << 20))
        deliver(*(c.Deliver(1, next(did), False, "fan", "k", 0, PROPS, large, True) for _ in "ab"))
        deliver(c.Deliver(1, next(did), False, "fan", "k", 0, PROPS, b"not kept"))
        assert gauge.bytes == start + 2 * c.KEEP_MAX
        # The ring goes round: the small messages take the large ones' slots.
        deliver(
            *(
                c.Deliver(1, next(did), False, "fan", "k", 0, PROPS, b"s%04d" % i, True)
                for i in range(c.KEPT)
            )
        )
        assert gauge.bytes == start + c.KEPT * (len(PROPS) + 5)
        # A new connection starts the ring again, the lost one's messages uncounted.
        peer.lost(conn)
        assert gauge.bytes == start
        peer.connected(conn)
        peer.up = True
        deliver(c.Deliver(1, next(did), False, "fan", "k", 0, PROPS, large, True))
        assert gauge.bytes == start + c.KEEP_MAX
        peer.lost(conn)
        assert gauge.bytes == start
        assert not _aborted(conn)
        await asyncio.sleep(0)

    asyncio.run(run())
