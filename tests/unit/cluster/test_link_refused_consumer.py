"""A replicated queue's consumer refused by the node its record names as leader
(``cluster/link.py`` ``Peer._consume_again``): after an election, this node's watch can
bring the new record before the elected node has applied its own, and that node answers
the consume "no queue". The consumer is not cancelled: it is consumed again shortly, and
only a refusal that lasts is passed on to the client as a cancel."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from leveret.cluster.link import REFUSED_RETRIES, REFUSED_RETRY_DELAY, Peer
from leveret.model.broker import Broker
from leveret.model.queues.args import PLAIN
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol.cluster import codec as c
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink

ARGS: dict[str, object] = {"x-queue-type": "quorum"}


class _Transport:
    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        raise AssertionError("the link was aborted")


def _setup(*, replicated: bool) -> tuple[Peer, Any, RecordingSink, RemoteQueue]:
    broker = Broker(consumer_timeout=None)
    vhost = broker.vhosts["/"]
    links = SimpleNamespace(
        node="a",
        incarnation=1,
        secret="s",
        now=lambda: None,
        gauge_add=lambda _n: None,
        server=SimpleNamespace(broker=broker),
    )
    peer = Peer(cast("Any", links), "b")
    conn = SimpleNamespace(transport=_Transport())
    peer.conn = cast("Any", conn)
    peer.up = True
    queue = RemoteQueue(
        peer,
        vhost,
        "q",
        durable=True,
        auto_delete=False,
        exclusive=False,
        arguments=ARGS,
        config=PLAIN,
    )
    queue.replicated = replicated
    vhost.add_remote_queue(queue)
    sink = RecordingSink()
    Session(vhost, object(), sink).consume(
        "q", "client", no_ack=False, exclusive=False, arguments={}
    )
    return peer, conn, sink, queue


def _consumes(conn: Any) -> list[int]:
    ops = c.Reader().feed(bytes(conn.transport.written))
    return [op.cid for op in ops if isinstance(op, c.Consume)]


def test_a_refused_consumer_of_a_replicated_queue_is_consumed_again() -> None:
    async def run() -> None:
        peer, conn, sink, queue = _setup(replicated=True)
        await asyncio.sleep(0)
        [first] = _consumes(conn)
        peer.received(conn, c.encode(c.Cancelled(first, 404, "no queue 'q' in vhost '/'")))
        assert [x.tag for x in queue.consumers] == ["client"]
        await asyncio.sleep(REFUSED_RETRY_DELAY * 2)
        first_again, second = _consumes(conn)
        assert first_again == first
        assert second != first
        peer.received(conn, c.encode(c.ConsumeOk(second)))
        assert peer.refused == {}
        assert sink.take("consumer_cancelled") == []

    asyncio.run(run())


def test_a_refusal_that_lasts_cancels_the_consumer() -> None:
    async def run() -> None:
        peer, conn, sink, queue = _setup(replicated=True)
        await asyncio.sleep(0)
        [cid] = _consumes(conn)
        peer.received(conn, c.encode(c.Cancelled(cid, 404, "no queue")))
        assert sink.take("consumer_cancelled") == []
        [consumer] = queue.consumers
        assert peer.refused == {consumer: 1}
        peer.refused[consumer] = REFUSED_RETRIES  # refused that often already
        await asyncio.sleep(REFUSED_RETRY_DELAY * 2)
        cid = _consumes(conn)[-1]
        peer.received(conn, c.encode(c.Cancelled(cid, 404, "no queue")))
        assert [e.consumer_tag for e in sink.take("consumer_cancelled")] == ["client"]
        assert queue.consumers == []
        assert peer.refused == {}

    asyncio.run(run())


def test_a_classic_queue_consumer_refused_is_cancelled_at_once() -> None:
    async def run() -> None:
        peer, conn, sink, queue = _setup(replicated=False)
        await asyncio.sleep(0)
        [cid] = _consumes(conn)
        peer.received(conn, c.encode(c.Cancelled(cid, 404, "no queue")))
        assert [e.consumer_tag for e in sink.take("consumer_cancelled")] == ["client"]
        assert queue.consumers == []

    asyncio.run(run())
