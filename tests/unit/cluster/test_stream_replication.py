"""Replicated streams without sockets (``cluster/stream_replication.py`` and the stream
side of ``cluster/replication.py``'s ``Leading``): the records, a follower's copy built
from what the leader's log taps (the same entries at the same offsets), catching up from
the leader's files, and the commit gate (a confirm and a reader wait for every in-sync
follower's synced copy and the leader's own sync)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.cluster.apply import QueueRecord
from leveret.cluster.replication import HEARTBEAT_RECORD, Leading, Replication
from leveret.cluster.stream_replication import (
    STREAM_APPEND,
    STREAM_COMMIT,
    STREAM_RESET,
    STREAM_TRACK,
    StreamAppend,
    StreamReplica,
    StreamReset,
    StreamShipping,
    apply_append,
    decode_append,
    decode_commit,
    decode_reset,
    decode_track,
    encode_append,
    encode_commit,
    encode_reset,
    encode_track,
    keeps,
    retention,
)
from leveret.model.policies import make_policy
from leveret.model.queues.stream import StreamQueue
from leveret.model.vhost import VirtualHost
from leveret.protocol.cluster import codec as c
from tests.unit.cluster.leading_stand_ins import Links as _Links
from tests.unit.cluster.leading_stand_ins import Membership as _Membership
from tests.unit.cluster.leading_stand_ins import Peer as _Peer
from tests.unit.cluster.leading_stand_ins import Replication as _Replication
from tests.unit.store.test_stream_batch import bodies, entry
from tests.unit.store.test_stream_log import Harness, append

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from leveret.store.stream_log import FileStreamLog


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "streams")
    yield harness
    harness.close()


# -- the records ---------------------------------------------------------------------------

appends = st.builds(
    StreamAppend,
    start=st.integers(0, 2**40),
    data=st.binary(min_size=1, max_size=64),
    entries=st.just(2),
    records=st.integers(2, 5),
    timestamp=st.integers(0, 2**50),
    producer=st.text(max_size=20),
    sequence=st.integers(-1, 2**40),
    ids=st.one_of(st.none(), st.lists(st.integers(0, 2**40), min_size=2, max_size=2)),
)


@given(appends)
def test_an_append_record_round_trips(append_: StreamAppend) -> None:
    record = encode_append(append_)
    assert record[0] == STREAM_APPEND
    assert decode_append(record) == append_


@given(st.integers(0, 2**40), st.dictionaries(st.text(max_size=10), st.integers(-1, 2**40)))
def test_a_reset_record_round_trips(first: int, producers: dict[str, int]) -> None:
    reset = StreamReset(first, producers, {"ref": 7})
    record = encode_reset(reset)
    assert record[0] == STREAM_RESET
    assert decode_reset(record) == reset


@given(st.text(max_size=40), st.integers(-1, 2**62))
def test_a_consumer_offset_record_round_trips(reference: str, offset: int) -> None:
    record = encode_track(reference, offset)
    assert record[0] == STREAM_TRACK
    assert decode_track(record) == (reference, offset)
    for cut in range(len(record)):
        with pytest.raises(ValueError, match="stream offset"):
            decode_track(record[:cut])
    with pytest.raises(ValueError, match="stream offset"):
        decode_track(record + b"x")


@given(appends, st.data())
def test_a_cut_record_is_refused_not_misread(append_: StreamAppend, data: st.DataObject) -> None:
    record = encode_append(append_)
    head = len(record) - len(append_.data)  # cut inside the fields, before the entries
    cut = data.draw(st.integers(0, head - 1))
    with pytest.raises(ValueError, match="stream append"):
        decode_append(record[:cut])
    with pytest.raises(ValueError, match="stream reset"):
        decode_reset(encode_reset(StreamReset(1, {"p": 1}, {}))[: cut % 20])


# -- a follower's copy ---------------------------------------------------------------------


def _tap(stream_log: FileStreamLog, into: list[StreamAppend]) -> None:
    stream_log.tap = into.append


def _stream(h: Harness, name: str, store_id: int) -> StreamQueue:
    vhost = VirtualHost("/")
    vhost.stream_backend = h.store
    queue = vhost.declare_queue(
        name, owner=None, durable=True, arguments={"x-queue-type": "stream"}
    )
    assert isinstance(queue, StreamQueue)
    queue.store_id = store_id
    return queue


def _replica(h: Harness, tmp_path: Path) -> StreamReplica:
    return StreamReplica(tmp_path / "copies" / "s", h.store, "s")


def test_a_copy_applied_from_the_taps_holds_the_same_entries_at_the_same_offsets(
    h: Harness, tmp_path: Path
) -> None:
    leader = _stream(h, "s", 1)
    shipped: list[StreamAppend] = []
    _tap(leader.log, shipped)  # type: ignore[arg-type]
    append(leader.log, b"a")  # type: ignore[arg-type]
    leader.append_entries([entry(b"b"), entry(b"c")], None, "p", [1, 2])
    leader.append_entries([entry(b"c2"), entry(b"d")], None, "p", [2, 3])  # 2: a duplicate
    huge = [entry(b"y" * 100_000) for _ in range(12)]  # cut in two chunks by the leader
    leader.append_entries(huge, None, "", [0] * 12)
    replica = _replica(h, tmp_path)
    replica.reset(StreamReset(0, {}, {}))
    assert replica.log is not None
    for one in shipped:
        assert apply_append(replica.log, decode_append(encode_append(one))) is not None
    # A repeat or a gap is not applied.
    assert apply_append(replica.log, shipped[0]) is None
    assert (
        apply_append(replica.log, shipped[-1]._replace(start=replica.log.next_offset + 1)) is None
    )
    h.sync()
    assert replica.log.next_offset == leader.log.next_offset == 16
    assert bodies(replica.log) == bodies(leader.log)
    assert dict(replica.log.producers) == {"p": 3}
    # And from disk, as a restarted follower opens it.
    h.reopen()
    again = StreamReplica(tmp_path / "copies" / "s", h.store, "s")
    again.load()
    assert again.log is not None
    assert bodies(again.log) == bodies(leader.log)
    assert again.log.next_offset == 16


def test_a_reset_starts_a_new_copy_where_the_leader_starts(h: Harness, tmp_path: Path) -> None:
    replica = _replica(h, tmp_path)
    replica.reset(StreamReset(0, {}, {}))
    assert replica.log is not None
    apply_append(replica.log, StreamAppend(0, entry(b"old"), 1, 1, 0, "", -1, None))
    old = replica.log
    replica.reset(StreamReset(40, {"p": 9}, {"ref": 3}))
    assert old.destroyed
    assert replica.log is not old
    assert replica.log.path != old.path
    assert replica.log.first_offset == replica.log.next_offset == 40
    assert replica.log.producers == {"p": 9}
    assert replica.log.offsets == {"ref": 3}
    h.sync()
    assert not old.path.exists()
    assert [p for _, p in replica.generations()] == [replica.log.path]


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("apsg"), st.integers(1, 4)), max_size=25))
def test_a_follower_caught_up_from_files_and_tail_holds_the_leaders_prefix(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    """Any interleaving of the leader's appends (a = live shipping, the follower takes
    it; g = the follower misses it), syncs (s) and catch-ups (p): the copy is always a
    prefix of the leader's log, entry for entry, and equal once caught up."""
    tmp_path = tmp_path_factory.mktemp("pump")
    h = Harness(tmp_path / "streams")
    try:
        leader = _stream(h, "s", 1)
        shipping = StreamShipping(leader.log)
        pending: list[tuple[int, bytes]] = []

        def tapped(append: StreamAppend) -> None:
            record = shipping.tapped(append)
            if shipping.cursor.get("b") == append.start:
                pending.append((append.start, record))
                shipping.cursor["b"] = append.end

        leader.log.tap = tapped  # type: ignore[attr-defined]
        replica = _replica(h, tmp_path)
        reset = decode_reset(shipping.reset("b"))
        replica.follow(reset)
        copy = replica.log
        assert copy is not None
        assert shipping.positioned("b", reset.sync, copy.next_offset)
        n = 0
        for step, count in steps:
            if step in "ag":
                for _ in range(count):
                    leader.append_entries([entry(b"m%d" % n)], None, "", [0])
                    n += 1
                if step == "g":
                    pending.clear()  # lost on the way: the copy has a gap now
                    shipping.cursor["b"] = copy.next_offset  # where it really is
            elif step == "s":
                h.sync()
            for _start, record in pending:
                apply_append(copy, decode_append(record))
            pending.clear()
            if step == "p":
                for _end, record in shipping.pump("b", budget=60 * count):
                    assert apply_append(copy, decode_append(record)) is not None
            got = bodies(copy)
            assert got == bodies(leader.log)[: len(got)]
        h.sync()
        for _ in range(100):
            out = shipping.pump("b")
            if not out:
                break
            for _end, record in out:
                assert apply_append(copy, decode_append(record)) is not None
        assert bodies(copy) == bodies(leader.log)
        assert copy.next_offset == leader.log.next_offset == n
        assert not shipping.tail
    finally:
        h.close()


