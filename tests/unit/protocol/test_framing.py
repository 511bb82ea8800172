"""Unit tests for AMQP 0-9-1 framing: the incremental decoder and the frame encoders."""

from __future__ import annotations

import struct

import pytest

from leveret.errors import AMQPError, FrameError
from leveret.protocol.amqp091.framing import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    Frame,
    FrameDecoder,
    encode_content_frames,
    encode_frame,
    encode_message_frames,
    encode_method_frame,
    parse_content_header,
)

# basic.publish(exchange="", routing_key="q") as a generated method would encode it
PUBLISH = b"\x00\x3c\x00\x28\x00\x00\x00\x01q\x00"
PROPS = b"\x10\x00\x02"  # delivery-mode present, value 2


def test_constants() -> None:
    assert (FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT) == (1, 2, 3, 8)
    assert FRAME_END == 0xCE
    assert FRAME_HEADER_SIZE == 7
    assert FRAME_OVERHEAD == 8
    assert PROTOCOL_HEADER == b"AMQP\x00\x00\x09\x01"
    assert HEARTBEAT_FRAME == b"\x08\x00\x00\x00\x00\x00\x00\xce"


def test_encode_frame_golden() -> None:
    assert encode_frame(1, 5, b"ab") == b"\x01\x00\x05\x00\x00\x00\x02ab\xce"
    assert encode_frame(3, 0xFFFF, memoryview(b"z")) == b"\x03\xff\xff\x00\x00\x00\x01z\xce"
    assert encode_method_frame(2, PUBLISH) == encode_frame(FRAME_METHOD, 2, PUBLISH)


def test_encode_content_frames_golden() -> None:
    frames = encode_content_frames(1, 60, b"hello", PROPS, 131072)
    assert frames == [
        b"\x02\x00\x01\x00\x00\x00\x0f"
        + b"\x00\x3c\x00\x00"
        + b"\x00\x00\x00\x00\x00\x00\x00\x05"
        + PROPS
        + b"\xce",
        b"\x03\x00\x01\x00\x00\x00\x05hello\xce",
    ]


def test_encode_content_frames_empty_body() -> None:
    frames = encode_content_frames(1, 60, b"", PROPS, 131072)
    assert len(frames) == 1
    assert frames[0][0] == FRAME_HEADER


