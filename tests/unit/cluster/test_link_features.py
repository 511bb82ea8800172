"""Per-peer feature negotiation on the inter-node link: each side sends a newer operation
only to a peer whose Hello named it, and the older form to any other (``Publish`` for each
queue rather than ``Also``, ``Deliver`` whole rather than ``DeliverAlso``, no ``Taken``, a
``Consume`` without its table), so a cluster is upgraded one node at a time. The leader's
side (``server/cluster_link/frontend.py``) and the dialer's (``cluster/link.py``), each
given a hand-written Hello that announces fewer features."""

from __future__ import annotations

import asyncio
import logging

import pytest

from leveret.cluster.link import FEATURES_VARIABLE, Peer, announced
from leveret.convert.amqp091 import wire_message
from leveret.model.broker import Broker
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol.cluster import codec as c
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink
from leveret.testing.client import feed
from tests.unit.cluster.dialled_link import RecordingTransport, dialled, remote_queue
from tests.unit.server.test_cluster_link_frontend import PROPS, SECRET, handshake, link, send

# What a node of the version before Also and DeliverAlso would announce.
OLDER = frozenset({c.TAKEN, c.CONSUME_ARGUMENTS})


def _leader_with_three_queues() -> Broker:
    broker = Broker()
    for name in ("q1", "q2", "q3"):
        broker.vhosts["/"].declare_queue(name, owner=None)
    return broker


def test_a_leader_sends_a_peer_that_announced_none_only_the_first_versions_forms() -> None:
    front, _ = link(_leader_with_three_queues())
    # No Taken(0) after the handshake: the peer keeps no window.
    assert handshake(front, features=frozenset()) == []
    assert front.agreed == frozenset()
    # Its consumes come without their table (the first version's Consume).
    frames = b"".join(
        c.plain_consume_frame(c.Consume(cid, "/", f"q{cid}", False, False, 10, 0, {}))
        for cid in (1, 2, 3)
    )
    out = send(front, c.Publish(1, "/", "q1", "fan", "k", 0, PROPS, b"body"))
    assert out == [c.Confirm(1, False, True)]  # confirmed, nothing taken
    feed(front.shell, frames, 1.0)
    out = c.Reader().feed(b"".join(front.shell.take_output(1.0)))
    assert [op for op in out if isinstance(op, c.ConsumeOk)] == [
        c.ConsumeOk(1),
        c.ConsumeOk(2),
        c.ConsumeOk(3),
    ]
    assert [op for op in out if not isinstance(op, c.ConsumeOk)] == [
        c.Deliver(1, 1, False, "fan", "k", 0, PROPS, b"body")
    ]
    # A fanout's message (one Publish, two Also: the peer never sends those, but a leader
    # reads them all the same) goes back whole to each consumer, never as a DeliverAlso.
    out = send(
        front,
        c.Publish(0, "/", "q1", "fan", "k", 0, PROPS, b"next"),
        c.Also(0, "/", "q2"),
        c.Also(0, "/", "q3"),
    )
    assert out == [
        c.Deliver(1, 2, False, "fan", "k", 0, PROPS, b"next"),
        c.Deliver(2, 3, False, "fan", "k", 0, PROPS, b"next"),
        c.Deliver(3, 4, False, "fan", "k", 0, PROPS, b"next"),
    ]


def test_a_leader_limited_to_fewer_features_announces_and_uses_only_those() -> None:
    front, identity = link(_leader_with_three_queues())
    identity.features = frozenset({c.TAKEN})
    mine = c.Hello("a", 1, b"n" * 16, c.cluster_tag(SECRET), c.FEATURES)
    hello, _proof = send(front, mine)
    assert isinstance(hello, c.Hello)
    assert hello.features == frozenset({c.TAKEN})
    out = send(front, c.Proof(c.proof(SECRET, "dialer", "a", c.challenge(hello))))
    assert out == [c.Taken(0)]
    send(front, *(c.Consume(cid, "/", f"q{cid}", False, False, 10, 0, {}) for cid in (1, 2)))
    out = send(
        front,
        c.Publish(0, "/", "q1", "fan", "k", 0, PROPS, b"body"),
        c.Also(0, "/", "q2"),
    )
    weight = c.publish_weight(PROPS, b"body")
    assert out == [
        c.Deliver(1, 1, False, "fan", "k", 0, PROPS, b"body"),
        c.Deliver(2, 2, False, "fan", "k", 0, PROPS, b"body"),
        c.Taken(2 * weight),
    ]


