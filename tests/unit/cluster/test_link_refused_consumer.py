"""A replicated queue's consumer refused by the node its record names as leader
(``cluster/link.py`` ``Peer._consume_again``): after an election, this node's watch can
bring the new record before the elected node has applied its own, and that node answers
the consume "no queue". The consumer is not cancelled: it is consumed again shortly, and
only a refusal that lasts is passed on to the client as a cancel."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from leveret.cluster.link import REFUSED_RETRIES, REFUSED_RETRY_DELAY, Peer
from leveret.protocol.cluster import codec as c
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink
from tests.unit.cluster.dialled_link import RecordingTransport, dialled, remote_queue

if TYPE_CHECKING:
    from leveret.model.queues.remote import RemoteQueue

ARGS: dict[str, object] = {"x-queue-type": "quorum"}


def _setup(*, replicated: bool) -> tuple[Peer, RecordingTransport, RecordingSink, RemoteQueue]:
    server, peer, _conn, transport = dialled()
    queue = remote_queue(server, peer, arguments=ARGS)
    queue.replicated = replicated
    sink = RecordingSink()
    Session(server.broker.vhosts["/"], object(), sink).consume(
        "q", "client", no_ack=False, exclusive=False, arguments={}
    )
    return peer, transport, sink, queue


def _consumes(transport: RecordingTransport) -> list[int]:
    return [op.cid for op in transport.ops() if isinstance(op, c.Consume)]


def _answer(peer: Peer, transport: RecordingTransport, op: c.Op) -> None:
    """What the leader sends back, received on the link's connection (which stays)."""
    assert peer.conn is not None
    peer.received(peer.conn, c.encode(op))
    assert not transport.aborted, "the link was aborted"


def test_a_refused_consumer_of_a_replicated_queue_is_consumed_again() -> None:
    async def run() -> None:
        peer, transport, sink, queue = _setup(replicated=True)
        await asyncio.sleep(0)
        [first] = _consumes(transport)
        _answer(peer, transport, c.Cancelled(first, 404, "no queue 'q' in vhost '/'"))
        assert [x.tag for x in queue.consumers] == ["client"]
        await asyncio.sleep(REFUSED_RETRY_DELAY * 2)
        first_again, second = _consumes(transport)
        assert first_again == first
        assert second != first
        _answer(peer, transport, c.ConsumeOk(second))
        assert peer.refused == {}
        assert sink.take("consumer_cancelled") == []

    asyncio.run(run())


def test_a_refusal_that_lasts_cancels_the_consumer() -> None:
    async def run() -> None:
        peer, transport, sink, queue = _setup(replicated=True)
        await asyncio.sleep(0)
        [cid] = _consumes(transport)
        _answer(peer, transport, c.Cancelled(cid, 404, "no queue"))
        assert sink.take("consumer_cancelled") == []
        [consumer] = queue.consumers
        assert peer.refused == {consumer: 1}
        peer.refused[consumer] = REFUSED_RETRIES  # refused that often already
        await asyncio.sleep(REFUSED_RETRY_DELAY * 2)
        cid = _consumes(transport)[-1]
        _answer(peer, transport, c.Cancelled(cid, 404, "no queue"))
        assert [e.consumer_tag for e in sink.take("consumer_cancelled")] == ["client"]
        assert queue.consumers == []
        assert peer.refused == {}

    asyncio.run(run())


def test_a_classic_queue_consumer_refused_is_cancelled_at_once() -> None:
    async def run() -> None:
        peer, transport, sink, queue = _setup(replicated=False)
        await asyncio.sleep(0)
        [cid] = _consumes(transport)
        _answer(peer, transport, c.Cancelled(cid, 404, "no queue"))
        assert [e.consumer_tag for e in sink.take("consumer_cancelled")] == ["client"]
        assert queue.consumers == []

    asyncio.run(run())
