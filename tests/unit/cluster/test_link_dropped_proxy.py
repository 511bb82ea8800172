"""A proxy that goes (its queue deleted, or another node elected to lead it) takes its
consumers and its publishes' pending confirms with it (``cluster/link.py``
``Peer.dropped``): the publishes waiting for that leader's confirm are refused at once,
those to other queues of the same leader still wait, and a confirm that comes later for
a refused one changes nothing."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from leveret.convert.amqp091 import wire_message
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import dialled, remote_queue

if TYPE_CHECKING:
    from leveret.model.completion import Completion

PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags


def _done(completion: Completion[bool]) -> bool:
    # A call, not the property: the type checker would keep an earlier assert's answer.
    return completion.done


def test_the_pending_confirms_of_a_dropped_proxy_are_refused_at_once() -> None:
    async def run() -> None:
        server, peer, conn, _transport = dialled()
        moved = remote_queue(server, peer, "moved")
        stays = remote_queue(server, peer, "stays")
        first = peer.publish(moved, wire_message("", "moved", PROPS, b"1"), True)
        other = peer.publish(stays, wire_message("", "stays", PROPS, b"2"), True)
        second = peer.publish(moved, wire_message("", "moved", PROPS, b"3"), True)
        assert first is not None
        assert other is not None
        assert second is not None
        assert [first.done, other.done, second.done] == [False, False, False]

        # Its record says another node leads it now: the applier puts a new proxy in
        # its place, and the old one goes.
        server.broker.vhosts["/"].remove_queue(moved)
        assert (first.done, second.done) == (True, True)
        assert (first.result(), second.result()) == (False, False)
        assert not _done(other)  # another queue of the same leader still waits

        # The old leader's confirm of all three, arriving late: only the waiting one
        # takes it.
        peer.received(conn, c.encode(c.Confirm(3, True, True)))
        assert _done(other)
        assert other.result() is True
        assert (first.result(), second.result()) == (False, False)
        assert not peer.waits
        await asyncio.sleep(0)

    asyncio.run(run())