@pytest.mark.parametrize("frame_max", [0, 9, 10, 13, 15, 16, 100, 4096])
@pytest.mark.parametrize("size", [1, 7, 8, 15, 16, 17, 1000])
def test_body_split(frame_max: int, size: int) -> None:
    body = bytes(range(256)) * 4
    body = body[:size]
    frames = encode_content_frames(3, 60, body, PROPS, frame_max)
    decoded = FrameDecoder(0).feed(b"".join(frames))  # the header frame may exceed tiny maxima
    assert decoded[0][0] == FRAME_HEADER
    bodies = decoded[1:]
    assert all(f[0] == FRAME_BODY and f[1] == 3 for f in bodies)
    assert b"".join(bytes(f[2]) for f in bodies) == body
    if frame_max:
        assert all(len(f[2]) <= frame_max - FRAME_OVERHEAD for f in bodies)
        assert len(bodies) == -(-size // (frame_max - FRAME_OVERHEAD))
    else:
        assert len(bodies) == 1
    joined = encode_message_frames(3, PUBLISH, 60, body, PROPS, frame_max)
    assert joined == encode_method_frame(3, PUBLISH) + b"".join(frames)
    assert encode_message_frames(3, PUBLISH, 60, memoryview(body), PROPS, frame_max) == joined
    assert b"".join(encode_content_frames(3, 60, memoryview(body), PROPS, frame_max)) == (
        b"".join(frames)
    )


def test_encode_message_frames_empty_body() -> None:
    joined = encode_message_frames(1, PUBLISH, 60, b"", PROPS, 131072)
    assert joined == encode_method_frame(1, PUBLISH) + b"".join(
        encode_content_frames(1, 60, b"", PROPS, 131072)
    )
    frames = FrameDecoder().feed(joined)
    assert [f[0] for f in frames] == [FRAME_METHOD, FRAME_HEADER]


def test_frame_max_too_small_for_body() -> None:
    with pytest.raises(ValueError, match="frame_max"):
        encode_content_frames(1, 60, b"x", PROPS, 8)
    with pytest.raises(ValueError, match="frame_max"):
        encode_message_frames(1, PUBLISH, 60, b"x", PROPS, 8)


def test_parse_content_header() -> None:
    frames = FrameDecoder().feed(encode_content_frames(1, 60, b"x" * 300, PROPS, 131072)[0])
    assert parse_content_header(frames[0][2]) == (60, 300, PROPS)
    assert parse_content_header(memoryview(bytes(frames[0][2]))) == (60, 300, PROPS)
    result = parse_content_header(b"\x00\x3c\x00\x00" + struct.pack(">Q", 2**40) + b"\x00\x00")
    assert result == (60, 2**40, b"\x00\x00")
    assert type(result[2]) is bytes


@pytest.mark.parametrize("size", [0, 1, 12, 13])
def test_parse_content_header_too_short(size: int) -> None:
    with pytest.raises(FrameError):
        parse_content_header(b"\x00" * size)


# --- decoder ---------------------------------------------------------------------------------


def _stream() -> tuple[bytes, list[Frame]]:
    frames = [
        (FRAME_METHOD, 1, PUBLISH),
        (FRAME_HEADER, 1, b"\x00\x3c\x00\x00" + struct.pack(">Q", 3) + PROPS),
        (FRAME_BODY, 1, b"abc"),
        (FRAME_HEARTBEAT, 0, b""),
        (FRAME_BODY, 65535, b""),
    ]
    data = b"".join(encode_frame(*f) for f in frames)
    return data, frames


def test_decoder_batch() -> None:
    data, frames = _stream()
    decoder = FrameDecoder()
    assert decoder.feed(data) == frames
    assert decoder.buffered == 0
    assert decoder.feed(b"") == []


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_decoder_every_split(kind: type) -> None:
    data, frames = _stream()
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(kind(data[:cut])) + decoder.feed(kind(data[cut:]))
        assert got == frames, cut
        assert decoder.buffered == 0


def test_only_the_straddling_frame_is_buffered() -> None:
    # A large body straddles reads: the read that completes it lends the decoder only the
    # bytes the frame lacks, the frames after it are parsed from the read itself, and what
    # stays buffered is the incomplete tail alone.
    body = (FRAME_BODY, 1, bytes(range(256)) * 256)
    small = [(FRAME_METHOD, 1, b"\x00\x3c\x00\x28"), (FRAME_HEARTBEAT, 0, b"")]
    data = encode_frame(*body) + b"".join(encode_frame(*f) for f in small) + encode_frame(*body)
    decoder = FrameDecoder()
    first = decoder.feed(data[:1000])
    assert first == []
    assert decoder.buffered == 1000
    cut = len(data) - 5000
    assert decoder.feed(data[1000:cut]) == [body, *small]
    assert decoder.buffered == len(encode_frame(*body)) - 5000
    assert decoder.feed(data[cut:]) == [body]
    assert decoder.buffered == 0


def test_decoder_byte_at_a_time() -> None:
    data, frames = _stream()
    decoder = FrameDecoder()
    got: list[Frame] = []
    for i in range(len(data)):
        got.extend(decoder.feed(data[i : i + 1]))
    assert got == frames


def test_payloads_survive_later_feeds() -> None:
    data, frames = _stream()
    decoder = FrameDecoder()
    source = bytearray(data[:20])
    first = decoder.feed(source)
    source[:] = b"\xff" * len(source)  # caller reuses its buffer
    rest = decoder.feed(memoryview(bytearray(data[20:])))
    got = first + rest
    decoder.feed(data)
    assert got == frames
    assert all(type(f[2]) is bytes for f in got)


def test_incomplete_returns_complete_prefix() -> None:
    data, frames = _stream()
    decoder = FrameDecoder()
    first_len = len(encode_frame(*frames[0]))
    assert decoder.feed(data[: first_len + 3]) == frames[:1]
    assert decoder.buffered == 3


def test_bad_frame_end() -> None:
    decoder = FrameDecoder()
    good = encode_frame(FRAME_METHOD, 1, PUBLISH)
    with pytest.raises(FrameError, match="frame_end") as info:
        decoder.feed(good + b"\x01\x00\x01\x00\x00\x00\x01x\x00")
    assert info.value.reply_code == 501
    assert decoder.salvaged == [(FRAME_METHOD, 1, PUBLISH)]
    # poisoned: the same error again, even for good data
    with pytest.raises(FrameError) as again:
        decoder.feed(good)
    assert again.value is info.value


def test_frame_too_large_complete() -> None:
    decoder = FrameDecoder(frame_max=4096)
    # RabbitMQ accepts a payload of frame_max bytes (8 more than the spec's frame size).
    decoder.feed(encode_frame(FRAME_BODY, 1, b"x" * 4096))
    with pytest.raises(FrameError, match="too large"):
        decoder.feed(encode_frame(FRAME_BODY, 1, b"x" * 4097))
    with pytest.raises(FrameError, match="too large"):
        decoder.feed(b"")


def test_frame_too_large_rejected_at_header() -> None:
    decoder = FrameDecoder(frame_max=4096)
    with pytest.raises(FrameError, match="too large"):
        decoder.feed(b"\x03\x00\x01\x7f\xff\xff\xff\x00")
    assert decoder.buffered == 0


def test_frame_max_is_writable_and_zero_unlimited() -> None:
    decoder = FrameDecoder(frame_max=4096)
    decoder.frame_max = 0
    payload = b"y" * 200_000
    assert decoder.feed(encode_frame(FRAME_BODY, 1, payload)) == [(FRAME_BODY, 1, payload)]
    decoder.frame_max = 131072
    with pytest.raises(FrameError):
        decoder.feed(encode_frame(FRAME_BODY, 1, payload))


@pytest.mark.parametrize("frame_type", [0, 4, 7, 9, 255])
def test_unknown_frame_type(frame_type: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="unknown frame type"):
        decoder.feed(encode_frame(frame_type, 0, b"abc"))
    with pytest.raises(FrameError, match="unknown frame type"):
        decoder.feed(HEARTBEAT_FRAME)


def test_error_priority() -> None:
    # bad frame end beats size and type
    bad = b"\x09\x00\x00\x00\x00\x00\x09" + b"z" * 9 + b"\x00"
    with pytest.raises(FrameError, match="frame_end"):
        FrameDecoder(frame_max=16).feed(bad)
    # size beats type
    big = encode_frame(9, 0, b"z" * 17)
    with pytest.raises(FrameError, match="too large"):
        FrameDecoder(frame_max=16).feed(big)


def test_errors_are_amqp_errors() -> None:
    with pytest.raises(AMQPError):
        FrameDecoder().feed(b"\x01\x00\x00\x00\x00\x00\x00\x00")


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (encode_frame(FRAME_METHOD, 5, PUBLISH)[:-1] + b"\x01", "frame_end: expected 0xCE"),
        (encode_frame(9, 5, b"abc"), "unknown frame type 9 on channel 5"),
    ],
)
def test_a_bad_frame_split_across_reads_gives_the_whole_frames_error(
    frame: bytes, error: str
) -> None:
    """The frame held back from one read is checked as a whole one is, the same error
    (issue 26: the buffered frame is finished on its own, not by the scan)."""
    whole = FrameDecoder()
    with pytest.raises(FrameError, match=error) as once:
        whole.feed(frame)
    for cut in range(1, len(frame)):
        split = FrameDecoder()
        good = encode_frame(FRAME_HEARTBEAT, 0, b"")
        assert split.feed(good + frame[:cut]) == [(FRAME_HEARTBEAT, 0, b"")]
        with pytest.raises(FrameError) as info:
            split.feed(frame[cut:])
        assert str(info.value) == str(once.value)
        assert split.buffered == 0


