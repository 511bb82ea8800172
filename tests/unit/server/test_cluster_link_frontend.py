"""The inter-node link's front end (server/cluster_link/), sans-IO: the handshake refuses a
peer that cannot prove the cluster's secret or belongs to another cluster; a proven peer
publishes with confirms, consumes within its credit, settles and gets; its link's loss
requeues what it left unsettled."""

from __future__ import annotations

from leveret.convert.formats import stored_message
from leveret.model.broker import Broker
from leveret.model.queues.features import FeatureMixin
from leveret.model.queues.stream import StreamQueue
from leveret.protocol.cluster import codec as c
from leveret.server.cluster_link.frontend import (
    LOOK,
    ROUTES_KEPT,
    STUCK,
    LinkFrontEnd,
    LinkIdentity,
)
from leveret.testing.client import feed, new_shell, run_turns

SECRET = "cluster-secret"
PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags


def link(broker: Broker | None = None) -> tuple[LinkFrontEnd, LinkIdentity]:
    identity = LinkIdentity("b", SECRET, 7)
    shell = new_shell(lambda s: LinkFrontEnd(s, identity), broker)
    front = shell.front
    assert isinstance(front, LinkFrontEnd)
    return front, identity


def send(front: LinkFrontEnd, *ops: c.Op, now: float = 1.0) -> list[c.Op]:
    writer = c.Writer()
    for op in ops:
        writer.add(op)
    feed(front.shell, writer.take(), now)
    return c.Reader().feed(b"".join(front.shell.take_output(now)))


def handshake(
    front: LinkFrontEnd, secret: str = SECRET, features: frozenset[str] | None = None
) -> list[c.Op]:
    """The dialer ``a``'s side, its Hello announcing ``features`` (None: none, as a node of
    2026-11-28's main)."""
    mine = c.Hello("a", 1, b"n" * 16, c.cluster_tag(SECRET), features)
    out = send(front, mine)
    hello, proof = out
    assert isinstance(hello, c.Hello)
    assert isinstance(proof, c.Proof)
    assert proof.mac == c.proof(SECRET, "listener", "b", c.challenge(mine))
    return send(front, c.Proof(c.proof(secret, "dialer", "a", c.challenge(hello))))


def test_a_peer_without_the_secret_is_refused() -> None:
    front, identity = link()
    handshake(front, secret="wrong")
    assert front.should_close_transport
    assert "could not prove" in front.close_reason
    assert "a" not in identity.links


def test_a_peer_of_another_cluster_is_refused() -> None:
    front, _ = link()
    assert send(front, c.Hello("a", 1, b"x" * 16, c.cluster_tag("other"))) == []
    assert front.should_close_transport
    assert "another cluster" in front.close_reason


def test_operations_before_the_handshake_are_refused() -> None:
    front, _ = link()
    send(front, c.Get(1, "/", "q", True))
    assert front.should_close_transport


def test_publish_confirm_consume_settle_get_and_loss() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None)
    front, identity = link(broker)
    # The leader keeps the publishes' account (the dialer's window starts with it).
    assert handshake(front) == [c.Taken(0)]
    assert identity.links["a"] is front
    publishes = [
        *(c.Publish(i, "/", "q", "", "q", 0, PROPS, b"m%d" % i) for i in (1, 2, 3)),
        c.Publish(4, "/", "missing", "", "missing", 0, PROPS, b"x"),
    ]
    out = send(front, *publishes)
    # Every publish handled counts, the refused one too: once a turn.
    weight = sum(c.publish_weight(p.raw, p.body) for p in publishes)
    assert out == [c.Confirm(3, True, True), c.Confirm(4, False, False), c.Taken(weight)]
    assert queue.message_count == 3
    assert queue.n_publish == 3  # the management's publish counter: once each, as locally
    # A consumer with credit 2 gets two, and a third once the credit grows.
    out = send(front, c.Consume(1, "/", "q", False, False, 2, 0))
    assert out[0] == c.ConsumeOk(1)
    delivered = [op for op in out if isinstance(op, c.Deliver)]
    assert [d.body for d in delivered] == [b"m1", b"m2"]
    out = send(front, c.Settle(c.ACCEPT, (delivered[0].did,)), c.Credit(1, 2, 2))
    [third] = out
    assert isinstance(third, c.Deliver)
    assert third.body == b"m3"
    assert queue.unacked_count == 2
    # A get while everything is out, then the link goes: what it held comes back.
    assert send(front, c.Cancel(1), c.Get(9, "/", "q", False)) == [c.Empty(9, 0)]
    front.shell.connection_lost()
    assert queue.message_count == 2
    assert "a" not in identity.links
    out = send(link(broker)[0], c.Get(1, "/", "q", True))
    assert out == []  # a new link must shake hands first