def test_catching_up_from_inside_a_chunk_takes_its_later_entries(h: Harness) -> None:
    leader = _stream(h, "s", 1)
    shipping = StreamShipping(leader.log)
    leader.append_entries([entry(b"a"), entry(b"b"), entry(b"c")], None, "", [0, 0, 0])
    h.sync()  # one chunk of three
    shipping.cursor["b"] = 2
    ((end, record),) = shipping.pump("b")
    got = decode_append(record)
    assert (got.start, got.entries, got.records, end) == (2, 1, 1, 3)


# -- the commit gate -----------------------------------------------------------------------


def _leading(queue: StreamQueue) -> tuple[Leading, dict[str, _Peer], _Membership]:
    peers = {"b": _Peer(), "c": _Peer()}
    membership = _Membership()
    record = QueueRecord(
        "/", "s", True, False, False, {"x-queue-type": "stream"}, "a",
        members=("a", "b", "c"), epoch=2, in_sync=("a", "b", "c"),
    )  # fmt: skip
    replication: Any = _Replication("a", _Links(peers), membership)
    log = queue.log
    leading = Leading(
        replication, record, queue, stream=StreamShipping(log), offset=log.next_offset
    )
    log.tap = leading.tapped  # type: ignore[attr-defined]
    log.on_committed = leading.advance
    queue.readable_upto = 0
    for node in ("b", "c"):
        leading.sync(node)
        _position(leading, node, 0)
    return leading, peers, membership


