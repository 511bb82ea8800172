"""The 1.0 side of ``Message`` and the mappings between 1.0 and 0-9-1: the bare message is
kept byte for byte, what the model reads, changes made by features, both directions."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert.amqp10 import FORMAT, amqp10_message, payload_for_amqp10
from leveret.convert.amqp10_amqp091 import amqp091_parts, from_amqp10, to_amqp10
from leveret.convert.formats import stored_message
from leveret.model.message import (
    HINT_EXPIRATION,
    HINT_HEADERS,
    HINT_PERSISTENT,
    HINT_PRIORITY,
    HINT_USER_ID,
)
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import (
    AmqpValue,
    Data,
    Header,
    Properties,
    Symbol,
    UByte,
    UInt,
    ULong,
)
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.message import encode_message, parse_message
from tests.unit.protocol.amqp10.values import BLOB, SCALARS, TEXT

if TYPE_CHECKING:
    from leveret.protocol.amqp10.types import Value


def _sample() -> bytes:
    return encode_message(
        Data(b"payload"),
        header=Header(durable=True, priority=UByte(4), ttl=UInt(5000)),
        delivery_annotations={Symbol("x-hop"): "only"},
        message_annotations={Symbol("x-opt-a"): "b"},
        properties=Properties(message_id="m1", subject="s", user_id=b"guest"),
        application_properties={"k": "v", "n": 3},
        footer={Symbol("sig"): b"\x01"},
    )


def test_the_bare_message_is_kept_byte_for_byte_and_delivery_annotations_dropped() -> None:
    payload = _sample()
    message = amqp10_message("ex", "rk", payload)
    assert message.format == FORMAT
    sent = payload_for_amqp10(message, False, 0)
    assert parse_message(sent).bare == parse_message(payload).bare
    assert b"x-hop" not in sent
    annotations = parse_message(sent).message_annotations()
    assert annotations == {"x-opt-a": "b", "x-exchange": "ex", "x-routing-key": "rk"}


def test_hints_and_view_follow_rabbitmq_4() -> None:
    message = amqp10_message("", "q", _sample())
    assert message.hints & HINT_PERSISTENT
    assert message.hints & HINT_PRIORITY
    assert message.hints & HINT_EXPIRATION
    assert message.hints & HINT_HEADERS
    view = message.properties
    assert (view.priority, view.expiration, view.delivery_mode) == (4, "5000", 2)
    assert view.user_id == "guest"
    assert view.headers == {"k": "v", "n": 3, "x-opt-a": "b"}
    # No header: durable, as RabbitMQ 4 treats it.
    bare = amqp10_message("", "q", encode_message(Data(b"x")))
    assert bare.hints == HINT_PERSISTENT
    explicit = amqp10_message("", "q", encode_message(Data(b"x"), header=Header(durable=False)))
    assert not explicit.hints & HINT_PERSISTENT


def test_redelivery_rewrites_only_the_header() -> None:
    payload = _sample()
    message = amqp10_message("ex", "rk", payload)
    sent = parse_message(payload_for_amqp10(message, True, 2))
    header = sent.header()
    assert header is not None
    assert (header.first_acquirer, header.delivery_count, header.priority) == (False, 2, 4)
    assert sent.bare == parse_message(payload).bare


def test_dead_lettering_changes_annotations_not_the_bare_message() -> None:
    payload = _sample()
    message = amqp10_message("ex", "rk", payload)
    headers = dict(message.headers or {})
    headers["x-death"] = [{"count": 1, "queue": "q"}]
    changed = message.replace(headers=headers, expiration=None)
    assert changed.format == FORMAT
    again = payload_for_amqp10(changed, False, 0)
    assert parse_message(again).bare == parse_message(payload).bare
    assert changed.properties.expiration is None
    assert changed.headers is not None
    assert changed.headers["x-death"] == [{"count": 1, "queue": "q"}]


def test_the_store_rebuilds_a_message_of_either_format() -> None:
    message = amqp10_message("ex", "rk", _sample())
    back = stored_message("ex", "rk", message.raw_properties, message.body, FORMAT)
    assert back.format == FORMAT
    assert back.hints == message.hints
    assert payload_for_amqp10(back, False, 0) == payload_for_amqp10(message, False, 0)


def test_to_amqp091_maps_every_property() -> None:
    raw, body = amqp091_parts(amqp10_message("ex", "rk", _sample()))
    props = BasicProperties.decode(raw)
    assert body == b"payload"
    assert props.headers == {"k": "v", "n": 3, "x-opt-a": "b"}
    assert (props.delivery_mode, props.priority, props.expiration) == (2, 4, "5000")
    assert (props.message_id, props.user_id) == ("m1", "guest")


def test_a_non_data_body_goes_to_0_9_1_as_encoded_sections() -> None:
    payload = encode_message(AmqpValue({"a": 1}))
    props, body = from_amqp10(payload)
    assert props.type == "amqp-1.0"
    assert body == payload


def test_0_9_1_round_trips_through_1_0() -> None:
    stamp = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    props = BasicProperties(
        content_type="t",
        content_encoding="e",
        headers={"a": 1, "s": "x", "when": stamp, "x-k": "v", "CC": ["c"]},
        delivery_mode=2,
        priority=1,
        correlation_id="c",
        reply_to="r",
        expiration="10",
        message_id="urn:uuid:12345678-1234-5678-1234-567812345678",
        timestamp=17,
        type="ty",
        user_id="u",
        app_id="app",
    )
    back, body = from_amqp10(to_amqp10(props, b"b"))
    assert body == b"b"
    assert back == props


def test_a_malformed_message_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        amqp10_message("", "q", b"\x00\x53\x75\xa0\x05ab")
    with pytest.raises(DecodeError):
        amqp10_message("", "q", encode_message(Data(b"x")) + b"\x00\x53\x73\x45")


@pytest.mark.parametrize(
    "body",
    [
        "005375a10161",  # a data section holding a string
        "00537540",  # ... or null
        "005375e00100",  # ... or an array
        "0053765401",  # an amqp-sequence holding an integer
        "005375a00161005376c0010154",  # data, then a sequence
    ],
)
def test_a_body_section_holding_the_wrong_type_is_refused_at_the_transfer(body: str) -> None:
    # Taken, it would fail only when a 0-9-1 consumer's conversion read it.
    with pytest.raises(DecodeError):
        amqp10_message("", "q", bytes.fromhex(body))


_MESSAGE_IDS = st.one_of(st.none(), TEXT, BLOB, st.integers(0, 2**64 - 1).map(ULong), st.uuids())


@st.composite
def _messages(draw: st.DrawFn) -> bytes:
    """Messages whose sections take both the 8-bit and the 32-bit list, map and binary
    encodings (the split reads their sizes without decoding them)."""
    properties = draw(
        st.one_of(
            st.none(),
            st.builds(
                Properties,
                message_id=_MESSAGE_IDS,
                user_id=st.one_of(st.none(), BLOB),
                subject=st.one_of(st.none(), TEXT),
            ),
        )
    )
    keys = st.sampled_from(["x-a", "x-b" * 90]).map(Symbol)
    annotations: dict[Value, Value] = draw(st.dictionaries(keys, SCALARS))
    application: dict[Value, Value] = draw(st.dictionaries(TEXT, SCALARS, max_size=3))
    return encode_message(
        Data(draw(BLOB)),
        header=draw(st.one_of(st.none(), st.builds(Header, durable=st.booleans()))),
        delivery_annotations={Symbol("x-d"): draw(TEXT)} if draw(st.booleans()) else None,
        message_annotations=annotations,
        properties=properties,
        application_properties=application,
    )


@settings(max_examples=150, deadline=None)
@given(_messages())
def test_the_sections_read_by_size_agree_with_the_full_parser(payload: bytes) -> None:
    message = amqp10_message("", "q", payload)
    parsed = parse_message(payload)
    kept = b"".join(payload[s.start : s.end] for s in parsed.sections if s.code != 0x71)
    assert message.raw_properties + message.body == kept  # all but the delivery-annotations
    properties = parsed.properties()
    user_id = properties.user_id if properties is not None else None
    assert bool(message.hints & HINT_USER_ID) == (user_id is not None)
    sent = parse_message(payload_for_amqp10(message, False, 0))
    assert sent.bare == parsed.bare


@settings(max_examples=100, deadline=None)
@given(_messages(), st.data())
def test_a_cut_or_changed_message_is_taken_or_a_decode_error(
    payload: bytes, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(payload) - 1))
    changed = bytearray(payload)
    changed[cut] = data.draw(st.integers(0, 255))
    for candidate in (payload[:cut], bytes(changed)):
        try:
            message = amqp10_message("", "q", candidate)
        except DecodeError:
            continue
        # What was taken is whole: its sections parse.
        parse_message(message.raw_properties + message.body)


def test_an_x_application_property_kept_unchanged_through_a_change_is_not_lost() -> None:
    message = amqp10_message(
        "", "q", encode_message(Data(b"b"), application_properties={"x-k": 5, "p": 1})
    )
    changed = message.replace(headers={**(message.headers or {}), "x-new": 1})
    assert changed.headers == {"x-k": 5, "p": 1, "x-new": 1}
