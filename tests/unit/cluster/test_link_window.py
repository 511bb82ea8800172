"""The publishes' window on the dialing side of the inter-node link (``cluster/link.py``
``Peer.room``): a publisher is held once the leader has more than a window of this node's
publishes unhandled (a smaller one for a queue falling behind), and goes on once the
leader's ``Taken`` brings that to half; a leader that keeps no account holds nobody, a
lost link releases everyone, and an account past what was sent is refused."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest

from leveret.cluster.link import BEHIND_WINDOW, PUBLISH_WINDOW, Peer
from leveret.convert.amqp091 import wire_message
from leveret.protocol.cluster import codec as c

if TYPE_CHECKING:
    from leveret.model.completion import Completion


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        self.aborted = True


def _peer() -> tuple[Peer, Any]:
    links = SimpleNamespace(
        node="a", incarnation=1, secret="s", now=lambda: None, gauge_add=lambda _n: None
    )
    peer = Peer(cast("Any", links), "b")
    conn = SimpleNamespace(transport=_Transport())
    peer.conn = cast("Any", conn)
    peer.up = True
    return peer, conn


def _queue() -> Any:
    return SimpleNamespace(vhost_name="/", name="q")


PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags
BODY = b"x" * 1000
WEIGHT = c.publish_weight(PROPS, BODY)


def done(room: Completion[None]) -> bool:
    # A call, not the property: the type checker would keep an earlier assert's answer.
    return room.done


def _publish(peer: Peer, n: int) -> None:
    for _ in range(n):
        peer.publish(_queue(), wire_message("", "q", PROPS, BODY), False)


def test_the_window_holds_a_publisher_until_the_leader_has_handled_half_of_it() -> None:
    async def run() -> None:
        peer, conn = _peer()
        peer.received(conn, c.encode(c.Taken(0)))  # the leader keeps the account
        fits = PUBLISH_WINDOW // WEIGHT
        _publish(peer, fits)
        assert peer.room(False) is None
        _publish(peer, 1)
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
        peer, conn = _peer()
        peer.received(conn, c.encode(c.Taken(0)))
        _publish(peer, BEHIND_WINDOW // WEIGHT + 1)
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
        peer, conn = _peer()
        _publish(peer, 2 * PUBLISH_WINDOW // WEIGHT)
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
        peer, conn = _peer()
        _publish(peer, 1)
        peer.received(conn, c.encode(c.Taken(WEIGHT)))
        peer.received(conn, c.encode(c.Taken(WEIGHT + upto)))
        assert conn.transport.aborted
        await asyncio.sleep(0)

    asyncio.run(run())
