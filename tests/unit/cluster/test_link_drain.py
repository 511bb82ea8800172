"""A drain and a credit that shrinks through the dialling side of the link
(``cluster/link.py`` ``Peer.drain``, ``Peer._credits``): a consumer on this node of a queue
led by ``b``, its owner taking what its credit allows (as a 1.0 link does). A drain asks the
leader (``Drain``) and is done once its answer (``Drained``) came, with the leader's
deliveries handed first; no ``Credit`` overtakes it; a drain larger than the leader is
allowed at once (``WINDOW``) asks again while the leader had that much; a lower credit is
passed on."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from leveret.cluster.link import WINDOW, Peer, _Connection
from leveret.model.consumer import CallbackOwner, Consumer
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import RecordingTransport, dialled, remote_queue

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.model.completion import Completion
    from leveret.model.entry import QueuedMessage

PROPS = b"\x00\x00"


class Setup:
    def __init__(self) -> None:
        server, peer, conn, transport = dialled()
        self.peer: Peer = peer
        self.conn: _Connection = conn
        self.transport: RecordingTransport = transport
        self.queue = remote_queue(server, peer)
        # What happened, in order: deliveries ("m") and the drains done ("done").
        self.events: list[str] = []
        owner = CallbackOwner(self._deliver)
        self.consumer: Consumer = self.queue.consumer("t", owner, auto_settle=True, credit=0)
        self.queue.add_consumer(self.consumer)
        self.read = 0
        self.sent = 0

    def _deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        consumer.credit -= 1
        self.events.append("m")

    def written(self) -> list[c.Op]:
        """What node ``a`` wrote since the last call (Consume, Credit, Drain...)."""
        data = bytes(self.transport.written[self.read :])
        self.read = len(self.transport.written)
        return c.Reader().feed(data)

    def leader_sends(self, n: int, *, drained: bool = False) -> None:
        frames = []
        for _ in range(n):
            self.sent += 1
            frames.append(c.deliver_frame(1, self.sent, False, "", "q", 0, PROPS, b"m"))
        if drained:
            frames.append(c.encode(c.Drained(1)))
        self.peer.received(self.conn, b"".join(frames))

    def drain(self, credit: int) -> Completion[None]:
        self.consumer.credit = credit
        done = self.queue.drain(self.consumer)
        assert done is not None
        done.on_done(lambda _: self.events.append("done"))
        return done


def _run(test: Callable[[Setup], Awaitable[None]]) -> None:
    async def run() -> None:
        setup = Setup()
        await asyncio.sleep(0)
        [consume] = setup.written()
        assert isinstance(consume, c.Consume)
        assert consume.credit == 0
        await test(setup)

    asyncio.run(run())


def test_a_drain_is_done_once_the_leaders_deliveries_and_answer_came() -> None:
    async def test(s: Setup) -> None:
        done = s.drain(5)
        await asyncio.sleep(0)
        assert s.written() == [c.Drain(1, 5, 0)]
        s.leader_sends(3)
        assert not done.done
        s.leader_sends(0, drained=True)
        assert s.events == ["m", "m", "m", "done"]
        assert s.consumer.credit == 2  # the owner gives it up (a 1.0 link: flow)
        s.consumer.credit = 0
        await asyncio.sleep(0)
        # The leader has no credit left and was told nothing more.
        assert s.written() == []

    _run(test)


def test_no_credit_overtakes_a_drain_and_a_later_flow_is_told_after_it() -> None:
    async def test(s: Setup) -> None:
        s.drain(4)
        await asyncio.sleep(0)
        assert s.written() == [c.Drain(1, 4, 0)]
        # A flow while the drain is on its way (it replaces the drain on a 1.0 link).
        s.consumer.credit = 10
        s.queue.dispatch()
        await asyncio.sleep(0)
        assert s.written() == []
        s.leader_sends(4, drained=True)
        await asyncio.sleep(0)
        # The leader gave up the rest; what the consumer may take now (6) is told.
        assert s.written() == [c.Credit(1, 6, 4)]

    _run(test)


def test_a_drain_past_the_window_asks_again_while_the_leader_had_that_much() -> None:
    async def test(s: Setup) -> None:
        done = s.drain(WINDOW + 300)
        await asyncio.sleep(0)
        assert s.written() == [c.Drain(1, WINDOW, 0)]
        s.leader_sends(WINDOW, drained=True)
        assert not done.done
        await asyncio.sleep(0)
        assert s.written() == [c.Drain(1, 300, WINDOW)]
        s.leader_sends(120, drained=True)
        assert s.events[-1] == "done"
        assert s.events.count("m") == WINDOW + 120
        assert s.consumer.credit == 180

    _run(test)


def test_a_drain_is_over_when_the_link_goes() -> None:
    async def test(s: Setup) -> None:
        done = s.drain(5)
        s.leader_sends(2)
        s.peer.lost(s.conn)
        assert done.done
        assert s.events == ["m", "m", "done"]
        # Down: nothing to ask, the owner gives the credit up at once.
        assert s.queue.drain(s.consumer) is None

    _run(test)


def test_a_credit_that_shrinks_is_passed_on() -> None:
    async def test(s: Setup) -> None:
        s.consumer.credit = 10
        s.queue.dispatch()
        await asyncio.sleep(0)
        assert s.written() == [c.Credit(1, 10, 0)]
        s.leader_sends(3)
        await asyncio.sleep(0)
        assert s.written() == []  # 7 left: deliveries do not shrink it
        s.consumer.credit = 2  # a 1.0 flow lowering the credit
        s.queue.dispatch()
        await asyncio.sleep(0)
        assert s.written() == [c.Credit(1, 2, 3)]
        s.consumer.credit = 0
        s.queue.dispatch()
        await asyncio.sleep(0)
        assert s.written() == [c.Credit(1, 0, 3)]
        s.consumer.credit = 5
        s.queue.dispatch()
        await asyncio.sleep(0)
        assert s.written() == [c.Credit(1, 5, 3)]
        # A 0-9-1 prefetch lowered under what is unacked leaves the credit negative: 0.
        s.consumer.credit = -4
        s.queue.dispatch()
        await asyncio.sleep(0)
        assert s.written() == [c.Credit(1, 0, 3)]

    _run(test)
