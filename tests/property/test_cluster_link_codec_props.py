"""The inter-node link's codec (protocol/cluster/codec.py): every operation survives a
round trip however the bytes are split, and bad input raises LinkError, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.cluster import codec as c
from tests.unit.protocol.released_codec import released_codec

text = st.text(max_size=40)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
blob = st.binary(max_size=300)
fmt = st.integers(0, 255)

ops = st.one_of(
    # A Hello of 2026-11-28's main (its nonce alone), and one naming its link features.
    st.builds(c.Hello, text, u64, st.binary(max_size=16), text),
    st.builds(
        c.Hello,
        text,
        u64,
        st.binary(min_size=16, max_size=16),
        text,
        st.frozensets(st.from_regex(r"[a-z][a-z-]{0,15}", fullmatch=True), max_size=8),
    ),
    st.builds(c.Proof, st.binary(min_size=32, max_size=32)),
    st.builds(c.Publish, u64, text, text, text, text, fmt, blob, blob),
    st.builds(c.Also, u64, text, text),
    st.builds(c.Confirm, u64, st.booleans(), st.booleans()),
    st.builds(
        c.Consume,
        u32,
        text,
        text,
        st.booleans(),
        st.booleans(),
        u32,
        st.integers(-(2**31), 2**31 - 1),
        # A consumer's carried arguments (x-stream-offset: a number, a word, a time).
        st.dictionaries(
            st.sampled_from(["x-stream-offset", "x-stream-filter"]),
            st.one_of(st.integers(0, 2**62), st.sampled_from(["first", "last", "next", "1D"])),
            max_size=2,
        ),
    ),
    st.builds(c.ConsumeOk, u32),
    st.builds(c.Credit, u32, u32, u64),
    st.builds(c.Cancel, u32),
    st.builds(c.Cancelled, u32, st.integers(0, 65535), text),
    st.builds(c.Deliver, u32, u64, st.booleans(), text, text, fmt, blob, blob),
    st.builds(c.DeliverAlso, u32, u64, st.booleans()),
    st.builds(c.DeliverKept, u32, u64, st.booleans(), st.integers(0, 2**16 - 1)),
    st.builds(c.Settle, st.integers(0, 2), st.lists(u64, max_size=20).map(tuple)),
    st.builds(c.Get, u32, text, text, st.booleans()),
    st.builds(c.Got, u32, u64, st.booleans(), u32, text, text, fmt, blob, blob),
    st.builds(c.Empty, u32, u32),
    st.builds(c.Failed, u32, st.integers(0, 65535), text),
    st.builds(c.Backlog, text, text, st.booleans()),
    st.builds(c.Inspect, u32, text, text, st.booleans()),
    st.builds(c.Counted, u32, u32, u32),
    st.builds(c.Taken, u64),
    st.builds(c.Positioned, text, text, u64, u64, u64),
    st.builds(c.StoreOffset, text, text, text, u64),
    st.builds(c.QueryOffset, u32, text, text, text),
    st.builds(c.StoredOffset, u32, st.booleans(), u64),
    st.builds(c.Stat, u32, text, text),
    st.builds(c.Stats, u32, u64, u64, u32),
    st.builds(c.Drain, u32, u32, u64),
    st.builds(c.Drained, u32),
    st.builds(c.Acquire, u32, text, text, u64),
)


@given(st.lists(ops, max_size=12), st.lists(st.integers(1, 64), max_size=30))
@settings(max_examples=200)
def test_round_trip_in_any_split(batch: list[c.Op], cuts: list[int]) -> None:
    writer = c.Writer()
    for op in batch:
        writer.add(op)
    data = writer.take()
    assert writer.size == 0
    reader = c.Reader()
    out: list[c.Op] = []
    pos = 0
    for cut in cuts:
        out += reader.feed(data[pos : pos + cut])
        pos += cut
    out += reader.feed(data[pos:])
    assert out == batch
    assert reader.buffered == 0


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_garbage_raises_link_error_only(data: bytes) -> None:
    reader = c.Reader()
    try:
        reader.feed(data)
    except c.LinkError:
        pass


@given(ops, st.integers(0, 200), st.integers(0, 255))
@settings(max_examples=300)
def test_corrupted_frame_raises_link_error_only(op: c.Op, at: int, value: int) -> None:
    frame = bytearray(c.encode(op))
    frame[at % len(frame)] = value
    try:
        c.Reader().feed(bytes(frame))
    except c.LinkError:
        pass


def test_proof_depends_on_secret_role_node_and_nonce() -> None:
    base = c.proof("s", "dialer", "a", b"n")
    assert len(base) == 32
    assert base == c.proof("s", "dialer", "a", b"n")
    for other in (
        c.proof("t", "dialer", "a", b"n"),
        c.proof("s", "listener", "a", b"n"),
        c.proof("s", "dialer", "b", b"n"),
        c.proof("s", "dialer", "a", b"m"),
    ):
        assert other != base
    assert c.cluster_tag("s") != c.cluster_tag("t")


@given(u32, u32, u64)
def test_credit_frame_is_the_encoded_op(cid: int, credit: int, received: int) -> None:
    frame = c.credit_frame(cid, credit, received)
    assert frame == c.encode(c.Credit(cid, credit, received))
    assert c.Reader().feed(frame) == [c.Credit(cid, credit, received)]


@given(u64, text, text)
def test_also_frame_is_the_encoded_op(seq: int, vhost: str, queue: str) -> None:
    frame = c.also_frame(seq, c.publish_names(vhost, queue))
    assert frame == c.encode(c.Also(seq, vhost, queue))
    assert c.Reader().feed(frame) == [c.Also(seq, vhost, queue)]


def test_oversized_frame_is_refused_before_it_arrives() -> None:
    head = (c.MAX_FRAME + 1).to_bytes(4, "big") + b"\x03"
    with pytest.raises(c.LinkError, match="bytes"):
        c.Reader().feed(head)


@pytest.mark.parametrize("size", [255, 256, 70_000])
def test_long_names_properties_and_bodies_round_trip(size: int) -> None:
    # Lengths under 256 are written from tables, longer ones packed (the per-message
    # frames' encoders); names are at most 65,535 bytes, the rest longer.
    name, blob = "n" * min(size, 0xFFFF), b"\x01" * size
    batch: list[c.Op] = [
        c.Publish(2**64 - 1, name, name, name, name, 0, blob, blob),
        c.Deliver(2**32 - 1, 2**64 - 1, True, name, name, 1, blob, blob),
    ]
    assert c.Reader().feed(b"".join(c.encode(op) for op in batch)) == batch
    with pytest.raises(ValueError, match="too long"):
        c.encode(c.Deliver(1, 1, False, "x" * 0x10000, "", 0, b"", b""))


def _generic(frame: bytes) -> c.Op:
    """``frame`` read by the generic decoder (``_Cursor``), not the reader's fast paths."""
    return c._decode(frame[4], c._Cursor(memoryview(frame)[5:]))


