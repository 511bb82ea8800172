"""A link consumer's credit on its leader (``cluster/link.py`` ``Peer._advertise``): a 0-9-1
consumer on this node with a prefetch window, its queue led by ``b``. The leader is told
what the consumer may take by quarters of the window (one ``Credit`` frame per quarter, not
per ack), and at once when it has used everything it was allowed; it never has more credit
than the window leaves, so nothing it sends waits here, and a consumer with room is never
left without deliveries while the leader has messages."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.cluster.link import Peer, _Connection
from leveret.protocol.cluster import codec as c
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink
from tests.unit.cluster.dialled_link import RecordingTransport, dialled, remote_queue

PROPS = b"\x00\x00"


class Leader:
    """Node ``b``'s side as its ``LinkFrontEnd`` keeps the consumer's credit (from the
    ``Consume`` and each ``Credit`` read), with an endless queue."""

    def __init__(self, transport: RecordingTransport) -> None:
        self.transport = transport
        self.read = 0  # bytes of the link read so far
        self.cid = 0
        self.credit = 0
        self.sent = 0
        self.credits: list[c.Credit] = []

    def take(self) -> None:
        """Read what node ``a`` wrote since the last call."""
        data = bytes(self.transport.written[self.read :])
        self.read = len(self.transport.written)
        for op in c.Reader().feed(data):
            if isinstance(op, c.Consume):
                self.cid, self.credit = op.cid, op.credit
            elif isinstance(op, c.Credit):
                self.credits.append(op)
                self.credit = max(0, op.received + op.credit - self.sent)

    def deliveries(self, n: int) -> bytes:
        """Up to ``n`` deliveries, as far as its credit goes."""
        frames = []
        while n > 0 and self.credit > 0:
            self.sent += 1
            self.credit -= 1
            n -= 1
            frames.append(c.deliver_frame(self.cid, self.sent, False, "", "q", 0, PROPS, b"m"))
        return b"".join(frames)


Link = tuple[Peer, _Connection]


async def _consumer(prefetch: int) -> tuple[Session, Leader, RecordingSink, Link]:
    server, peer, conn, transport = dialled()
    remote_queue(server, peer)
    sink = RecordingSink()
    session = Session(server.broker.vhosts["/"], object(), sink)
    session.set_qos(0, prefetch, False)
    session.consume("q", "client", no_ack=False, exclusive=False, arguments={})
    await asyncio.sleep(0)  # the link's flush
    leader = Leader(transport)
    leader.take()
    assert leader.credit == prefetch
    return session, leader, sink, (peer, conn)


def _deliver(link: Link, leader: Leader, n: int) -> None:
    peer, conn = link
    data = leader.deliveries(n)
    if data:
        peer.received(conn, data)


def _tags(sink: RecordingSink) -> list[int]:
    return [event.delivery_tag for event in sink.take("deliver")]


def test_credit_goes_back_by_quarters_of_the_prefetch_window() -> None:
    async def run() -> None:
        session, leader, sink, link = await _consumer(100)
        _deliver(link, leader, 100)
        tags = _tags(sink)
        assert len(tags) == 100
        for tag in tags[:30]:  # in one turn: one Credit
            session.ack(tag)
        await asyncio.sleep(0)
        leader.take()
        assert [(op.credit, op.received) for op in leader.credits] == [(30, 100)]
        _deliver(link, leader, 10)  # 20 more on their way
        tags = tags[30:] + _tags(sink)
        for tag in tags[:24]:  # a turn each, less than a quarter of the window
            session.ack(tag)
            await asyncio.sleep(0)
        leader.take()
        assert len(leader.credits) == 1
        session.ack(tags[24])
        await asyncio.sleep(0)
        leader.take()
        assert [(op.credit, op.received) for op in leader.credits[1:]] == [(45, 110)]
        assert leader.credit == 45

    asyncio.run(run())


def test_a_leader_that_used_all_its_credit_is_told_of_one_ack() -> None:
    # A client that holds most of its window unacked (acking one, then waiting for the next
    # delivery) must get it: the leader sent all it was allowed, so it is told at once.
    async def run() -> None:
        session, leader, sink, link = await _consumer(100)
        _deliver(link, leader, 100)
        tags = _tags(sink)
        session.ack(tags[0])
        await asyncio.sleep(0)
        leader.take()
        assert [(op.credit, op.received) for op in leader.credits] == [(1, 100)]
        _deliver(link, leader, 10)
        assert len(_tags(sink)) == 1

    asyncio.run(run())


@settings(max_examples=60, deadline=None)
@given(
    prefetch=st.integers(1, 40),
    steps=st.lists(
        st.tuples(st.sampled_from(["deliver", "ack", "ack-multiple", "flush"]), st.integers(1, 50)),
        max_size=60,
    ),
)
def test_the_window_is_exact_and_never_stalls(prefetch: int, steps: list[tuple[str, int]]) -> None:
    async def run() -> None:
        session, leader, sink, link = await _consumer(prefetch)
        peer, _conn = link
        unacked: list[int] = []
        for step, n in steps:
            if step == "deliver":
                _deliver(link, leader, n)
            elif step == "flush":
                await asyncio.sleep(0)
                leader.take()
            elif unacked:
                if step == "ack":
                    session.ack(unacked.pop(min(n, len(unacked)) - 1))
                else:
                    upto = unacked[min(n, len(unacked)) - 1]
                    session.ack(upto, multiple=True)
                    unacked = [tag for tag in unacked if tag > upto]
            unacked += _tags(sink)
            # Never more than the window held by the client, nothing waiting here: the
            # leader's credit never ran ahead of what the window leaves.
            assert len(unacked) <= prefetch
            [remote] = peer.consumers.values()
            assert not remote.buffer
        # Quiet: every frame read both ways, the leader delivering what it may. The client
        # then holds a full window (it has room for nothing more), whatever came before.
        for _ in range(3):
            await asyncio.sleep(0)
            leader.take()
            _deliver(link, leader, prefetch)
            unacked += _tags(sink)
        assert len(unacked) == prefetch

    asyncio.run(run())


def test_a_consumer_limited_after_it_consumed_is_not_left_waiting() -> None:
    # Consumed without a prefetch window (the leader given 1000 at a time), then limited to
    # 10 (basic.qos): once the 1000 are through, the leader is told of each window again.
    async def run() -> None:
        server, peer, conn, transport = dialled()
        remote_queue(server, peer)
        sink = RecordingSink()
        session = Session(server.broker.vhosts["/"], object(), sink)
        session.consume("q", "client", no_ack=False, exclusive=False, arguments={})
        await asyncio.sleep(0)
        leader = Leader(transport)
        leader.take()
        session.set_qos(0, 10, False)
        link = (peer, conn)
        handed = 0
        for _ in range(200):
            await asyncio.sleep(0)
            leader.take()
            _deliver(link, leader, 1000)
            tags = _tags(sink)
            handed += len(tags)
            for tag in tags:
                session.ack(tag)
            if handed > 1100:
                break
        assert handed > 1100

    asyncio.run(run())
