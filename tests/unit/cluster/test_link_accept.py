"""A link consumer's acks on its way to the leader (``cluster/link.py`` ``Peer.accept``,
the one-ack path of ``RemoteQueue.settle``): a 0-9-1 consumer on this node, its queue led
by ``b``. A turn's acks go in one ``Settle``, each turn's in its own, after whatever the
turn wrote before them and before what it writes after; an ack of a delivery made over a
link that has gone since is not sent (the leader requeued it)."""

from __future__ import annotations

import asyncio

from leveret.cluster.link import Peer, _Connection
from leveret.convert.amqp091 import wire_message
from leveret.model.entry import QueuedMessage
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol.cluster import codec as c
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink
from tests.unit.cluster.dialled_link import RecordingTransport, dialled, remote_queue

PROPS = b"\x00\x00"


Consumer = tuple[Session, RecordingSink, Peer, _Connection, RecordingTransport, RemoteQueue]


async def _consumer() -> Consumer:
    """The consumer of ``q`` with four deliveries (ids 11 to 14) handed; ``other``, a
    second queue ``b`` leads, to publish to."""
    server, peer, conn, transport = dialled()
    remote_queue(server, peer)
    other = remote_queue(server, peer, "other")
    sink = RecordingSink()
    session = Session(server.broker.vhosts["/"], object(), sink)
    session.set_qos(0, 100, False)
    session.consume("q", "client", no_ack=False, exclusive=False, arguments={})
    await asyncio.sleep(0)  # the link's flush: the Consume
    cid = next(iter(peer.consumers))
    frames = b"".join(
        c.deliver_frame(cid, did, False, "", "q", 0, PROPS, b"m") for did in (11, 12, 13, 14)
    )
    peer.received(conn, frames)
    transport.written.clear()
    return session, sink, peer, conn, transport, other


def _tags(sink: RecordingSink) -> list[int]:
    return [event.delivery_tag for event in sink.take("deliver")]


def _settles(transport: RecordingTransport) -> list[tuple[int, tuple[int, ...]]]:
    return [(op.kind, op.dids) for op in transport.ops() if isinstance(op, c.Settle)]


def test_a_turns_acks_go_in_one_settle_and_the_next_turns_in_another() -> None:
    async def run() -> None:
        session, sink, _peer, _conn, transport, _other = await _consumer()
        tags = _tags(sink)
        session.ack(tags[0])
        session.ack(tags[1])
        await asyncio.sleep(0)
        assert _settles(transport) == [(c.ACCEPT, (11, 12))]
        transport.written.clear()
        session.ack(tags[2])  # a turn of its own: written at its end, not left for later
        await asyncio.sleep(0)
        assert _settles(transport) == [(c.ACCEPT, (13,))]

    asyncio.run(run())


def test_acks_keep_their_place_around_a_publish_of_the_same_turn() -> None:
    async def run() -> None:
        session, sink, peer, _conn, transport, other = await _consumer()
        tags = _tags(sink)
        session.ack(tags[0])
        peer.publish(other, wire_message("", "other", PROPS, b"p"), False)
        session.ack(tags[1])
        session.ack(tags[2])
        await asyncio.sleep(0)
        kinds = [
            (op.kind, op.dids) if isinstance(op, c.Settle) else type(op).__name__
            for op in transport.ops()
        ]
        assert kinds == [(c.ACCEPT, (11,)), "Publish", (c.ACCEPT, (12, 13))]

    asyncio.run(run())


def test_an_ack_of_a_delivery_from_a_link_gone_since_is_not_sent() -> None:
    async def run() -> None:
        session, sink, peer, conn, transport, _other = await _consumer()
        tags = _tags(sink)
        peer.lost(conn)
        session.ack(tags[0])
        await asyncio.sleep(0)
        assert _settles(transport) == []
        assert peer.settles == {}

    asyncio.run(run())


def test_an_ack_that_gives_no_credit_back_is_still_written_at_the_turns_end() -> None:
    # The consumer cancelled, its deliveries still unacked on the channel: the ack makes
    # no ``Credit`` (nothing to re-credit) and so nothing else schedules the flush.
    async def run() -> None:
        session, sink, _peer, _conn, transport, _other = await _consumer()
        tags = _tags(sink)
        session.cancel("client")
        await asyncio.sleep(0)
        transport.written.clear()
        session.ack(tags[0])
        await asyncio.sleep(0)
        assert _settles(transport) == [(c.ACCEPT, (11,))]

    asyncio.run(run())


def test_acks_share_the_turns_list_with_other_settlements_of_the_kind() -> None:
    # ``Peer.accept`` appends to the turn's ACCEPT list it keeps at hand: one a ``settle``
    # started is the same list, and once a frame takes the list out the next ack starts
    # another (after that frame), never one written already.
    async def run() -> None:
        session, sink, peer, _conn, transport, _other = await _consumer()
        tags = _tags(sink)
        message = wire_message("", "q", PROPS, b"m")
        peer.settle(c.ACCEPT, [QueuedMessage(20, message)])
        session.ack(tags[0])
        peer.settle(c.ACCEPT, [QueuedMessage(21, message)])
        session.ack(tags[1])
        await asyncio.sleep(0)
        assert _settles(transport) == [(c.ACCEPT, (20, 11, 21, 12))]
        transport.written.clear()
        session.ack(tags[2])
        session.cancel("client")  # its Cancel takes the turn's settlements out first
        session.ack(tags[3])
        await asyncio.sleep(0)
        kinds = [
            (op.kind, op.dids) if isinstance(op, c.Settle) else type(op).__name__
            for op in transport.ops()
        ]
        assert kinds == [(c.ACCEPT, (13,)), "Cancel", (c.ACCEPT, (14,))]

    asyncio.run(run())
