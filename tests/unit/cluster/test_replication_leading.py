"""The leader's side of a replicated queue without sockets (``cluster/replication.py``'s
``Leading``): a confirm waits for every in-sync follower's acknowledgement, a follower out
of the in-sync set does not hold it back, nothing is confirmed below a majority or without
the lease, and a follower's copy rebuilt from what was shipped is the leader's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from leveret.cluster.apply import QueueRecord
from leveret.cluster.replication import Leading, apply_record
from leveret.model.replication import ReplicaState
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.leading_stand_ins import Links as _Links
from tests.unit.cluster.leading_stand_ins import Membership as _Membership
from tests.unit.cluster.leading_stand_ins import Peer as _Peer
from tests.unit.cluster.leading_stand_ins import Queue as _Queue
from tests.unit.cluster.leading_stand_ins import Replication as _Replication


def _leading() -> tuple[Leading, dict[str, _Peer], _Membership]:
    peers = {"b": _Peer(), "c": _Peer()}
    membership = _Membership()
    record = QueueRecord(
        "/", "q", True, False, False, {"x-queue-type": "quorum"}, "a",
        members=("a", "b", "c"), epoch=3, in_sync=("a", "b", "c"),
    )  # fmt: skip
    replication: Any = _Replication("a", _Links(peers), membership)
    leading = Leading(replication, record, queue=_Queue())  # type: ignore[arg-type]
    for node in ("b", "c"):
        leading.sync(node)
    return leading, peers, membership


def _ack(leading: Leading, node: str, offset: int) -> None:
    leading.acked[node] = offset
    leading.advance()


def test_a_confirm_waits_for_every_in_sync_follower() -> None:
    leading, peers, _ = _leading()
    leading.ship(b"\x02" + bytes(8))  # a record at offset 1
    done = leading.gate()
    assert done is not None
    assert not done.done
    _ack(leading, "b", 1)
    assert not done.done  # c is in sync and has not got it
    _ack(leading, "c", 1)
    assert done.result() is True
    assert [type(op) for op in peers["b"].sent] == [c.Append, c.Append]
    assert peers["b"].sent[-1] == c.Append("/", "q", 3, 1, b"\x02" + bytes(8))


def test_a_follower_out_of_sync_holds_nothing_back_while_a_majority_is() -> None:
    leading, _, _ = _leading()
    leading.record = replace(leading.record, in_sync=("a", "b"))
    leading.ship(b"\x02" + bytes(8))
    done = leading.gate()
    assert done is not None
    _ack(leading, "b", 1)
    assert done.result() is True
    # Below a majority (the leader alone): nothing more is confirmed.
    leading.record = replace(leading.record, in_sync=("a",))
    leading.ship(b"\x02" + bytes(8))
    waiting = leading.gate()
    assert waiting is not None
    _ack(leading, "b", 2)
    _ack(leading, "c", 2)
    assert not waiting.done


def test_without_the_lease_confirms_fail() -> None:
    leading, _, membership = _leading()
    leading.ship(b"\x02" + bytes(8))
    done = leading.gate()
    assert done is not None
    membership.held = False
    _ack(leading, "b", 1)
    _ack(leading, "c", 1)
    assert not done.done
    leading.fail()
    assert done.result() is False
    refused = leading.gate()
    assert refused is not None
    assert refused.result() is False


def test_a_followers_copy_from_what_was_shipped_is_the_mirror() -> None:
    leading, peers, _ = _leading()
    from leveret.cluster.replication import ENQUEUE, REMOVED, encode_record

    for sid in (1, 2, 3):
        message = ("", "q", 0, b"", f"m{sid}".encode())
        leading.ship(encode_record(ENQUEUE, sid, 0, message))
        leading.mirror.enqueued(sid, message, 0, False)
    leading.ship(encode_record(REMOVED, 2))
    leading.mirror.removed(2)
    copy = ReplicaState()
    for op in peers["c"].sent:
        assert isinstance(op, c.Append)
        apply_record(copy, op.record)
    assert copy.messages == leading.mirror.messages
    assert [op.offset for op in peers["c"].sent if isinstance(op, c.Append)] == [0, 1, 2, 3, 4]


def test_a_follower_sent_the_state_is_not_in_sync_on_an_older_answer() -> None:
    leading, _, _ = _leading()
    _ack(leading, "b", 0)
    leading.ship(b"\x02" + bytes(8))
    leading.sync("b")  # its link came back: the state again, at offset 1
    assert "b" not in leading.acked  # until it answers for that state


def test_a_message_out_when_the_queue_became_replicated_reaches_the_copies_on_requeue() -> None:
    """A queue of one node made replicated (add_member) mirrors its ready messages only: one
    out to a consumer then is unknown to the copies until it comes back; its requeue ships
    it whole rather than as a requeue of nothing."""
    from leveret.cluster.replication import ENQUEUE, ReplicatingStore, encode_record
    from leveret.convert.formats import stored_message
    from leveret.model.entry import QueuedMessage
    from leveret.model.queues.quorum import QuorumQueue

    leading, peers, _ = _leading()
    known = ("", "q", 0, b"", b"ready")
    leading.ship(encode_record(ENQUEUE, 1, 0, known))
    leading.mirror.enqueued(1, known, 0, False)
    store = ReplicatingStore(leading)
    out = QueuedMessage(7, stored_message("", "q", b"", b"was out", 0))
    out.sid, out.deliveries = 2, 1
    # A real queue: the compiled build's journal store takes nothing else.
    queue = QuorumQueue("/", "q")
    store.requeued(queue, out)
    # Known now: a plain requeue.
    store.requeued(queue, out)
    copy = ReplicaState()
    for op in peers["b"].sent:
        assert isinstance(op, c.Append)
        apply_record(copy, op.record)
    assert copy.messages == leading.mirror.messages
    assert copy.messages[2][1:] == [1, False]
    assert len(peers["b"].sent) == 4  # the state, the ready one, the whole one, a requeue


def test_a_state_nobody_acknowledged_is_sent_again_less_and_less_often() -> None:
    """The state reached a node that did not know yet it is a member (add_member applied
    there after the leader's node) and was dropped: the leader sends it again after
    ``LAG_BOUND``, then twice as long each time, until the follower answers."""
    from leveret.cluster.replication import HEARTBEAT_RECORD, LAG_BOUND, Replication

    leading, peers, _ = _leading()
    leading.record = replace(leading.record, in_sync=("a", "c"))
    _ack(leading, "c", 0)
    spawned: list[Any] = []
    checker: Any = type(
        "Checker",
        (),
        {
            "_spawn": lambda self, change: spawned.append(change),
            "_in_sync": lambda self, leading, node, add: (node, add),
        },
    )()

    def check(now: float) -> int:
        before = len(peers["b"].sent)
        Replication._check_followers(checker, leading, now)
        # The states sent (not the heartbeats, an Append of nothing).
        return sum(
            1
            for op in peers["b"].sent[before:]
            if isinstance(op, c.Append) and op.record != HEARTBEAT_RECORD
        )

    assert check(100.0) == 0  # behind since now
    assert check(100.0 + LAG_BOUND / 2) == 0
    assert check(100.0 + LAG_BOUND * 1.1) == 1  # the state again
    assert check(100.0 + LAG_BOUND * 2.5) == 0  # next after twice the bound
    assert check(100.0 + LAG_BOUND * 3.2) == 1
    checker.leading = {("/", "q"): leading}
    Replication.appended(checker, "b", c.Appended("/", "q", 3, leading.offset))
    assert leading.resent == {}
    assert check(200.0) == 0
    assert spawned == [("b", True)]  # b answered for the state: back into the in-sync set


def test_an_idle_follower_that_stopped_answering_leaves_the_in_sync_set() -> None:
    """Nothing shipped, both followers hold the leader's offset: the one that answers the
    heartbeats stays in sync, the one silent for longer than ``LAG_BOUND`` is taken out."""
    from leveret.cluster.replication import LAG_BOUND, Replication

    leading, _peers, _ = _leading()
    for node in ("b", "c"):
        _ack(leading, node, 0)
    start = leading.led_since
    leading.heard = {"b": start, "c": start}
    spawned: list[Any] = []
    checker: Any = type(
        "Checker",
        (),
        {
            "_spawn": lambda self, change: spawned.append(change),
            "_in_sync": lambda self, leading, node, add: (node, add),
            "_reachable": staticmethod(Replication._reachable),
        },
    )()
    Replication._check_followers(checker, leading, start + 1.0)
    assert spawned == []
    later = start + 1.0 + LAG_BOUND + 0.5  # past the bound since b last kept up
    leading.heard["c"] = later  # c answered a heartbeat; b did not
    Replication._check_followers(checker, leading, later)
    assert spawned == [("b", False)]