def test_each_delivery_carries_its_own_exchange_and_routing_key() -> None:
    # The leader keeps a Deliver's encoded exchange and routing key by routing key
    # (``LinkFrontEnd.routes``): a message of a kept key from another exchange, and more
    # keys than it keeps, still go with their own.
    broker = Broker()
    broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    routes = [("x", "k0"), ("", "k0"), ("x", "k0"), ("", "q")]
    routes += [("e", f"k{i}") for i in range(ROUTES_KEPT + 2)]
    routes += [("", "k0"), ("x", "k1"), ("e", "k1")]
    send(front, *(c.Publish(0, "/", "q", e, k, 0, PROPS, b"m") for e, k in routes))
    out = send(front, c.Consume(1, "/", "q", True, False, len(routes), 0))
    delivered = [(op.exchange, op.routing_key) for op in out if isinstance(op, c.Deliver)]
    assert delivered == routes
    assert len(front.routes) <= ROUTES_KEPT


def test_a_drain_delivers_what_the_queue_holds_then_answers_with_no_credit_left() -> None:
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    send(front, *(c.Publish(0, "/", "q", "", "q", 0, PROPS, b"m%d" % i) for i in range(5)))
    out = send(front, c.Consume(1, "/", "q", False, False, 1, 0))
    assert [op.body for op in out if isinstance(op, c.Deliver)] == [b"m0"]
    # Credit 3 beyond the one received: three more, the drain's answer after them.
    out = send(front, c.Drain(1, 3, 1))
    assert [type(op) for op in out] == [c.Deliver, c.Deliver, c.Deliver, c.Drained]
    assert [op.body for op in out if isinstance(op, c.Deliver)] == [b"m1", b"m2", b"m3"]
    assert out[-1] == c.Drained(1)
    # The rest of its credit was given up: a message published now waits.
    out = send(front, c.Publish(0, "/", "q", "", "q", 0, PROPS, b"late"))
    assert not any(isinstance(op, c.Deliver) for op in out)
    assert queue.message_count == 2
    # More credit than the queue holds: what it holds, then the answer.
    out = send(front, c.Drain(1, 10, 4))
    assert [op.body for op in out if isinstance(op, c.Deliver)] == [b"m4", b"late"]
    assert out[-1] == c.Drained(1)
    assert queue.message_count == 0
    # A drain of a consumer gone meanwhile is answered (the peer ignores it).
    assert send(front, c.Cancel(1), c.Drain(1, 5, 6)) == [c.Drained(1)]


def test_the_peer_is_told_when_a_queue_falls_behind_and_catches_up() -> None:
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    send(front, c.Consume(1, "/", "q", True, False, 0, 0))  # a consumer with no credit yet
    pace = 1024  # ClassicQueue.backlog_pace
    out = send(front, *(c.Publish(0, "/", "q", "", "q", 0, PROPS, b"x") for _ in range(pace + 1)))
    assert [op for op in out if not isinstance(op, c.Taken)] == [c.Backlog("/", "q", True)]
    # One account a turn (500 operations), up to every publish.
    taken = [op.upto for op in out if isinstance(op, c.Taken)]
    assert taken == sorted(taken)
    assert len(taken) == 3
    assert taken[-1] == (pace + 1) * c.publish_weight(PROPS, b"x")
    out = send(front, c.Credit(1, pace + 1, 0))  # the consumer takes everything
    assert sum(isinstance(op, c.Deliver) for op in out) == pace + 1
    assert queue.message_count == 0
    out = send(front, c.Publish(0, "/", "q", "", "q", 0, PROPS, b"y"))
    assert c.Backlog("/", "q", False) in out


def _taken(out: list[c.Op]) -> int | None:
    taken = [op.upto for op in out if isinstance(op, c.Taken)]
    return taken[-1] if taken else None


