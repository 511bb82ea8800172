"""The publishes' window on the dialing side of the inter-node link (``cluster/link.py``
``Peer.room``): a publisher is held once the leader has more than a window of this node's
publishes unhandled (a smaller one for a queue falling behind), and goes on once the
leader's ``Taken`` brings that to half; a leader that keeps no account holds nobody, a
lost link releases everyone, and an account past what was sent is refused."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from leveret.cluster.link import BEHIND_WINDOW, PUBLISH_WINDOW, Peer
from leveret.convert.amqp091 import wire_message
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.dialled_link import dialled, remote_queue

if TYPE_CHECKING:
    from leveret.model.completion import Completion
    from leveret.model.queues.remote import RemoteQueue


PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags
BODY = b"x" * 1000
WEIGHT = c.publish_weight(PROPS, BODY)


def done(room: Completion[None]) -> bool:
    # A call, not the property: the type checker would keep an earlier assert's answer.
    return room.done


def _publish(peer: Peer, queue: RemoteQueue, n: int) -> None:
    for _ in range(n):
        peer.publish(queue, wire_message("", "q", PROPS, BODY), False)


def test_the_window_holds_a_publisher_until_the_leader_has_handled_half_of_it() -> None:
    async def run() -> None:
        server, peer, conn, _ = dialled()
        queue = remote_queue(server, peer)
        peer.received(conn, c.encode(c.Taken(0)))  # the leader keeps the account
        fits = PUBLISH_WINDOW // WEIGHT
        _publish(peer, queue, fits)
        assert peer.room(False) is None
        _publish(peer, queue, 1)
        room = peer.room(False)
        assert room is not None
        assert not room.done
        assert peer.room(False) is room  # every publisher waits for the same
        sent = (fits + 1) * WEIGHT
        peer.received(conn, c.encode(c.Taken(sent - PUBLISH_WINDOW // 2 - 1)))
        assert not done(room)  # more than half still unhandled
        peer.received(conn, c.encode(c.Taken(sent - PUBLISH_WINDOW // 2)))
        assert done(room)
        assert peer.room(False) is None
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_queue_falling_behind_has_the_smaller_window() -> None:
    async def run() -> None:
        server, peer, conn, _ = dialled()
        queue = remote_queue(server, peer)
        peer.received(conn, c.encode(c.Taken(0)))
        _publish(peer, queue, BEHIND_WINDOW // WEIGHT + 1)
        assert peer.room(False) is None
        room = peer.room(True)
        assert room is not None
        # Released at half of the window it was held by.
        peer.received(conn, c.encode(c.Taken(peer.sent_weight - BEHIND_WINDOW // 2)))
        assert room.done
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_leader_without_the_account_holds_nobody_and_a_lost_link_releases() -> None:
    async def run() -> None:
        server, peer, conn, _ = dialled()
        queue = remote_queue(server, peer)
        _publish(peer, queue, 2 * PUBLISH_WINDOW // WEIGHT)
        assert peer.room(False) is None  # no Taken yet: an older leader
        peer.received(conn, c.encode(c.Taken(0)))
        room = peer.room(False)
        assert room is not None
        peer.lost(conn)
        assert room.done
        assert peer.room(False) is None
        assert peer.sent_weight == peer.taken == 0
        await asyncio.sleep(0)

    asyncio.run(run())


@pytest.mark.parametrize("upto", [1, -1])
def test_an_account_past_what_was_sent_or_going_back_closes_the_link(upto: int) -> None:
    async def run() -> None:
        server, peer, conn, transport = dialled()
        queue = remote_queue(server, peer)
        _publish(peer, queue, 1)
        peer.received(conn, c.encode(c.Taken(WEIGHT)))
        peer.received(conn, c.encode(c.Taken(WEIGHT + upto)))
        assert transport.aborted
        await asyncio.sleep(0)

    asyncio.run(run())