def _position(leading: Leading, node: str, offset: int) -> None:
    """``node`` answers its last reset: its copy ends at ``offset``."""
    assert leading.stream is not None
    assert leading.stream.positioned(node, leading.stream.syncs[node], offset)
    leading.pump()


def _ack(leading: Leading, node: str, offset: int) -> None:
    leading.acked[node] = offset
    leading.advance()


def test_a_stream_confirm_and_its_readers_wait_for_the_in_sync_followers_and_the_disk(
    h: Harness,
) -> None:
    queue = _stream(h, "s", 1)
    leading, peers, _ = _leading(queue)
    queue.append_entries([entry(b"a"), entry(b"b")], None, "", [0, 0])
    assert leading.offset == 2
    done = leading.gate()
    assert done is not None
    assert not done.done
    # Shipped to both (each had everything before it): the reset, then the append.
    for node in ("b", "c"):
        kinds = [op.record[0] for op in peers[node].sent if isinstance(op, c.Append)]
        assert kinds == [STREAM_RESET, STREAM_APPEND]
        assert peers[node].sent[-1].offset == 2  # type: ignore[union-attr]
    _ack(leading, "b", 2)
    _ack(leading, "c", 2)
    assert not done.done  # the leader's own log is not synced yet
    assert list(queue.browse()) == []
    h.sync()
    assert done.result() is True
    assert queue.readable_upto == 2
    assert [b.position for b in queue.browse()] == [0, 1]