def test_publishes_into_a_queue_falling_behind_are_accounted_for_as_it_drains() -> None:
    # The peer's publishers send more only as the account (Taken) grows: paced by what
    # leaves the queue, they go at its consumers' pace, as a paced publisher on one node,
    # rather than at this node's enqueue rate while the backlog grows past paging.
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    shell = front.shell
    send(front, c.Consume(1, "/", "q", True, False, 0, 0))  # a consumer with no credit yet
    pace = 1024  # ClassicQueue.backlog_pace
    weight = c.publish_weight(PROPS, b"x")
    publish = c.Publish(0, "/", "q", "", "q", 0, PROPS, b"x")
    out = send(front, *(publish for _ in range(pace + 1)))
    assert c.Backlog("/", "q", True) in out
    assert _taken(out) == (pace + 1) * weight  # the one that made it fall behind counts
    # Into a queue the peer knows falls behind: handled, not accounted for.
    out = send(front, *(publish for _ in range(10)), now=1.05)
    assert queue.message_count == pace + 11
    assert _taken(out) is None
    assert shell.next_deadline(1.05) == 1.05 + LOOK  # looked at without input, too
    # Three leave the queue: three publishes are accounted for, once a turn.
    out = send(front, c.Credit(1, 3, 0), now=1.1)
    assert sum(isinstance(op, c.Deliver) for op in out) == 3
    assert _taken(out) == (pace + 4) * weight
    # A consumer on this node takes two: its turn is not this link's, the next look is.
    local = queue.consumer("local", front.owner, auto_settle=True, credit=2)
    front.ids[local] = 99
    front.sent[99] = 0
    queue.add_consumer(local)
    shell.tick(1.1 + LOOK)
    out = c.Reader().feed(b"".join(shell.take_output(1.1 + LOOK)))
    assert _taken(out) == (pace + 6) * weight
    queue.remove_consumer(local)
    # Nothing leaves for STUCK seconds: the consumers stopped taking, the rest counts, and
    # what follows counts at once until one takes again (one node does not stop a
    # publisher for a stalled consumer either).
    later = 1.1 + LOOK + STUCK + 0.01
    shell.tick(later)
    assert _taken(c.Reader().feed(b"".join(shell.take_output(later)))) == (pace + 11) * weight
    assert shell.next_deadline(later) is None
    out = send(front, publish, now=later + 0.01)
    assert _taken(out) == (pace + 12) * weight
    out = send(front, c.Credit(1, 1, 3), now=later + 0.02)  # one taken
    assert [type(op) for op in out] == [c.Deliver]
    out = send(front, publish, now=later + 0.03)
    assert _taken(out) is None  # paced again
    # Once the queue keeps up, everything still waiting is accounted for.
    out = send(front, c.Credit(1, 2000, 4), now=later + 0.04)
    assert queue.message_count == 0
    assert _taken(out) == (pace + 13) * weight
    out = send(front, publish, now=later + 0.05)
    assert c.Backlog("/", "q", False) in out
    assert _taken(out) == (pace + 14) * weight


def test_the_consumers_operations_go_ahead_of_publishes_waiting_for_a_turn() -> None:
    # A window of publishes read at once takes more than a turn: the credit read with them
    # is handled in the first turn, not after them.
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    queue.enqueue(stored_message("", "q", PROPS, b"first", 0))
    front, _ = link(broker)
    handshake(front)
    send(front, c.Consume(1, "/", "q", True, False, 0, 0))  # no credit yet
    writer = c.Writer()
    for _ in range(front.turn_budget + 100):
        writer.add(c.Publish(0, "/", "q", "", "q", 0, PROPS, b"later"))
    writer.add(c.Credit(1, 1, 0))
    front.shell.data_received(writer.take(), 1.0)  # one turn
    out = c.Reader().feed(b"".join(front.shell.take_output(1.0)))
    delivered = [op.body for op in out if isinstance(op, c.Deliver)]
    assert delivered == [b"first"]
    assert front.pending  # publishes left for the next turns
    # Gets stay in order with the publishes: this one sees every publish before it.
    out = send(front, c.Get(7, "/", "q", True))
    [got] = [op for op in out if isinstance(op, c.Got)]
    assert got.remaining == front.turn_budget + 100 - 1


