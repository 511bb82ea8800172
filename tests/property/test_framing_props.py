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
    VIEW_FRAME,
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


def _pattern(size: int, seed: int) -> bytes:
    return bytes((seed + i * 7) & 0xFF for i in range(size))


# Payloads small and large: around a held piece's 4 KiB (copied together below it) and the
# view threshold (``VIEW_FRAME``: a read with such a frame is parsed in place after it).
large_frames_st = st.lists(
    st.tuples(
        st.sampled_from([FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT]),
        st.integers(0, 65535),
        st.sampled_from([0, 1, 40, 4095, 4096, VIEW_FRAME - 1, VIEW_FRAME, 65536]),
        st.integers(0, 255),
    ).map(lambda t: (t[0], t[1], _pattern(t[2], t[3]))),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    large_frames_st,
    st.lists(st.integers(1, 70000), max_size=30),
    st.lists(st.booleans(), min_size=1, max_size=30),
)
def test_views_of_a_reused_buffer_yield_the_same_frames(
    frames: list[Frame], sizes: list[int], views: list[bool]
) -> None:
    """Any split of the stream into reads, each read written into one buffer that is
    overwritten after it (the adapter's, ``server/read_buffer.py``) and fed as a view of it
    (``feed_view``) or as ``bytes`` (``feed``), in any mix: the frames of one ``feed`` of
    the whole stream, as ``bytes`` that outlive the buffer."""
    data = _encode(frames)
    buffer = bytearray(max([len(data), *sizes], default=1) or 1)
    decoder = FrameDecoder(0)
    got: list[Frame] = []
    off = 0
    reads = [*sizes, len(data)]
    for i, size in enumerate(reads):
        chunk = data[off : off + size]
        off += len(chunk)
        if not chunk:
            continue
        buffer[: len(chunk)] = chunk
        view = memoryview(buffer)[: len(chunk)]
        if views[i % len(views)]:
            got += decoder.feed_view(view)
        else:
            got += decoder.feed(view.tobytes())
        buffer[:] = b"\xa5" * len(buffer)
    assert got == frames
    assert all(type(f[2]) is bytes for f in got)
    assert decoder.buffered == 0


@settings(max_examples=100, deadline=None)
@given(large_frames_st, st.integers(0, 200000), st.integers(0, 255))
def test_a_view_with_a_bad_frame_fails_as_bytes_do(
    frames: list[Frame], at: int, octet: int
) -> None:
    """One octet of the stream changed: ``feed_view`` of one reused buffer in two reads
    gives what ``feed`` of the same reads gives, frames or the same error."""
    data = bytearray(_encode(frames) + encode_frame(FRAME_METHOD, 1, b"x"))
    data[at % len(data)] = octet
    cut = at % (len(data) + 1)

    def run(as_view: bool) -> tuple[list[Frame], str]:
        decoder = FrameDecoder(131072)
        got: list[Frame] = []
        buffer = bytearray(len(data))
        try:
            for piece in (data[:cut], data[cut:]):
                buffer[: len(piece)] = piece
                view = memoryview(buffer)[: len(piece)]
                got += decoder.feed_view(view) if as_view else decoder.feed(view.tobytes())
                buffer[:] = bytes(len(buffer))
        except AMQPError as exc:
            return got + decoder.salvaged, str(exc)
        return got, ""

    assert run(True) == run(False)