def test_a_stream_follower_out_of_sync_holds_nothing_back_and_a_minority_commits_nothing(
    h: Harness,
) -> None:
    queue = _stream(h, "s", 1)
    leading, _, membership = _leading(queue)
    leading.record = replace(leading.record, in_sync=("a", "b"))
    queue.append_entries([entry(b"a")], None, "", [0])
    h.sync()
    done = leading.gate()
    assert done is not None
    _ack(leading, "b", 1)
    assert done.result() is True
    assert queue.readable_upto == 1
    leading.record = replace(leading.record, in_sync=("a",))
    queue.append_entries([entry(b"b")], None, "", [0])
    h.sync()
    waiting = leading.gate()
    assert waiting is not None
    _ack(leading, "b", 2)
    _ack(leading, "c", 2)
    assert not waiting.done
    assert queue.readable_upto == 1  # readers wait too
    membership.held = False
    leading.record = replace(leading.record, in_sync=("a", "b", "c"))
    leading.advance()
    assert not waiting.done  # nor without the lease
    leading.fail()
    assert waiting.result() is False


def test_a_follower_behind_is_sent_what_it_missed_then_follows_live(h: Harness) -> None:
    queue = _stream(h, "s", 1)
    leading, peers, _ = _leading(queue)
    peers["c"].up = False
    queue.append_entries([entry(b"a"), entry(b"b")], None, "", [0, 0])
    assert "c" not in leading.following
    h.sync()
    peers["c"].up = True
    peers["c"].sent.clear()
    leading.sync("c")  # its link came back: a reset; it has nothing
    assert [op.record[0] for op in peers["c"].sent] == [STREAM_RESET]  # type: ignore[union-attr]
    _position(leading, "c", 0)  # then everything from the files
    queue.append_entries([entry(b"c")], None, "", [0])
    sent = [op for op in peers["c"].sent if isinstance(op, c.Append)]
    assert [op.record[0] for op in sent] == [STREAM_RESET, STREAM_APPEND, STREAM_APPEND]
    assert [op.offset for op in sent] == [0, 2, 3]
    assert decode_append(sent[1].record).start == 0
    assert decode_append(sent[2].record).start == 2


def test_shipping_survives_random_interleavings_of_appends_and_syncs(h: Harness) -> None:
    """Live shipping and pumps never send an append twice or out of order to a follower
    that takes all it is sent."""
    queue = _stream(h, "s", 1)
    leading, peers, _ = _leading(queue)
    rng = random.Random(7)
    for i in range(60):
        k = rng.randint(1, 3)
        queue.append_entries([entry(b"m%d" % i)] * k, None, "", [0] * k)
        if rng.random() < 0.3:
            h.sync()
        if rng.random() < 0.2:
            leading.pump()
    starts = [
        decode_append(op.record).start
        for op in peers["b"].sent
        if isinstance(op, c.Append) and op.record[0] == STREAM_APPEND
    ]
    assert starts == sorted(set(starts))


def test_a_followers_retention_comes_from_the_streams_arguments_and_policies() -> None:
    vhost = VirtualHost("/")

    def kept(name: str, arguments: dict[str, object], wall: float) -> tuple[int | None, ...]:
        return retention(vhost.configured(name, arguments, True, False, False), wall)

    stream: dict[str, object] = {"x-queue-type": "stream"}
    assert kept("s", stream, 1000.0) == (None, None)
    assert kept("s", {**stream, "x-max-length-bytes": 5000, "x-max-age": "10s"}, 1000.0) == (
        5000,
        990_000,
    )
    assert kept("s", {**stream, "x-max-age": b"1m"}, 100.0) == (None, 40_000)
    # A policy on this node applies to the copy as it does to the leader's stream.
    vhost.policies["keep"] = make_policy(
        "/", "keep", "^s", {"max-age": "2s", "max-length-bytes": 700}, apply_to="streams"
    )
    assert kept("s", stream, 1000.0) == (700, 998_000)
    assert kept("other", stream, 1000.0) == (None, None)