def test_a_consumer_with_a_bad_stream_offset_is_refused_and_the_link_goes_on() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    vhost.declare_queue("s", owner=None, durable=True, arguments={"x-queue-type": "stream"})
    vhost.declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    out = send(front, c.Consume(1, "/", "s", False, False, 10, 0, {"x-stream-offset": "5X"}))
    [refused] = out
    assert isinstance(refused, c.Cancelled)
    assert (refused.cid, refused.code) == (1, 406)
    assert '{invalid_stream_offset_arg,{longstr,<<"5X">>}}' in refused.text
    assert not front.should_close_transport
    assert send(front, c.Get(2, "/", "q", True)) == [c.Empty(2, 0)]


def test_consumer_offsets_are_stored_and_queried_in_the_leaders_log() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    stream = vhost.declare_queue(
        "s", owner=None, durable=True, arguments={"x-queue-type": "stream"}
    )
    vhost.declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    out = send(
        front,
        c.StoreOffset("/", "s", "app", 41),
        c.StoreOffset("/", "s", "app", 42),
        c.StoreOffset("/", "q", "app", 1),  # not a stream: nothing to keep
        c.StoreOffset("/", "gone", "app", 1),
        c.QueryOffset(1, "/", "s", "app"),
        c.QueryOffset(2, "/", "s", "never"),
    )
    assert out == [c.StoredOffset(1, True, 42), c.StoredOffset(2, False, 0)]
    assert isinstance(stream, StreamQueue)
    assert dict(stream.log.offsets) == {"app": 42}
    [refused] = send(front, c.QueryOffset(3, "/", "q", "app"))
    assert isinstance(refused, c.Failed)
    assert (refused.rid, refused.code) == (3, 404)
    assert not front.should_close_transport


def test_a_queues_counters_are_a_look_not_a_use() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None, arguments={"x-expires": 1000})
    assert isinstance(queue, FeatureMixin)
    front, _ = link(broker)
    handshake(front)
    send(front, c.Publish(0, "/", "q", "", "q", 0, PROPS, b"one"))
    used = queue.last_used
    assert send(front, c.Stat(1, "/", "q")) == [c.Stats(1, 1, 0, 0)]
    assert queue.last_used == used
    [refused] = send(front, c.Stat(2, "/", "gone"))
    assert isinstance(refused, c.Failed)
    assert (refused.rid, refused.code) == (2, 404)
    queue.timers.now += 5.0
    send(front, c.Inspect(3, "/", "q", False))  # a passive declaration's: a use
    assert queue.last_used == queue.timers.now != used


def test_a_tls_client_hello_at_a_plain_link_port_is_refused_at_once() -> None:
    # A node with cluster TLS dialling one without: its ClientHello's record header
    # (handshake, TLS 1.0 record version) read as a frame's length would be a 369 MB frame
    # to wait for; refused at once, saying why.
    front, _ = link()
    feed(front.shell, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32), 1.0)
    assert front.should_close_transport
    assert "speaks TLS" in front.close_reason


def test_the_memory_alarm_holds_the_peers_publishes_and_not_its_consumers() -> None:
    # The link is one connection for every client of the peer: blocked as a publisher,
    # it would hold the acks and credit of the peer's consumers too, and a leader whose
    # consumers are all on the peer could never drain below its watermark.
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    for i in range(3):
        queue.enqueue(stored_message("", "q", PROPS, b"old%d" % i, 0))
    front, _ = link(broker)
    handshake(front)
    shell = front.shell
    shell.block("low on memory")
    assert shell.reading  # the socket is still read, unlike a blocked client's
    publish = c.Publish(0, "/", "q", "", "q", 0, PROPS, b"new")
    out = send(front, publish, c.Consume(1, "/", "q", False, False, 2, 0), c.Get(5, "/", "q", True))
    # The publish waits and is not accounted for (the peer's window holds its
    # publishers); the consumer and the get go on without it.
    assert not any(isinstance(op, c.Taken) for op in out)
    delivered = [op for op in out if isinstance(op, c.Deliver)]
    assert [d.body for d in delivered] == [b"old0", b"old1"]
    [got] = [op for op in out if isinstance(op, c.Got)]
    assert got.body == b"old2"
    assert queue.message_count == 0
    assert not front.pending  # a held publish asks for no turn
    out = send(front, c.Settle(c.ACCEPT, tuple(d.did for d in delivered)), c.Credit(1, 2, 2))
    assert queue.unacked_count == 0
    # Unblocked, the held publish is handled, and accounted for, and delivered.
    shell.unblock(2.0)
    assert shell.wants_turn
    run_turns(shell, 2.0)
    out = c.Reader().feed(b"".join(shell.take_output(2.0)))
    assert c.Taken(c.publish_weight(PROPS, b"new")) in out
    assert [op.body for op in out if isinstance(op, c.Deliver)] == [b"new"]