def _dialled_through_handshake(
    features: frozenset[str] | None,
) -> tuple[Peer, RecordingTransport, list[str]]:
    """Node ``a``'s link to ``b`` through its handshake, ``b``'s Hello announcing
    ``features``; and what the link logged at info."""
    server, peer, conn, transport = dialled()
    peer.up = False
    peer.connected(conn)
    peer._flush()
    [mine] = transport.ops()
    assert isinstance(mine, c.Hello)
    assert mine.features == c.FEATURES
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("leveret.cluster")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        theirs = c.Hello("b", 2, b"m" * 16, c.cluster_tag("s"), features)
        proof = c.Proof(c.proof("s", "listener", "b", c.challenge(mine)))
        peer.received(conn, c.encode(theirs) + c.encode(proof))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert peer.up, "the handshake failed"
    peer._flush()
    transport.written.clear()
    remote_queue(server, peer, "q1")
    remote_queue(server, peer, "q2")
    return peer, transport, records


def test_a_dialer_sends_a_leader_that_did_not_announce_also_a_publish_per_queue() -> None:
    async def run() -> None:
        peer, transport, records = _dialled_through_handshake(OLDER)
        assert peer.agreed == OLDER
        assert records == [
            "inter-node link to node 'b' is up (features: consume-arguments, taken; "
            "not: also, deliver-also, deliver-kept)"
        ]
        vhost = peer.links.server.broker.vhosts["/"]
        message = wire_message("fan", "", PROPS, b"body")
        for name in ("q1", "q2"):
            queue = vhost.remote_queues[name]
            assert isinstance(queue, RemoteQueue)
            peer.publish(queue, message, True)
        peer._flush()
        assert transport.ops() == [
            c.Publish(1, "/", "q1", "fan", "", 0, PROPS, b"body"),
            c.Publish(2, "/", "q2", "fan", "", 0, PROPS, b"body"),
        ]
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_dialer_sends_todays_leader_every_form_it_had() -> None:
    """A Hello without features (2026-11-28's main) speaks Also: one Publish, an Also."""

    async def run() -> None:
        peer, transport, records = _dialled_through_handshake(None)
        assert peer.agreed == c.UNANNOUNCED
        assert records == [
            "inter-node link to node 'b' is up (features: "
            + ", ".join(sorted(c.UNANNOUNCED))
            + "; not: deliver-kept)"
        ]
        vhost = peer.links.server.broker.vhosts["/"]
        message = wire_message("fan", "", PROPS, b"body")
        for name in ("q1", "q2"):
            queue = vhost.remote_queues[name]
            assert isinstance(queue, RemoteQueue)
            peer.publish(queue, message, False)
        peer._flush()
        assert transport.ops() == [
            c.Publish(0, "/", "q1", "fan", "", 0, PROPS, b"body"),
            c.Also(0, "/", "q2"),
        ]
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_dialer_consumes_without_arguments_at_a_leader_that_reads_none() -> None:
    """A plain consumer's Consume goes without its table; one with a stream offset is
    refused here (406, as the leader refuses a bad one) and nothing is sent."""

    async def run() -> None:
        peer, transport, _ = _dialled_through_handshake(frozenset({c.TAKEN}))
        vhost = peer.links.server.broker.vhosts["/"]
        sink = RecordingSink()
        session = Session(vhost, object(), sink)
        session.set_qos(0, 10, False)
        session.consume("q1", "plain", no_ack=False, exclusive=False, arguments={})
        await asyncio.sleep(0)
        [cid] = peer.consumers
        expected = c.plain_consume_frame(c.Consume(cid, "/", "q1", False, False, 10, 0, {}))
        assert bytes(transport.written) == expected
        transport.written.clear()
        stream = remote_queue(peer.links.server, peer, "s", arguments={"x-queue-type": "stream"})
        session.consume(
            "s", "offset", no_ack=False, exclusive=False, arguments={"x-stream-offset": "first"}
        )
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert bytes(transport.written) == b""
        assert stream.consumers == []
        assert [e.consumer_tag for e in sink.take("consumer_cancelled")] == ["offset"]
        assert list(peer.consumers) == [cid]

    asyncio.run(run())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, c.FEATURES),
        ("", frozenset()),
        ("taken, also", {c.TAKEN, c.ALSO}),
        ("taken nonsense", {c.TAKEN}),
    ],
)
def test_the_features_a_node_announces_come_from_its_environment(
    value: str | None, expected: frozenset[str]
) -> None:
    environ = {} if value is None else {FEATURES_VARIABLE: value}
    assert announced(environ) == expected
