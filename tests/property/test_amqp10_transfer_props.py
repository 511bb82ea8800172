"""Property tests of the per-message path: the hand-tuned transfer decoder agrees with the
generated one on every transfer, and the per-link encoder's frames (split at any
max-frame-size) decode back to the delivery."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10 import Accepted, Transfer
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.framing import FRAME_AMQP, Frame, FrameDecoder
from leveret.protocol.amqp10.transfer import TransferEncoder, decode_transfer

U32 = st.integers(0, 2**32 - 1)
TRANSFERS = st.builds(
    Transfer,
    handle=st.one_of(st.integers(0, 300), U32),
    delivery_id=st.none() | st.integers(0, 300) | U32,
    delivery_tag=st.none() | st.binary(max_size=32),
    message_format=st.none() | st.integers(0, 300),
    settled=st.none() | st.booleans(),
    more=st.booleans(),
    rcv_settle_mode=st.none() | st.integers(0, 1),
    state=st.none() | st.just(Accepted()),
    resume=st.booleans(),
    aborted=st.booleans(),
    batchable=st.booleans(),
)


def _expected(t: Transfer) -> tuple[object, ...]:
    return (
        t.handle,
        t.delivery_id,
        t.delivery_tag,
        t.message_format or 0,
        t.settled,
        t.more,
        t.rcv_settle_mode,
        t.state,
        t.aborted,
    )


@settings(max_examples=300, deadline=None)
@given(TRANSFERS, st.binary(max_size=40))
def test_fast_decoder_agrees_with_the_generated_one(t: Transfer, payload: bytes) -> None:
    body = t.encode() + payload
    fields = decode_transfer(body)
    assert fields[:-1] == _expected(t)
    assert body[fields[-1] :] == payload
    generated, end = Transfer.decode_body(body, 3, 0)
    assert generated == t
    assert end == fields[-1]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 65535),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=32),
    st.binary(max_size=3000),
    st.booleans(),
    st.sampled_from([512, 600, 1024, 4096, 2**32 - 1]),
)
def test_encoder_frames_decode_to_the_delivery(
    channel: int,
    handle: int,
    delivery_id: int,
    tag: bytes,
    payload: bytes,
    settled: bool,
    max_frame_size: int,
) -> None:
    enc = TransferEncoder(channel, handle, max_frame_size)
    data = b"".join(enc.encode(delivery_id, tag, payload, settled))
    frames = FrameDecoder(max_frame_size, expect_header=False).feed(data)
    assert all(isinstance(f, Frame) and f.frame_type == FRAME_AMQP for f in frames)
    got = b""
    for i, frame in enumerate(frames):
        assert isinstance(frame, Frame)
        assert frame.channel == channel
        h, did, dtag, fmt, dsettled, more, _, _, aborted, off = decode_transfer(frame.body)
        assert h == handle
        assert more == (i < len(frames) - 1)
        assert not aborted
        if i == 0:
            assert (did, dtag, fmt, dsettled) == (delivery_id, tag, 0, settled)
        got += frame.body[off:]
    assert got == payload


def test_unusual_encodings_take_the_slow_path() -> None:
    # A ulong handle is not a uint: the generated decoder's strictness applies.
    with pytest.raises(DecodeError, match="expected uint"):
        decode_transfer(b"\x00\x53\x14\xc0\x03\x01\x53\x01")
    # A delivery state is beyond the inline fields: decoded by the generated code.
    t = Transfer(handle=1, delivery_id=2, delivery_tag=b"x", state=Accepted())
    assert decode_transfer(t.encode())[7] == Accepted()
    with pytest.raises(DecodeError, match="past the end"):
        decode_transfer(t.encode()[:9])
