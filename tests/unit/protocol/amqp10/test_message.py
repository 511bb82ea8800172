"""The AMQP 1.0 message format: sections found by offset, the bare message kept byte for
byte, annotations rewritten around it, bad section sequences refused."""

from __future__ import annotations

import pytest

from leveret.protocol.amqp10 import (
    AmqpSequence,
    AmqpValue,
    ApplicationProperties,
    Data,
    Header,
    MessageAnnotations,
    Properties,
)
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.message import (
    AMQP_VALUE,
    DATA,
    PROPERTIES,
    encode_message,
    parse_message,
)
from leveret.protocol.amqp10.types import Symbol, Timestamp, ULong, encode_value


def _full() -> bytes:
    return encode_message(
        [Data(b"hello "), Data(b"world")],
        header=Header(durable=True, priority=5, ttl=1000),
        delivery_annotations={"x-da": 1},
        message_annotations={"x-opt-routing-key": "rk"},
        properties=Properties(message_id="m1", to="/queues/q", creation_time=Timestamp(1)),
        application_properties={"k": "v"},
        footer={"x-f": b"sig"},
    )


def test_sections_and_bare_message() -> None:
    payload = _full()
    msg = parse_message(payload)
    assert [s.code for s in msg.sections] == [0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x75, 0x78]
    assert msg.header() == Header(durable=True, priority=5, ttl=1000)
    assert msg.delivery_annotations() == {"x-da": 1}
    assert msg.message_annotations() == {"x-opt-routing-key": "rk"}
    props = msg.properties()
    assert props is not None
    assert props.to == "/queues/q"
    assert msg.application_properties() == {"k": "v"}
    assert msg.footer() == {"x-f": b"sig"}
    assert msg.body_code == DATA
    assert msg.data() == b"hello world"
    # The bare message runs from properties to the end of the body.
    p = msg.find(PROPERTIES)
    assert p is not None
    assert msg.bare_start == p.start
    assert msg.bare == payload[p.start : msg.sections[-1].start]


def test_reannotated_keeps_bare_and_footer_bytes() -> None:
    payload = _full()
    msg = parse_message(payload)
    out = b"".join(
        msg.reannotated(
            header=Header(durable=True, delivery_count=3),
            message_annotations={Symbol("x-opt-routing-key"): "rk", "x-stream-offset": 7},
        )
    )
    again = parse_message(out)
    assert again.bare == msg.bare
    assert out.endswith(payload[msg.bare_start :])
    header = again.header()
    assert header is not None
    assert header.delivery_count == 3
    assert again.delivery_annotations() == {}
    assert again.message_annotations()["x-stream-offset"] == 7


def test_symbolic_and_ulong_descriptors() -> None:
    value = AmqpValue({"a": 1}).encode()
    symbolic = b"\x00\xa3\x11amqp:amqp-value:*" + value[3:]
    long_code = b"\x00\x80" + (0x77).to_bytes(8, "big") + value[3:]
    for payload in (symbolic, long_code):
        msg = parse_message(payload)
        assert msg.body_code == AMQP_VALUE
        assert msg.body() == AmqpValue({"a": 1})
        assert msg.bare == payload


def test_no_body_and_sequence_body() -> None:
    only_header = encode_message(header=Header(durable=False))
    msg = parse_message(only_header)
    assert msg.body() is None
    assert msg.bare == b""
    seq = encode_message([AmqpSequence([1, 2]), AmqpSequence(["x"])])
    assert parse_message(seq).body() == [AmqpSequence([1, 2]), AmqpSequence(["x"])]
    assert parse_message(seq).data() == b""


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (Properties().encode() + Header().encode(), "out of order"),
        (Header().encode() + Header().encode(), "out of order or repeated"),
        (Data(b"x").encode() + AmqpValue(1).encode(), "mixed"),
        (AmqpValue(1).encode() + AmqpValue(2).encode(), "repeated"),
        (Data(b"x").encode() + b"\x00\x53\x78\xc1\x01\x00" + Data(b"y").encode(), "misplaced"),
        (b"\x00\x53\x10\x45", "not a message section"),
        (b"\x00\xa3\x03x:y\x40", "unknown section descriptor"),
        (b"\x40", "not the start of a described section"),
        (Data(b"abc").encode()[:-1], "past the end"),
        (MessageAnnotations({}).encode()[:-1], "past the end"),
    ],
)
def test_bad_section_sequences(payload: bytes, why: str) -> None:
    with pytest.raises(DecodeError, match=why):
        parse_message(payload)


def test_lazy_decoding_reports_bad_sections() -> None:
    # A section whose extent is right but whose content is wrong for its type.
    payload = b"\x00\x53\x74" + encode_value([1])
    msg = parse_message(payload)
    with pytest.raises(DecodeError, match="expected map"):
        msg.application_properties()
    assert ApplicationProperties({ULong(1): None}).encode()
