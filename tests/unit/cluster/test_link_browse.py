"""A browsing consumer across the inter-node link (an AMQP 0-10 not-acquired subscription
of a queue led by another node): its ``Consume`` carries ``codec.BROWSE`` in its
arguments; the leader (``server/cluster_link/frontend.py``) makes it one of the queue's
browsers, which sends copies of what the queue holds and then of what arrives, within its
credit, as deliveries that need no settlement, each named by its position in the queue
(``codec.BROWSED``), and takes nothing; the dialling side (``cluster/link.py``) asks for it
unsettled, so that a leader that predates browsing holds what it sends instead of taking
it. An acquire of a browsed message through the proxy asks the leader (``Acquire``), which
takes it unsettled if it is still there and answers as a get."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from leveret.model.broker import Broker
from leveret.model.consumer import CallbackOwner, Consumer
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import dialled, remote_queue
from tests.unit.server.test_cluster_link_frontend import PROPS, handshake, link, send

if TYPE_CHECKING:
    from leveret.model.entry import QueuedMessage
    from leveret.model.queues.remote import RemoteQueue


def test_the_browse_argument_crosses_in_the_consumes_field_table() -> None:
    op = c.Consume(3, "/", "q", False, False, 10, 0, {c.BROWSE: True, "x-stream-offset": 5})
    acquire = c.Acquire(4, "/", "q", 1 << 40)
    decoded, decoded_acquire = c.Reader().feed(c.encode(op) + c.encode(acquire))
    assert decoded == op
    assert isinstance(decoded, c.Consume)
    assert decoded.arguments[c.BROWSE] is True
    assert decoded_acquire == acquire


def test_a_browsing_consumer_is_consumed_with_the_browse_argument_unsettled() -> None:
    async def run() -> None:
        server, peer, conn, transport = dialled()
        queue = remote_queue(server, peer)
        delivered: list[QueuedMessage] = []
        owner = CallbackOwner(lambda _consumer, entry: delivered.append(entry))
        browser = Consumer("b", queue, owner, auto_settle=False, exclusive=False, browses=True)
        taker = Consumer("t", queue, owner, auto_settle=False, exclusive=False, credit=5)
        queue.add_consumer(browser)
        # A browser holds nothing: an exclusive consumer is still taken here.
        exclusive = Consumer("x", queue, owner, auto_settle=True, exclusive=True)
        queue.add_consumer(exclusive)
        queue.remove_consumer(exclusive)
        queue.add_consumer(taker)
        await asyncio.sleep(0)
        consumes = [op for op in transport.ops() if isinstance(op, c.Consume)]
        browse, _exclusive, take = consumes
        assert browse.arguments == {c.BROWSE: True}
        assert not browse.auto_settle
        assert c.BROWSE not in take.arguments
        # What the leader sends it reaches its owner (the message at position 7 there).
        frame = c.deliver_frame(browse.cid, c.BROWSED | 7, False, "", "q", 0, PROPS, b"m")
        peer.received(conn, frame)
        [entry] = delivered
        assert entry.message.body == b"m"
        assert queue.acquire(entry) is None  # not at once: the leader holds it
        assert queue.browse_after(0, 10) == []
        # An acquire asks the leader for that position; its Got is this node's entry.
        claim = queue.claim(entry)
        await asyncio.sleep(0)
        [acquire] = [op for op in transport.ops() if isinstance(op, c.Acquire)]
        assert (acquire.vhost, acquire.queue, acquire.position) == ("/", "q", 7)
        peer.received(conn, c.encode(c.Got(acquire.rid, 12, False, 0, "", "q", 0, PROPS, b"m")))
        taken = claim.result()
        assert taken is not None
        assert taken.message.body == b"m"
        # Settled as a delivery is (its id the leader's).
        queue.settle(taken)
        await asyncio.sleep(0)
        assert c.Settle(c.ACCEPT, (12,)) in transport.ops()
        # Gone on the leader: not taken.
        claim = queue.claim(entry)
        await asyncio.sleep(0)
        rid = [op for op in transport.ops() if isinstance(op, c.Acquire)][-1].rid
        peer.received(conn, c.encode(c.Empty(rid, 0)))
        assert claim.result() is None
        # A delivery that is no browser's copy (a leader that predates browsing consumed
        # for it) is not asked for.
        peer.received(conn, c.deliver_frame(browse.cid, 3, False, "", "q", 0, PROPS, b"old"))
        assert claim_of(queue, delivered[-1]) is None

    asyncio.run(run())


def claim_of(queue: RemoteQueue, entry: QueuedMessage) -> QueuedMessage | None:
    """``queue.claim(entry)``'s result, which must be known at once."""
    claim = queue.claim(entry)
    assert claim.done
    return claim.result()