# -- a follower node's side (``Replication.append``) ----------------------------------------


@dataclass(eq=False)
class _Front:
    sent: list[c.Op] = field(default_factory=list)

    def send(self, op: c.Op) -> None:
        self.sent.append(op)


def _follower(h: Harness, tmp_path: Path) -> Replication:
    record = QueueRecord(
        "/", "s", True, False, False, {"x-queue-type": "stream"}, "a",
        members=("a", "b", "c"), epoch=2, in_sync=("a", "b", "c"),
    )  # fmt: skip
    applier: Any = SimpleNamespace(view=SimpleNamespace(queues={("/", "s"): record}, nodes={}))
    server = SimpleNamespace(streams=h.store, broker=SimpleNamespace(vhosts={}))
    links: Any = SimpleNamespace(server=server)
    membership: Any = SimpleNamespace(on_lost=[], on_extended=[], held=True)
    replication = Replication("b", applier, None, membership, links, tmp_path / "replicas")  # type: ignore[arg-type]
    replication.on_record(("/", "s"), record)
    return replication


def test_a_follower_acknowledges_an_append_once_its_copy_is_synced(
    h: Harness, tmp_path: Path
) -> None:
    replication = _follower(h, tmp_path)
    front = _Front()
    beat = c.Append("/", "s", 2, 2, HEARTBEAT_RECORD)

    def one(epoch: int, offset: int, record: bytes) -> None:
        replication.append(front, c.Append("/", "s", epoch, offset, record))  # type: ignore[arg-type]

    async def run() -> None:
        one(2, 0, encode_reset(StreamReset(0, {}, {})))
        data = entry(b"a") + entry(b"b")
        one(2, 2, encode_append(StreamAppend(0, data, 2, 2, 5, "p", 2, [1, 2])))
        await asyncio.sleep(0)  # the turn ends: the acknowledgement waits for the sync
        assert front.sent == []
        replication.append(front, beat)  # type: ignore[arg-type]
        assert front.sent == []  # not synced yet: a heartbeat is not answered
        for _ in range(2000):
            if front.sent:
                break
            await asyncio.sleep(0.001)
        # The reset's answer (where the copy ends), then the append's.
        assert front.sent == [c.Positioned("/", "s", 2, 0, 2), c.Appended("/", "s", 2, 2)]
        replication.append(front, beat)  # type: ignore[arg-type]
        assert front.sent[-1] == c.Appended("/", "s", 2, 2)
        # A gap, and a deposed leader's (older epoch) append, are not applied.
        gap = encode_append(StreamAppend(3, entry(b"x"), 1, 1, 5, "", -1, None))
        one(2, 4, gap)
        one(1, 3, encode_append(StreamAppend(2, entry(b"x"), 1, 1, 5, "", -1, None)))
        await asyncio.sleep(0.05)
        replica = replication.replicas[("/", "s")]
        assert isinstance(replica, StreamReplica)
        assert replica.log is not None
        assert replica.log.next_offset == 2
        assert replica.log.producers == {"p": 2}
        assert bodies(replica.log) == [b"a", b"b"]

    h.loop.run_until_complete(run())


# -- keeping a copy across a reset (KIP-101's rule) ----------------------------------------


def _reset(epochs: list[tuple[int, int]], first: int, next_: int) -> StreamReset:
    return StreamReset(first, {}, {}, epochs, next_, 1)