@given(
    st.one_of(
        st.builds(c.Settle, st.integers(0, 2), st.lists(u64, max_size=300).map(tuple)),
        st.builds(c.Also, u64, text, text),
    ),
    st.integers(0, 400),
    st.integers(0, 255),
)
@settings(max_examples=400)
def test_settle_and_also_read_directly_as_the_generic_decoder_reads_them(
    op: c.Op, at: int, value: int
) -> None:
    # A Settle's ids are read as one array and an Also's names kept by their bytes
    # (``Reader``'s direct paths): whole or corrupted, a frame reads as it always did.
    frame = c.encode(op)
    assert frame == c._HEAD.pack(len(frame) - 4, frame[4]) + c._payload(op)[1]
    assert c.Reader().feed(frame) == [op] == [_generic(frame)]
    bad = bytearray(frame)
    bad[4 + (at % (len(frame) - 4))] = value  # the length stays: the frame is read
    bad[4] = frame[4]
    try:
        expected: c.Op | None = _generic(bytes(bad))
    except c.LinkError:
        expected = None
    try:
        got: list[c.Op] | None = c.Reader().feed(bytes(bad))
    except c.LinkError:
        got = None
    assert got == (None if expected is None else [expected])


@given(u64 | st.just(0), text, text, text, text, fmt, blob, blob)
def test_a_publish_in_pieces_is_its_frame(
    seq: int, vhost: str, queue: str, exchange: str, key: str, form: int, raw: bytes, body: bytes
) -> None:
    # The dialling side writes a Publish as pieces of its turn's write (``add_publish``):
    # joined, they are the frame a node of the released codec writes, whatever the lengths.
    names = c.publish_names(vhost, queue)
    pieces: list[bytes] = [b"before"]
    size = c.add_publish(pieces, seq, c.publish_route(names, exchange, key), form, raw, body)
    frame = released_codec().named_publish_frame(seq, names, exchange, key, form, raw, body)
    assert pieces[0] == b"before"
    assert b"".join(pieces[1:]) == frame
    assert size == len(frame)


@given(u32, u64, st.booleans(), st.booleans(), text, text, fmt, blob, blob)
def test_a_deliver_with_its_kept_route_is_its_frame(
    cid: int,
    did: int,
    redelivered: bool,
    keep: bool,
    exchange: str,
    key: str,
    form: int,
    raw: bytes,
    body: bytes,
) -> None:
    # The leader writes a Deliver with its exchange and routing key encoded once
    # (``deliver_route``, kept by routing key): the frame a node of the released codec
    # writes, whatever the lengths (with ``keep``, a feature since, its flag bit more);
    # read back, the delivery it was.
    route = c.deliver_route(exchange, key)
    flags = redelivered | keep << 1
    frame = c.routed_deliver_frame(cid, did, flags, route, form, raw, body)
    released = bytearray(
        released_codec().deliver_frame(cid, did, redelivered, exchange, key, form, raw, body)
    )
    released[4 + 1 + 4 + 8] |= keep << 1  # the flags byte, after the length, code, ids
    assert frame == released
    assert c.deliver_frame(cid, did, redelivered, exchange, key, form, raw, body, keep) == frame
    assert c.Reader().feed(frame) == [
        c.Deliver(cid, did, redelivered, exchange, key, form, raw, body, keep)
    ]


@given(u32, u64, st.integers(0, 3), text, text, fmt, blob, blob)
def test_a_deliver_in_pieces_is_its_frame(
    cid: int, did: int, flags: int, exchange: str, key: str, form: int, raw: bytes, body: bytes
) -> None:
    # The leader writes a Deliver as pieces of its turn's one write (``add_deliver``):
    # joined, they are the frame a node of the released codec writes (its flags byte with
    # ``keep``, a feature since), whatever the ids and lengths.
    pieces: list[bytes] = [b"before"]
    size = c.add_deliver(pieces, cid, did, flags, c.deliver_route(exchange, key), form, raw, body)
    released = bytearray(
        released_codec().deliver_frame(cid, did, flags & 1 == 1, exchange, key, form, raw, body)
    )
    released[4 + 1 + 4 + 8] |= flags & 2
    assert pieces[0] == b"before"
    assert b"".join(pieces[1:]) == released
    assert size == len(released)
