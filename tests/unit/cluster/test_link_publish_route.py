"""A proxy's publishes carry the exchange and routing key of each message: the dialling
side keeps each proxy's encoded names, exchange and routing key while they repeat
(``cluster/link.py``'s ``_Route``) and writes each Publish as pieces of its turn's write
(``codec.add_publish``); a message with another exchange or routing key, to another queue,
with a confirm or without, crosses with its own."""

from __future__ import annotations

import asyncio

from leveret.convert.amqp091 import wire_message
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import dialled, remote_queue

PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags


def test_each_publish_carries_its_own_exchange_and_routing_key() -> None:
    async def run() -> None:
        server, peer, _conn, transport = dialled()
        q1, q2 = remote_queue(server, peer, "q1"), remote_queue(server, peer, "q2")
        sent = [
            (q1, "ex", "k1", False),
            (q1, "ex", "k1", True),
            (q1, "ex", "k2", False),
            (q2, "ex", "k2", False),
            (q1, "", "k2", True),
            (q1, "", "k2", False),
            (q2, "other", "k1", False),
            (q1, "", "k2", False),
        ]
        expected: list[c.Op] = []
        seq = 0
        for i, (queue, exchange, key, confirm) in enumerate(sent):
            body = b"m%d" % i * (i * 40)  # past 255 bytes from the eighth on
            peer.publish(queue, wire_message(exchange, key, PROPS, body), confirm)
            if confirm:
                seq += 1
            expected.append(
                c.Publish(seq if confirm else 0, "/", queue.name, exchange, key, 0, PROPS, body)
            )
            if i == 3:
                peer._flush()  # a turn's write, then another
        peer._flush()
        assert transport.ops() == expected
        assert peer.size == 0
        await asyncio.sleep(0)

    asyncio.run(run())


def test_settlements_go_before_a_publish_written_after_them() -> None:
    async def run() -> None:
        server, peer, _conn, transport = dialled()
        queue = remote_queue(server, peer)
        peer.settles[c.ACCEPT] = [7]
        peer.publish(queue, wire_message("", "q", PROPS, b"x"), False)
        assert peer.size == len(transport.written) + sum(len(f) for f in peer.frames)
        peer._flush()
        assert transport.ops() == [
            c.Settle(c.ACCEPT, (7,)),
            c.Publish(0, "/", "q", "", "q", 0, PROPS, b"x"),
        ]
        await asyncio.sleep(0)

    asyncio.run(run())
