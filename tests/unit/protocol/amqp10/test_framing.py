"""AMQP 1.0 frames: headers, empty frames, extended headers, SASL pauses, size checks."""

from __future__ import annotations

import pytest

from leveret.protocol.amqp10.errors import AMQP10Error
from leveret.protocol.amqp10.framing import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_SASL,
    SASL_HEADER,
    Frame,
    FrameDecoder,
    ProtocolHeader,
    encode_frame,
)


def test_header_then_frames_in_one_pass() -> None:
    data = AMQP_HEADER + encode_frame(3, b"abc") + EMPTY_FRAME + encode_frame(0, b"x")
    got = FrameDecoder().feed(data)
    assert got == [
        ProtocolHeader(AMQP_HEADER),
        Frame(FRAME_AMQP, 3, b"abc"),
        Frame(FRAME_AMQP, 0, b""),
        Frame(FRAME_AMQP, 0, b"x"),
    ]
    assert isinstance(got[0], ProtocolHeader)
    assert got[0].protocol_id == 0


def test_extended_header_is_skipped() -> None:
    # doff 3: four bytes of extended header before the body.
    frame = b"\x00\x00\x00\x0f\x03\x00\x00\x07" + b"EXTN" + b"bod"
    assert FrameDecoder(expect_header=False).feed(frame) == [Frame(FRAME_AMQP, 7, b"bod")]


def test_sasl_frame_ends_the_pass_and_the_header_may_follow() -> None:
    dec = FrameDecoder()
    data = SASL_HEADER + encode_frame(0, b"init", FRAME_SASL) + AMQP_HEADER + encode_frame(0, b"o")
    assert dec.feed(data) == [ProtocolHeader(SASL_HEADER), Frame(FRAME_SASL, 0, b"init")]
    assert dec.buffered == 8 + 9
    dec.expect_header = True  # the machine answered with sasl-outcome ok
    assert dec.feed(b"") == [ProtocolHeader(AMQP_HEADER), Frame(FRAME_AMQP, 0, b"o")]
    assert dec.buffered == 0


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"HTTP/1.1", "protocol header"),
        (b"\x00\x00\x00\x07\x02\x00\x00\x00", "malformed frame header"),
        (b"\x00\x00\x00\x08\x01\x00\x00\x00", "malformed frame header"),
        (b"\x00\x00\x00\x0c\x04\x00\x00\x00xxxx", "malformed frame header"),
        (b"\x00\x00\x00\x09\x02\x05\x00\x00x", "unknown frame type 5"),
        (b"\x00\x01\x00\x01\x02\x00\x00\x00", "exceeds max-frame-size 4096"),
    ],
)
def test_bad_frames_are_framing_errors(data: bytes, why: str) -> None:
    dec = FrameDecoder(4096, expect_header=data.startswith(b"HTTP"))
    with pytest.raises(AMQP10Error, match=why) as info:
        dec.feed(encode_frame(1, b"ok") + data)
    assert info.value.condition == "amqp:connection:framing-error"
    assert dec.salvaged == ([] if data.startswith(b"HTTP") else [Frame(FRAME_AMQP, 1, b"ok")])
    with pytest.raises(AMQP10Error, match=why):
        dec.feed(b"")  # poisoned


def test_oversized_frame_rejected_from_its_header_alone() -> None:
    dec = FrameDecoder(512, expect_header=False)
    with pytest.raises(AMQP10Error, match="exceeds"):
        dec.feed(b"\x00\x00\x10\x00\x02\x00\x00\x00")


def test_max_frame_size_below_the_spec_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="below 512"):
        FrameDecoder(511)


def test_large_frame_fed_in_pieces() -> None:
    body = bytes(range(256)) * 400
    data = encode_frame(9, body)
    dec = FrameDecoder(expect_header=False)
    got: list[Frame | ProtocolHeader] = []
    for i in range(0, len(data), 1000):
        got += dec.feed(memoryview(data)[i : i + 1000])
    assert got == [Frame(FRAME_AMQP, 9, body)]
    assert dec.buffered == 0