def test_a_copy_is_kept_only_when_its_epochs_are_a_prefix_of_the_leaders() -> None:
    leader = _reset([(1, 0), (2, 8)], 0, 20)
    assert keeps([(1, 0)], 0, 8, leader)  # all of epoch 1: follows on
    assert keeps([(1, 0), (2, 8)], 0, 15, leader)
    assert keeps([(1, 0)], 0, 5, leader)
    assert not keeps([(1, 0)], 0, 10, leader)  # epoch 1 past where the leader's ended
    assert not keeps([(1, 0), (3, 8)], 0, 9, leader)  # another leader's epoch
    assert not keeps([(1, 0), (2, 8)], 0, 21, leader)  # longer than the leader's log
    assert not keeps([], 0, 3, leader)  # entries without epochs
    assert keeps([], 7, 7, leader)  # empty: follows on from where it is
    assert not keeps([(1, 0)], 0, 3, _reset([(1, 0)], 5, 20))  # the leader dropped 3, 4
    # Epochs the copy was told of but holds no entry of do not count.
    assert keeps([(1, 0), (2, 8), (3, 30)], 0, 8, _reset([(1, 0), (4, 8)], 0, 9))


def electable(replica: StreamReplica) -> bool:
    return replica.electable  # (a call: each assert reads it again)


def test_a_follower_keeps_a_prefix_copy_and_starts_a_diverged_one_again(
    h: Harness, tmp_path: Path
) -> None:
    replica = _replica(h, tmp_path)
    replica.follow(_reset([(1, 0)], 0, 0))
    assert replica.log is not None
    kept = replica.log
    apply_append(kept, StreamAppend(0, entry(b"a") + entry(b"b"), 2, 2, 0, "", -1, None))
    # A new leader (epoch 2 from offset 2) whose log has both: the copy follows on.
    replica.follow(_reset([(1, 0), (2, 2)], 0, 5))
    assert replica.log is kept
    assert electable(replica)
    assert replica.epochs == [(1, 0), (2, 2)]
    # A leader whose epoch 1 ended at 1 (it never had b): the copy starts again, and is
    # not elected before it holds what that leader had.
    replica.follow(_reset([(1, 0), (3, 1)], 0, 4))
    started: Any = replica.log
    assert started is not kept
    assert started.next_offset == 0
    assert not electable(replica)
    h.sync()
    again = _replica(h, tmp_path)
    again.load()
    assert (again.epochs, again.complete_at) == ([(1, 0), (3, 1)], 4)
    assert not electable(again)
    assert again.log is not None
    apply_append(again.log, StreamAppend(0, entry(b"a") * 4, 4, 4, 0, "", -1, None))
    assert electable(again)


def test_a_leader_takes_one_answer_per_reset() -> None:
    log: Any = SimpleNamespace(first_offset=3, next_offset=9, producers={}, offsets={})
    shipping = StreamShipping(log)
    first = decode_reset(shipping.reset("b"))
    second = decode_reset(shipping.reset("b"))
    assert second.sync == first.sync + 1
    assert shipping.positioned("b", first.sync, 5) is None  # an older answer
    assert "b" not in shipping.cursor
    assert shipping.positioned("b", second.sync, 2) is False  # below what the log holds
    assert shipping.positioned("b", second.sync, 10) is False  # beyond its end
    assert shipping.positioned("b", second.sync, 9) is True
    assert shipping.cursor["b"] == 9
    assert shipping.positioned("b", second.sync, 4) is None  # answered already


