"""What a client's cancel or close through this node waits for (``RemoteQueue.withdrawn``,
``Peer.caught_up``): the leader's answer to a ``Stat`` written after the turn's cancels,
one per turn however many consumers went, and done by any answer (a 404 too), by the
link's loss, or at once (None) while the link is down."""

from __future__ import annotations

import asyncio

from leveret.model.consumer import CallbackOwner
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import dialled, remote_queue


def test_the_cancels_of_a_turn_wait_for_one_stat_written_after_them() -> None:
    async def run() -> None:
        server, peer, conn, transport = dialled()
        queues = [remote_queue(server, peer, name) for name in ("q1", "q2")]
        owner = CallbackOwner(lambda _c, _e: None)
        consumers = [q.consumer(f"t-{q.name}", owner, auto_settle=True) for q in queues]
        for queue, consumer in zip(queues, consumers, strict=True):
            queue.add_consumer(consumer)
        await asyncio.sleep(0)
        read = len(transport.written)
        waits = []
        for queue, consumer in zip(queues, consumers, strict=True):
            queue.remove_consumer(consumer)
            waits.append(queue.withdrawn(consumer))
        first, second = waits
        assert first is not None
        assert second is first  # one barrier for the turn
        await asyncio.sleep(0)
        ops = c.Reader().feed(bytes(transport.written[read:]))
        cancels, stat = ops[:-1], ops[-1]
        assert sorted(op.cid for op in cancels if isinstance(op, c.Cancel)) == [1, 2]
        assert len(cancels) == 2
        assert isinstance(stat, c.Stat)  # last: the leader handles the cancels before it
        errors: list[BaseException | None] = []
        first.on_done(lambda done: errors.append(done.error))
        assert errors == []
        # Any answer will do: a queue gone meanwhile answers 404.
        peer.received(conn, c.encode(c.Failed(stat.rid, 404, "no queue")))
        assert errors == [None]

    asyncio.run(run())


def test_the_links_loss_ends_the_wait_and_a_link_down_does_not_wait() -> None:
    async def run() -> None:
        server, peer, conn, _transport = dialled()
        queue = remote_queue(server, peer)
        consumer = queue.consumer("t", CallbackOwner(lambda _c, _e: None), auto_settle=True)
        queue.add_consumer(consumer)
        queue.remove_consumer(consumer)
        before_flush = queue.withdrawn(consumer)
        assert before_flush is not None
        conn.connection_lost(None)  # before the turn's flush asked the leader
        assert before_flush.done
        assert before_flush.error is None
        # Down: the leader lost this node's consumers with the link.
        assert queue.withdrawn(consumer) is None

    asyncio.run(run())


def test_a_leader_that_does_not_answer_holds_the_wait_no_longer_than_its_bound() -> None:
    async def run() -> None:
        server, peer, _conn, transport = dialled()
        peer.caught_up_timeout = 0.01
        queue = remote_queue(server, peer)
        consumer = queue.consumer("t", CallbackOwner(lambda _c, _e: None), auto_settle=True)
        queue.add_consumer(consumer)
        queue.remove_consumer(consumer)
        waiting = queue.withdrawn(consumer)
        assert waiting is not None
        errors: list[BaseException | None] = []
        waiting.on_done(lambda done: errors.append(done.error))
        await asyncio.sleep(0)
        assert isinstance(c.Reader().feed(bytes(transport.written))[-1], c.Stat)
        assert errors == []
        await asyncio.sleep(0.05)  # no answer: the bound ends it
        assert errors == [None]

    asyncio.run(run())
