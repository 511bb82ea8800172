"""Property tests for the AMQP 1.0 frame decoder: any split of the stream yields the same
headers and frames."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10.framing import (
    AMQP_HEADER,
    FRAME_AMQP,
    Frame,
    FrameDecoder,
    ProtocolHeader,
    encode_frame,
)

frames_st = st.lists(
    st.builds(Frame, st.just(FRAME_AMQP), st.integers(0, 65535), st.binary(max_size=40)),
    max_size=5,
)


def _stream(frames: list[Frame]) -> bytes:
    return AMQP_HEADER + b"".join(encode_frame(f.channel, f.body) for f in frames)


@settings(max_examples=60, deadline=None)
@given(frames_st)
def test_every_split_yields_same_frames(frames: list[Frame]) -> None:
    data = _stream(frames)
    expected = [ProtocolHeader(AMQP_HEADER), *frames]
    assert FrameDecoder().feed(data) == expected
    for cut in range(len(data) + 1):
        dec = FrameDecoder()
        assert dec.feed(data[:cut]) + dec.feed(bytearray(data[cut:])) == expected
    dec = FrameDecoder()
    one_at_a_time: list[Frame | ProtocolHeader] = []
    for i in range(len(data)):
        one_at_a_time += dec.feed(memoryview(data)[i : i + 1])
    assert one_at_a_time == expected
    assert dec.buffered == 0


@settings(max_examples=100, deadline=None)
@given(frames_st, st.lists(st.integers(0, 64), max_size=20))
def test_random_chunking(frames: list[Frame], sizes: list[int]) -> None:
    data = _stream(frames)
    dec = FrameDecoder()
    got: list[Frame | ProtocolHeader] = []
    off = 0
    for size in sizes:
        got += dec.feed(data[off : off + size])
        off += size
    got += dec.feed(data[off:])
    assert got == [ProtocolHeader(AMQP_HEADER), *frames]