def _bodies(out: list[c.Op]) -> list[bytes]:
    return [op.body for op in out if isinstance(op, c.Deliver)]


def test_the_leaders_browser_sends_copies_within_its_credit_and_takes_nothing() -> None:
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    send(front, *(c.Publish(0, "/", "q", "", "q", 0, PROPS, b"m%d" % i) for i in range(3)))
    # Asked unsettled (as the dialer asks): it browses all the same.
    out = send(front, c.Consume(1, "/", "q", False, False, 2, 0, {c.BROWSE: True}))
    assert out[0] == c.ConsumeOk(1)
    assert _bodies(out) == [b"m0", b"m1"]
    assert queue.message_count == 3
    assert queue.consumer_count == 0
    assert len(queue.browsers) == 1
    # More credit: the rest, then what arrives.
    assert _bodies(send(front, c.Credit(1, 5, 2))) == [b"m2"]
    assert _bodies(send(front, c.Publish(0, "/", "q", "", "q", 0, PROPS, b"late"))) == [b"late"]
    # A drain: what is there up to the credit (nothing new), then the answer.
    assert send(front, c.Drain(1, 5, 4)) == [c.Drained(1)]
    assert _bodies(send(front, c.Publish(0, "/", "q", "", "q", 0, PROPS, b"after"))) == []
    # Its deliveries need no settlement: a consumer takes every message, unsettled ones none.
    assert queue.message_count == 5
    assert queue.unacked_count == 0
    assert front.unsettled == {}
    out = send(front, c.Cancel(1), c.Consume(2, "/", "q", True, False, 10, 0))
    assert queue.browsers == []
    assert _bodies(out) == [b"m0", b"m1", b"m2", b"late", b"after"]
    assert queue.message_count == 0


def test_an_acquire_takes_a_browsed_message_still_there_unsettled() -> None:
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    send(front, *(c.Publish(0, "/", "q", "", "q", 0, PROPS, b"m%d" % i) for i in range(3)))
    out = send(front, c.Consume(1, "/", "q", False, False, 10, 0, {c.BROWSE: True}))
    copies = [op for op in out if isinstance(op, c.Deliver)]
    assert all(op.did & c.BROWSED for op in copies)
    positions = [op.did & ~c.BROWSED for op in copies]
    # The second, then the first: each taken unsettled, answered as a get.
    [got] = send(front, c.Acquire(5, "/", "q", positions[1]))
    assert isinstance(got, c.Got)
    assert (got.rid, got.body, got.remaining) == (5, b"m1", 2)
    assert queue.message_count == 2
    assert queue.unacked_count == 1
    [first] = send(front, c.Acquire(6, "/", "q", positions[0]))
    assert isinstance(first, c.Got)
    assert first.body == b"m0"
    # Taken already, or no such position: not taken.
    assert send(front, c.Acquire(7, "/", "q", positions[1])) == [c.Empty(7, 1)]
    assert send(front, c.Acquire(8, "/", "q", 99)) == [c.Empty(8, 1)]
    failed = send(front, c.Acquire(9, "/", "missing", 1))
    assert [type(op) for op in failed] == [c.Failed]
    # Settled as deliveries are: one accepted, one requeued (a consumer then gets it).
    send(front, c.Settle(c.ACCEPT, (got.did,)), c.Settle(c.REQUEUE, (first.did,)))
    assert queue.unacked_count == 0
    out = send(front, c.Cancel(1), c.Consume(2, "/", "q", True, False, 10, 0))
    assert _bodies(out) == [b"m0", b"m2"]


def test_a_browser_is_gone_with_its_link() -> None:
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    send(front, c.Consume(1, "/", "q", True, False, 10, 0, {c.BROWSE: True}))
    assert len(queue.browsers) == 1
    front.shell.connection_lost()
    assert queue.browsers == []
    assert front.browsing == {}
