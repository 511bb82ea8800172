"""Property tests for the frame decoder: any split of the stream yields the same frames."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.errors import AMQPError
from leveret.protocol.amqp091.framing import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    Frame,
    FrameDecoder,
    encode_content_frames,
    encode_frame,
    encode_message_frames,
)

frames_st = st.lists(
    st.tuples(
        st.sampled_from([FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT]),
        st.integers(0, 65535),
        st.binary(max_size=40),
    ),
    max_size=5,
)


def _encode(frames: list[Frame]) -> bytes:
    return b"".join(encode_frame(f[0], f[1], f[2]) for f in frames)


@settings(max_examples=60, deadline=None)
@given(frames_st)
def test_every_split_yields_same_frames(frames: list[Frame]) -> None:
    data = _encode(frames)
    assert FrameDecoder().feed(data) == frames
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        assert decoder.feed(data[:cut]) + decoder.feed(bytearray(data[cut:])) == frames
    decoder = FrameDecoder()
    one_at_a_time: list[Frame] = []
    for i in range(len(data)):
        one_at_a_time += decoder.feed(memoryview(data)[i : i + 1])
    assert one_at_a_time == frames
    assert decoder.buffered == 0


@settings(max_examples=100, deadline=None)
@given(frames_st, st.lists(st.integers(0, 64), max_size=20))
def test_random_chunking(frames: list[Frame], sizes: list[int]) -> None:
    data = _encode(frames)
    decoder = FrameDecoder()
    got: list[Frame] = []
    off = 0
    for size in sizes:
        got += decoder.feed(data[off : off + size])
        off += size
    got += decoder.feed(data[off:])
    assert got == frames


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 65535),
    st.binary(max_size=300),
    st.binary(max_size=20),
    st.sampled_from([0, 9, 10, 17, 64, 4096]),
)
def test_message_frames_reassemble(
    channel: int, body: bytes, properties: bytes, frame_max: int
) -> None:
    joined = encode_message_frames(channel, b"\x00\x3c\x00\x28", 60, body, properties, frame_max)
    frames = FrameDecoder(0).feed(joined)
    assert frames[0] == (FRAME_METHOD, channel, b"\x00\x3c\x00\x28")
    assert frames[1][0] == FRAME_HEADER
    assert b"".join(bytes(f[2]) for f in frames[2:]) == body
    assert all(f[0] == FRAME_BODY and f[1] == channel for f in frames[2:])
    assert joined[len(_encode(frames[:1])) :] == b"".join(
        encode_content_frames(channel, 60, body, properties, frame_max)
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=6), st.sampled_from([0, 16, 4096, 131072]))
def test_random_bytes_only_raise_amqp_errors(chunks: list[bytes], frame_max: int) -> None:
    decoder = FrameDecoder(frame_max)
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except AMQPError:
            pass


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 70_000), min_size=1, max_size=3),
    st.lists(st.integers(1, 70_000), max_size=30),
)
def test_large_bodies_in_reads_of_any_size(sizes: list[int], reads: list[int]) -> None:
    """Large body frames (up to the default frame_max) split at any points: small reads
    are copied together and large ones held as views, and each payload comes out whole."""
    frames = [(FRAME_BODY, i + 1, bytes([i % 256]) * size) for i, size in enumerate(sizes)]
    data = _encode(frames)
    decoder = FrameDecoder()
    got: list[Frame] = []
    off = 0
    for size in reads:
        got += decoder.feed(data[off : off + size])
        off += size
    got += decoder.feed(data[off:])
    assert got == frames
    assert decoder.buffered == 0