def test_publishes_read_before_the_alarm_wait_and_what_follows_them_does_not() -> None:
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    queue.enqueue(stored_message("", "q", PROPS, b"old", 0))
    front, _ = link(broker)
    handshake(front)
    writer = c.Writer()
    writer.add(c.Publish(0, "/", "q", "", "q", 0, PROPS, b"new"))
    writer.add(c.Get(5, "/", "q", True))
    front.receive(writer.take(), 1.0)  # decoded, waiting for its turn
    assert len(front.ops) == 2
    front.shell.block("low on memory")
    run_turns(front.shell, 1.0)
    out = c.Reader().feed(b"".join(front.shell.take_output(1.0)))
    [got] = [op for op in out if isinstance(op, c.Got)]
    assert got.body == b"old"
    assert list(front.ops) == [c.Publish(0, "/", "q", "", "q", 0, PROPS, b"new")]


def test_deliveries_pause_past_the_output_high_water_until_it_is_taken() -> None:
    # Output counted as a client connection's is: a peer with plenty of credit is not
    # sent a deep queue of large messages encoded into memory in one turn.
    broker = Broker()
    broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    body = bytes(front.output_high_water // 2 + 1)
    send(front, *(c.Publish(0, "/", "q", "", "q", 0, PROPS, body) for _ in range(3)))
    out = send(front, c.Consume(1, "/", "q", True, False, 10, 0))
    assert out[0] == c.ConsumeOk(1)
    assert sum(isinstance(op, c.Deliver) for op in out) == 2  # the second crossed it
    rest = c.Reader().feed(b"".join(front.shell.take_output(2.0)))
    assert [type(op) for op in rest] == [c.Deliver]


def test_a_stat_read_after_a_cancel_is_answered_once_the_consumer_is_gone() -> None:
    # The peer's barrier for a client's cancel (``Peer.caught_up``): a Stat written after
    # the Cancel is answered only once the consumer has left the queue, even with a
    # backlog of publishes read with them (the Cancel goes ahead of those, the Stat after).
    broker = Broker()
    queue = broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    assert send(front, c.Consume(1, "/", "q", True, True, 0, 0)) == [c.ConsumeOk(1)]
    writer = c.Writer()
    for _ in range(front.turn_budget + 100):
        writer.add(c.Publish(0, "/", "q", "", "q", 0, PROPS, b"m"))
    writer.add(c.Cancel(1))
    writer.add(c.Stat(9, "/", "q"))
    front.shell.data_received(writer.take(), 1.0)  # the first turn
    answered_in = 0
    for turn in range(1, 10):
        out = c.Reader().feed(b"".join(front.shell.take_output(1.0)))
        if any(isinstance(op, c.Stats) for op in out):
            answered_in = turn
            break
        front.shell.run_turn(1.0)
    assert answered_in > 1  # behind the publishes read before it
    assert not queue.consumers
    queue.check_exclusive_use(True)  # free: an exclusive consume elsewhere is accepted


def test_a_turns_frames_go_out_as_one_write_in_the_order_written() -> None:
    # A Deliver is written as pieces (``codec.add_deliver``) and the turn's output joined
    # once (``take_output``): one buffer for the transport, whose frames are the turn's
    # control frames and deliveries in the order they were made.
    broker = Broker()
    broker.vhosts["/"].declare_queue("q", owner=None)
    front, _ = link(broker)
    handshake(front)
    send(front, *(c.Publish(0, "/", "q", "", "q", 0, PROPS, bytes([i]) * i) for i in range(3)))
    writer = c.Writer()
    writer.add(c.Consume(1, "/", "q", True, False, 10, 0))
    writer.add(c.Stat(4, "/", "q"))
    feed(front.shell, writer.take(), 1.0)
    out = front.shell.take_output(1.0)
    assert len(out) == 1
    assert c.Reader().feed(out[0]) == [
        c.ConsumeOk(1),
        *(c.Deliver(1, i + 1, False, "", "q", 0, PROPS, bytes([i]) * i) for i in range(3)),
        c.Stats(4, 0, 0, 1),
    ]
