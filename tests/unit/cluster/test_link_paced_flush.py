"""A publisher paced into a queue that falls behind on its leader forwards a few publishes
a turn of its connection: the dialling side writes what several such turns forwarded at
once (``cluster/link.py``, ``Peer._flush``: up to ``PACED_FLUSH_TURNS`` more loop turns,
while under ``PACED_FLUSH_BYTES``), not one link write a turn; a queue that keeps up, a
barrier and a full batch are written at the turn's end as before, and nothing is lost or
reordered."""

from __future__ import annotations

import asyncio

from leveret.cluster.link import PACED_FLUSH_BYTES, PACED_FLUSH_TURNS
from leveret.convert.amqp091 import wire_message
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import RecordingTransport, dialled, remote_queue

PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags


class _Counted(RecordingTransport):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        super().write(data)


def _turns(behind: bool, turns: int, per_turn: int, size: int = 16) -> tuple[int, list[c.Op]]:
    """``turns`` loop turns of ``per_turn`` publishes each; the link's writes, and what the
    leader reads."""

    async def run() -> tuple[int, list[c.Op]]:
        server, peer, conn, _ = dialled()
        transport = conn.transport = _Counted()
        queue = remote_queue(server, peer)
        queue.behind = behind
        for turn in range(turns):
            for i in range(per_turn):
                body = b"%d.%d" % (turn, i) + bytes(size)
                peer.publish(queue, wire_message("", "q", PROPS, body), False)
            await asyncio.sleep(0)
        for _ in range(PACED_FLUSH_TURNS + 1):
            await asyncio.sleep(0)
        assert not peer.frames
        return transport.writes, transport.ops()

    return asyncio.run(run())


def _expected(turns: int, per_turn: int, size: int = 16) -> list[c.Op]:
    return [
        c.Publish(0, "/", "q", "", "q", 0, PROPS, b"%d.%d" % (t, i) + bytes(size))
        for t in range(turns)
        for i in range(per_turn)
    ]


def test_a_paced_publishers_turns_share_a_write() -> None:
    turns = 4 * (PACED_FLUSH_TURNS + 1)
    writes, ops = _turns(True, turns, 10)
    assert ops == _expected(turns, 10)
    assert writes == turns // (PACED_FLUSH_TURNS + 1)


def test_a_queue_that_keeps_up_is_written_every_turn() -> None:
    writes, ops = _turns(False, 8, 10)
    assert ops == _expected(8, 10)
    assert writes == 8


def test_a_full_batch_is_written_at_once() -> None:
    # Each turn's publishes past PACED_FLUSH_BYTES: written at its end.
    size = PACED_FLUSH_BYTES // 10
    writes, ops = _turns(True, 5, 10, size)
    assert ops == _expected(5, 10, size)
    assert writes == 5


def test_a_barrier_is_not_kept_waiting() -> None:
    # A client's cancel waits for the barrier's answer: its Stat goes at the turn's end.
    async def run() -> None:
        server, peer, _conn, transport = dialled()
        queue = remote_queue(server, peer)
        queue.behind = True
        peer.publish(queue, wire_message("", "q", PROPS, b"x"), False)
        assert peer.caught_up(queue) is not None
        await asyncio.sleep(0)
        assert [type(op) for op in transport.ops()] == [c.Publish, c.Stat]

    asyncio.run(run())


def test_a_link_lost_while_the_flush_waits_writes_nothing_on_the_next() -> None:
    async def run() -> None:
        server, peer, conn, transport = dialled()
        queue = remote_queue(server, peer)
        queue.behind = True
        peer.publish(queue, wire_message("", "q", PROPS, b"x"), False)
        await asyncio.sleep(0)
        assert not transport.written  # waiting for the paced publisher's next turn
        peer.lost(conn)
        for _ in range(PACED_FLUSH_TURNS + 1):
            await asyncio.sleep(0)
        assert not transport.written
        assert not peer.frames

    asyncio.run(run())