def test_a_frame_split_across_reads_keeps_its_channel_and_type() -> None:
    decoder = FrameDecoder()
    frame = encode_frame(FRAME_BODY, 513, b"payload")
    assert decoder.feed(frame[:4]) == []
    assert decoder.feed(frame[4:]) == [(FRAME_BODY, 513, b"payload")]
    assert type(decoder.feed(frame)[0][2]) is bytes


def _body(size: int) -> bytes:
    return bytes(range(251)) * (size // 251) + bytes(range(size % 251))


@pytest.mark.parametrize("read", [1, 7, 8, 4095, 4096, 4097, 65536, 256_000])
def test_a_large_body_split_into_reads_of_every_size(read: int) -> None:
    """A 64 KiB body frame fed in reads of ``read`` octets, tiny ones (copied together)
    and large ones (kept as views of their reads): the same frames, payloads as bytes
    that outlive the reads, and what is held counted whole."""
    frames = [
        (FRAME_METHOD, 1, PUBLISH),
        (FRAME_HEADER, 1, b"\x00\x3c\x00\x00" + struct.pack(">Q", 65536) + PROPS),
        (FRAME_BODY, 1, _body(65536)),
    ]
    data = b"".join(encode_frame(*f) for f in frames) * 3
    decoder = FrameDecoder()
    got: list[Frame] = []
    for off in range(0, len(data), read):
        chunk = bytearray(data[off : off + read])
        got += decoder.feed(chunk)
        chunk[:] = b"\xff" * len(chunk)  # the caller reuses its buffer
        assert decoder.buffered == (off + len(chunk)) - sum(len(encode_frame(*f)) for f in got)
    assert got == frames * 3
    assert all(type(f[2]) is bytes for f in got)
    assert decoder.buffered == 0


@pytest.mark.parametrize("frame_max", [4096, 131072])
@pytest.mark.parametrize("cut", [1, 6, 7, 8, 100, 4103])
def test_a_payload_of_frame_max_split_across_reads(frame_max: int, cut: int) -> None:
    """The payload may fill frame_max (RabbitMQ's leniency) however it is split; one
    octet more is rejected as soon as its header is whole, before its payload comes."""
    fits = encode_frame(FRAME_BODY, 3, _body(frame_max))
    decoder = FrameDecoder(frame_max)
    assert decoder.feed(fits[:cut]) == []
    assert decoder.feed(fits[cut:]) == [(FRAME_BODY, 3, _body(frame_max))]
    over = encode_frame(FRAME_BODY, 3, _body(frame_max + 1))
    decoder = FrameDecoder(frame_max)
    if cut < FRAME_HEADER_SIZE + 1:
        assert decoder.feed(over[:cut]) == []
        with pytest.raises(FrameError, match="too large"):
            decoder.feed(over[cut : FRAME_HEADER_SIZE + 1])
    else:
        with pytest.raises(FrameError, match="too large"):
            decoder.feed(over[:cut])
    assert decoder.buffered == 0


def test_a_held_header_alone_is_checked_with_the_next_read() -> None:
    """A read that ends with exactly a frame's header: the frames before it are returned,
    and the header's size is judged when the next read comes (as before the pieces)."""
    decoder = FrameDecoder(frame_max=4096)
    beat = encode_frame(FRAME_HEARTBEAT, 0, b"")
    header = b"\x03\x00\x01\x00\x00\x20\x00"  # a body frame of 8192 octets
    assert decoder.feed(beat + header) == [(FRAME_HEARTBEAT, 0, b"")]
    assert decoder.buffered == FRAME_HEADER_SIZE
    with pytest.raises(FrameError, match="too large"):
        decoder.feed(b"x")


def test_frame_max_lowered_while_a_frame_is_held() -> None:
    decoder = FrameDecoder(frame_max=0)
    frame = encode_frame(FRAME_BODY, 1, _body(200_000))
    assert decoder.feed(frame[:70_000]) == []
    decoder.frame_max = 131072
    with pytest.raises(FrameError, match="too large"):
        decoder.feed(frame[70_000:140_000])
    assert decoder.buffered == 0


def test_a_held_large_frame_with_a_bad_end() -> None:
    frame = encode_frame(FRAME_BODY, 2, _body(65536))[:-1] + b"\x00"
    decoder = FrameDecoder()
    assert decoder.feed(frame[:5000]) == []
    assert decoder.feed(frame[5000:9000]) == []
    with pytest.raises(FrameError, match="frame_end"):
        decoder.feed(frame[9000:])
    assert decoder.buffered == 0
