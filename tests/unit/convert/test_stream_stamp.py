"""The stream headers: spliced into 0-9-1's encoded properties as int64 (``l``) fields, and
into a 1.0 message's annotations as longs (the same as the general re-encoding)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10 import FORMAT, Amqp10View, amqp10_message
from leveret.convert.amqp10_amqp091 import amqp091_parts, properties_of
from leveret.convert.stream_stamp import stamp_stream, stream_headers
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.fieldtable import decode_table
from leveret.protocol.amqp10 import (
    AmqpValue,
    Data,
    Header,
    Properties,
    Symbol,
    UByte,
    parse_message,
)
from leveret.protocol.amqp10.message import encode_message

if TYPE_CHECKING:
    from leveret.protocol.amqp10.types import Value

CASES = [
    BasicProperties(),
    BasicProperties(content_type="text/plain"),
    BasicProperties(content_type="a", content_encoding="gzip", delivery_mode=2, priority=3),
    BasicProperties(headers={"k": "v", "n": 1}, message_id="id", app_id="app"),
    BasicProperties(content_encoding="x", headers={}, timestamp=None, reply_to="r"),
]


@pytest.mark.parametrize("props", CASES)
def test_splice_adds_both_headers_and_keeps_every_other_property(props: BasicProperties) -> None:
    raw = stream_headers(props.encode(), 5, 1_700_000_000_123)
    decoded = BasicProperties.decode(raw)
    assert decoded.headers == {
        **(props.headers or {}),
        "x-stream-offset": 5,
        "x-stream-timestamp": 1_700_000_000_123,
    }
    for name in ("content_type", "content_encoding", "delivery_mode", "priority", "reply_to"):
        assert getattr(decoded, name) == getattr(props, name)
    assert decoded.message_id == props.message_id


def test_values_are_int64_on_the_wire() -> None:
    raw = stream_headers(BasicProperties().encode(), 0, 7)
    table = raw[2:]
    assert b"\x0fx-stream-offsetl" + (0).to_bytes(8, "big") in table
    assert b"\x12x-stream-timestampl" + (7).to_bytes(8, "big") in table
    assert decode_table(table, 0)[0] == {"x-stream-offset": 0, "x-stream-timestamp": 7}


def test_publisher_set_stream_headers_are_replaced_not_duplicated() -> None:
    props = BasicProperties(headers={"x-stream-offset": 99, "other": True})
    message = stamp_stream(wire_message("", "q", props.encode(), b"b"), 3, 4)
    raw = message.raw_properties
    assert raw.count(b"x-stream-offset") == 1
    assert message.headers == {"other": True, "x-stream-offset": 3, "x-stream-timestamp": 4}


@pytest.mark.parametrize(
    "props",
    # The last is longer than the cache keeps: spliced each time.
    [*CASES, BasicProperties(headers={"big": "v" * 2000}, delivery_mode=2)],
)
def test_a_cached_stamp_gives_the_splice_of_its_own_properties(props: BasicProperties) -> None:
    raw = props.encode()
    for offset, timestamp in ((0, 1), (5, 1_700_000_000_123), (2**62, 2**40)):
        message = stamp_stream(wire_message("x", "k", raw, b"body"), offset, timestamp)
        assert message.raw_properties == stream_headers(raw, offset, timestamp)
        assert (message.exchange, message.routing_key, message.body) == ("x", "k", b"body")


def test_the_stamp_changes_with_the_properties() -> None:
    # Stamps of one encoding, then another, then the first again: each its own splice.
    first, second = BasicProperties(delivery_mode=2), BasicProperties(headers={"k": 1})
    for props in (first, second, first):
        raw = props.encode()
        message = stamp_stream(wire_message("", "q", raw, b""), 7, 8)
        assert BasicProperties.decode(message.raw_properties) == dataclasses.replace(
            props, headers={**(props.headers or {}), "x-stream-offset": 7, "x-stream-timestamp": 8}
        )


def test_a_stamp_with_the_names_elsewhere_is_not_taken_for_a_publisher_set_one() -> None:
    props = BasicProperties(correlation_id="\x0fx-stream-offsetl", headers={"a": 1})
    raw = props.encode()
    for offset in (1, 2):
        message = stamp_stream(wire_message("", "q", raw, b""), offset, 3)
        assert message.raw_properties == stream_headers(raw, offset, 3)
        assert message.headers == {"a": 1, "x-stream-offset": offset, "x-stream-timestamp": 3}
        assert BasicProperties.decode(message.raw_properties).correlation_id == props.correlation_id


# -- 1.0 form ---------------------------------------------------------------------------------

_SECTIONS = {
    "nothing": {},
    "a header": {"header": Header(durable=True, priority=UByte(2))},
    "annotations": {"message_annotations": {Symbol("x-a"): "b", Symbol("n"): 1}},
    "big annotations (map32)": {"message_annotations": {Symbol("x-big"): "v" * 300}},
    "everything": {
        "header": Header(durable=False),
        "message_annotations": {Symbol("x-a"): "b"},
        "properties": Properties(message_id="m", group_id="g"),
        "application_properties": {"k": "v"},
    },
    "publisher-set stream headers": {
        "message_annotations": {Symbol("x-stream-offset"): 99, Symbol("x-a"): "b"},
        "application_properties": {"x-stream-timestamp": 5},
    },
}


@pytest.mark.parametrize("sections", list(_SECTIONS.values()), ids=list(_SECTIONS))
@pytest.mark.parametrize("offset", [0, 1, 2**40])
def test_a_1_0_message_gets_both_as_annotations(sections: dict[str, Any], offset: int) -> None:
    payload = encode_message(Data(b"body"), **sections)
    message = amqp10_message("ex", "rk", payload)
    stamped = stamp_stream(message, offset, 1_700_000_000_123)
    assert stamped.format == FORMAT
    assert stamped.body == message.body
    assert (stamped.exchange, stamped.routing_key) == ("ex", "rk")
    headers = dict(message.headers or {})
    headers.pop("x-stream-timestamp", None)
    assert stamped.headers == {
        **headers,
        "x-stream-offset": offset,
        "x-stream-timestamp": 1_700_000_000_123,
    }
    parsed = parse_message(stamped.raw_properties + stamped.body)
    assert parsed.message_annotations()["x-stream-offset"] == offset
    assert parsed.properties() == parse_message(payload).properties()
    assert parsed.header() == parse_message(payload).header()
    kept = dict(parse_message(payload).application_properties())
    kept.pop("x-stream-timestamp", None)  # moved to the annotations, with the new value
    assert parsed.application_properties() == kept


def test_the_1_0_splice_is_the_general_re_encoding() -> None:
    payload = encode_message(Data(b"x"), message_annotations={Symbol("x-a"): "b"})
    message = amqp10_message("", "q", payload)
    spliced = stamp_stream(message, 7, 8)
    general = message.replace(
        headers={**(message.headers or {}), "x-stream-offset": 7, "x-stream-timestamp": 8}
    )
    assert spliced.headers == general.headers
    assert spliced.hints == general.hints


@pytest.mark.parametrize("sections", list(_SECTIONS.values()), ids=list(_SECTIONS))
@pytest.mark.parametrize("body", [Data(b"body"), AmqpValue("v")], ids=["data", "value"])
def test_a_stamped_1_0_message_reaches_0_9_1_as_its_own_conversion(
    sections: dict[str, Any], body: Any
) -> None:
    """A stream reader's 0-9-1 form of a stamped 1.0 message is made once per head and
    filled in per message: the same bytes as converting each message on its own."""
    message = amqp10_message("ex", "rk", encode_message(body, **sections))
    for offset, timestamp in ((0, 0), (7, 1_700_000_000_123), (2**40, 5)):
        stamped = stamp_stream(message, offset, timestamp)
        raw, got_body = amqp091_parts(stamped)
        view = Amqp10View(stamped.raw_properties)
        expected = properties_of(view, amqp_body=not isinstance(body, Data)).encode()
        assert raw == expected
        headers = BasicProperties.decode(raw).headers or {}
        assert (headers["x-stream-offset"], headers["x-stream-timestamp"]) == (offset, timestamp)
        assert got_body == (b"body" if isinstance(body, Data) else message.body)


def test_the_stamp_s_bytes_inside_a_value_are_not_taken_for_the_stamp() -> None:
    # A publisher's binary holding what the stamp writes: converted as it is, not refilled.
    fake = b"\xa3\x0fx-stream-offset\x81" + bytes(8) + b"\xa3\x12x-stream-timestamp\x81"
    fake += bytes(8)
    cases: list[dict[Value, Value]] = [
        {Symbol("x-fake"): fake},
        {Symbol("x-fake"): fake, Symbol("x-b"): 1},
    ]
    for ma in cases:
        message = amqp10_message("", "q", encode_message(Data(b"x"), message_annotations=ma))
        for offset in (3, 4):
            stamped = stamp_stream(message, offset, 9)
            raw, _ = amqp091_parts(stamped)
            expected = properties_of(Amqp10View(stamped.raw_properties), amqp_body=False).encode()
            assert raw == expected