def test_a_follower_behind_what_retention_dropped_starts_again(h: Harness) -> None:
    vhost = VirtualHost("/")
    vhost.stream_backend = h.store
    arguments = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 100}
    queue = vhost.declare_queue("s", owner=None, durable=True, arguments=arguments)
    assert isinstance(queue, StreamQueue)
    queue.store_id = 1
    leading, peers, _ = _leading(queue)
    peers["c"].up = False
    for i in range(6):
        queue.append_entries([entry(b"m%d" % i * 20)], None, "", [0])
    h.sync()
    peers["c"].up = True
    leading.following.add("c")  # (as if the link had stayed up: c is at 0)
    assert queue.log.retain(1, None) > 0
    assert queue.log.first_offset > 0
    peers["c"].sent.clear()
    leading.pump()
    sent = [op for op in peers["c"].sent if isinstance(op, c.Append)]
    assert [op.record[0] for op in sent] == [STREAM_RESET]
    assert decode_reset(sent[0].record).first == queue.log.first_offset


def test_a_replicas_readers_get_what_the_leader_says_is_committed(
    h: Harness, tmp_path: Path
) -> None:
    replication = _follower(h, tmp_path)
    told: list[object] = []
    replication.links.server.stream_server = SimpleNamespace(stream_gone=told.append)  # type: ignore[assignment]
    front = _Front()

    def one(epoch: int, record: bytes) -> None:
        async def run() -> None:
            replication.append(front, c.Append("/", "s", epoch, 0, record))  # type: ignore[arg-type]

        h.loop.run_until_complete(run())

    one(2, encode_reset(StreamReset(0, {}, {})))
    one(2, encode_append(StreamAppend(0, entry(b"a") + entry(b"b"), 2, 2, 5, "", -1, None)))
    h.sync()
    reader = replication.reader("/", "s")
    assert reader is not None
    assert [b.position for b in reader.browse()] == []  # nothing committed yet
    one(2, encode_commit(1))
    assert [b.position for b in reader.browse()] == [0]
    one(1, encode_commit(2))  # a deposed leader's word is not taken
    assert [b.position for b in reader.browse()] == [0]
    one(2, encode_commit(2))
    assert [b.position for b in reader.browse()] == [0, 1]
    # Elected: the readers here are told the stream moved (their clients locate it again).
    replica = replication.replicas[("/", "s")]
    assert isinstance(replica, StreamReplica)
    replication._reader_gone(replica)
    assert reader.deleted
    assert replica.reader is None
    assert told == [reader]


def test_the_leader_tells_its_followers_each_commit(h: Harness) -> None:
    queue = _stream(h, "s", 1)
    leading, peers, _ = _leading(queue)
    queue.append_entries([entry(b"a")], None, "", [0])
    h.sync()
    _ack(leading, "b", 1)
    _ack(leading, "c", 1)
    for node in ("b", "c"):
        told = [
            decode_commit(op.record)
            for op in peers[node].sent
            if isinstance(op, c.Append) and op.record[0] == STREAM_COMMIT
        ]
        assert told == [1]


def test_stored_consumer_offsets_reach_the_followers_copies(h: Harness, tmp_path: Path) -> None:
    queue = _stream(h, "s", 1)
    leading, peers, _ = _leading(queue)
    queue.log.tracked = leading.tracked  # type: ignore[attr-defined]
    queue.log.store_offset("app", 5)
    queue.log.store_offset("app", 6)
    for node in ("b", "c"):
        told = [
            decode_track(op.record)
            for op in peers[node].sent
            if isinstance(op, c.Append) and op.record[0] == STREAM_TRACK
        ]
        assert told == [("app", 5), ("app", 6)]

    replication = _follower(h, tmp_path)
    front = _Front()

    def one(epoch: int, record: bytes) -> None:
        async def run() -> None:
            replication.append(front, c.Append("/", "s", epoch, 0, record))  # type: ignore[arg-type]

        h.loop.run_until_complete(run())

    one(2, encode_reset(StreamReset(0, {}, {"old": 1})))
    one(2, encode_track("app", 6))
    one(1, encode_track("app", 99))  # a deposed leader's word is not taken
    replica = replication.replicas[("/", "s")]
    assert isinstance(replica, StreamReplica)
    assert replica.log is not None
    assert dict(replica.log.offsets) == {"old": 1, "app": 6}
