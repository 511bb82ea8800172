"""The one 0-9-1 <-> 1.0 table (convert/amqp10_amqp091.py): RabbitMQ 4's mapping both ways,
lossless round trips where the table is (hypothesis), agreement with rstream's own 1.0
codec, what earlier streams wrote read back, and values at the edges of either side
converted without an error."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# rstream's vendored AMQP 1.0 codec has no type hints mypy reads.
from rstream._pyamqp.message import Header as RHeader  # type: ignore[attr-defined]
from rstream._pyamqp.message import Properties as RProperties  # type: ignore[attr-defined]
from rstream.amqp import AMQPMessage, amqp_decoder

from leveret.convert.amqp10 import amqp10_message
from leveret.convert.amqp10_amqp091 import amqp091_parts, from_amqp10, sections_of, to_amqp10
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import (
    AmqpValue,
    Data,
    Header,
    Properties,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
)
from leveret.protocol.amqp10.message import encode_message, parse_message

UUID = "6b3e1c2a-1111-4222-8333-444455556666"

FULL = BasicProperties(
    content_type="application/json",
    content_encoding="gzip",
    headers={
        "a": "x",
        "n": 7,
        "big": 2**40,
        "f": 1.5,
        "t": True,
        "b": b"\x00\x01",
        "v": None,
        "x-custom": {"nested": [1, "two"]},
        "CC": ["other-key"],
    },
    delivery_mode=2,
    priority=5,
    correlation_id="c-1",
    reply_to="replies",
    expiration="60000",
    message_id=f"urn:uuid:{UUID}",
    timestamp=1_700_000_000,
    type="order",
    user_id="guest",
    app_id="app",
)


# -- 0-9-1 -> 1.0 ----------------------------------------------------------------------------


def test_0_9_1_to_1_0_is_rabbitmq_4s_table() -> None:
    parsed = parse_message(to_amqp10(FULL, b"payload"))
    header = parsed.header()
    assert header is not None
    assert (header.durable, header.priority, header.ttl) == (True, 5, 60000)
    props = parsed.properties()
    assert props is not None
    assert props.message_id == uuid.UUID(UUID)  # a urn:uuid: id is a UUID
    assert (props.correlation_id, props.reply_to, props.user_id) == ("c-1", "replies", b"guest")
    assert (props.content_type, props.content_encoding) == ("application/json", "gzip")
    assert (props.creation_time, props.group_id) == (1_700_000_000_000, "app")
    annotations = parsed.message_annotations()
    assert annotations == {
        "x-custom": {"nested": [1, "two"]},
        "x-cc": ["other-key"],
        "x-basic-type": "order",
    }
    # Other headers are application properties; 1.0 forbids nested values there.
    assert parsed.application_properties() == {
        "a": "x",
        "n": 7,
        "big": 2**40,
        "f": 1.5,
        "t": True,
        "b": b"\x00\x01",
        "v": None,
    }
    assert parsed.data() == b"payload"


def test_a_plain_message_is_a_header_and_a_data_section() -> None:
    data = to_amqp10(BasicProperties(delivery_mode=2), b"hi")
    assert data == bytes.fromhex("005370c0020141") + bytes.fromhex("005375a0026869")
    assert from_amqp10(data) == (BasicProperties(delivery_mode=2), b"hi")


def test_what_1_0_has_no_place_for_is_left_out_or_kept_aside() -> None:
    props = BasicProperties(
        cluster_id="cl",  # left out, as RabbitMQ 4
        expiration="soon",  # not a number: left out
        content_type="tëxt/plain",  # a symbol holds ASCII only: an annotation
        headers={"x-exchange": "mine", "x-ünï": "v", "arr": [1]},
    )
    parsed = parse_message(sections_of(props, b"", exchange="e", routing_key="k"))
    header = parsed.header()
    assert header is not None
    assert header.ttl is None
    annotations = parsed.message_annotations()
    assert annotations["x-exchange"] == "e"  # the broker's, not the publisher's header
    assert annotations["x-basic-content-type"] == "tëxt/plain"
    assert parsed.application_properties() == {"x-ünï": "v"}
    back, _body = from_amqp10(to_amqp10(props, b""))
    assert back.content_type == "tëxt/plain"
    assert back.cluster_id is None


@pytest.mark.parametrize(
    ("expiration", "ttl"), [("0", 0), ("4294967295", 2**32 - 1), ("315360000000", 2**32 - 1)]
)
def test_an_expiration_past_a_uint_is_cut_to_it(expiration: str, ttl: int) -> None:
    header = parse_message(to_amqp10(BasicProperties(expiration=expiration), b"")).header()
    assert header is not None
    assert header.ttl == ttl


def test_a_timestamp_past_1_0s_range_is_left_out() -> None:
    props = parse_message(to_amqp10(BasicProperties(timestamp=2**63), b"")).properties()
    assert props is None or props.creation_time is None


def test_an_amqp_1_0_typed_body_is_sent_as_its_sections() -> None:
    body = encode_message(AmqpValue("text"))
    data = to_amqp10(BasicProperties(type="amqp-1.0"), body)
    parsed = parse_message(data)
    assert parsed.body() == AmqpValue("text")
    assert parsed.message_annotations() == {}


# -- 1.0 -> 0-9-1 ----------------------------------------------------------------------------


def _1_0(**sections: Any) -> bytes:
    return encode_message(sections.pop("body", Data(b"b")), **sections)


def test_1_0_to_0_9_1_is_rabbitmq_4s_table() -> None:
    payload = _1_0(
        header=Header(durable=False, priority=UByte(3), ttl=UInt(500)),
        message_annotations={
            Symbol("x-opt-a"): "b",
            Symbol("plain"): "dropped",
            Symbol("x-cc"): ["k2"],
            Symbol("x-basic-type"): "kind",
            Symbol("x-exchange"): "ex",
            Symbol("x-routing-key"): "rk",
        },
        properties=Properties(
            message_id=uuid.UUID(UUID),
            correlation_id=ULong(42),
            user_id=b"guest",
            reply_to="r",
            content_type=Symbol("text/plain"),
            creation_time=Timestamp(1_700_000_000_999),
            group_id="grp",
            subject="dropped",
        ),
        application_properties={"k": "v"},
    )
    props, body = from_amqp10(payload)
    assert body == b"b"
    assert props == BasicProperties(
        content_type="text/plain",
        headers={"k": "v", "x-opt-a": "b", "CC": ["k2"]},
        delivery_mode=1,
        priority=3,
        correlation_id="42",
        reply_to="r",
        expiration="500",
        message_id=f"urn:uuid:{UUID}",
        timestamp=1_700_000_000,
        type="kind",
        user_id="guest",
        app_id="grp",
    )


def test_ids_0_9_1_cannot_hold_go_to_headers() -> None:
    long_id = "i" * 300
    props, _body = from_amqp10(
        _1_0(properties=Properties(message_id=b"\x00\xff", correlation_id=long_id))
    )
    assert (props.message_id, props.correlation_id) == (None, None)
    assert props.headers == {"x-message-id": b"\x00\xff", "x-correlation-id": long_id}


def test_a_message_without_a_header_is_durable() -> None:
    props, _body = from_amqp10(_1_0())
    assert props.delivery_mode == 2


def test_what_earlier_streams_and_the_spark_sink_wrote_is_read_back() -> None:
    # Leveret's streams before the one table (and the Spark connector's stream sink) wrote
    # RabbitMQ 3.10's annotations; RabbitMQ 4 drops them, Leveret reads them back.
    props, _body = from_amqp10(
        _1_0(
            message_annotations={
                Symbol("x-basic-app-id"): "app",
                Symbol("x-basic-cluster-id"): "cl",
                Symbol("x-basic-content-type"): "tëxt",
                Symbol("x-basic-priority"): UByte(4),
                Symbol("x-basic-delivery-mode"): UByte(1),
                Symbol("x-basic-expiration"): "60000",
            }
        )
    )
    assert (props.app_id, props.cluster_id, props.content_type) == ("app", "cl", "tëxt")
    assert (props.priority, props.delivery_mode, props.expiration) == (4, 1, "60000")
    assert props.headers is None


def test_values_a_field_table_cannot_hold_are_kept_in_one_it_can() -> None:
    payload = _1_0(
        message_annotations={Symbol("x-basic-priority"): 300, Symbol("x-basic-delivery-mode"): -1},
        properties=Properties(creation_time=Timestamp(-5000)),
        application_properties={
            "huge": ULong(2**64 - 1),
            "far": Timestamp(2**62),
            "before": Timestamp(-1),
            "ok": Timestamp(1_000),
        },
    )
    props, _body = from_amqp10(payload)
    assert props.headers == {
        "huge": str(2**64 - 1),
        "far": 2**62,
        "before": -1,
        "ok": datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC),
    }
    assert (props.priority, props.delivery_mode, props.timestamp) == (None, 2, None)
    props.encode()  # and the result encodes


def test_an_amqp_value_body_is_given_as_its_encoded_sections() -> None:
    value = bytes.fromhex("005377a103616263")  # amqp-value "abc"
    assert from_amqp10(value) == (BasicProperties(delivery_mode=2, type="amqp-1.0"), value)


def test_a_0_9_1_consumer_gets_the_conversion_of_each_body_kind() -> None:
    head = encode_message(Data(b""), properties=Properties(message_id="m"))[:-5]
    as_data = amqp10_message("", "q", head + encode_message(Data(b"d")))
    as_value = amqp10_message("", "q", head + encode_message(AmqpValue("v")))
    assert as_data.raw_properties == as_value.raw_properties
    data_raw, data_body = amqp091_parts(as_data)
    value_raw, value_body = amqp091_parts(as_value)
    assert (BasicProperties.decode(data_raw).type, data_body) == (None, b"d")
    assert BasicProperties.decode(value_raw).type == "amqp-1.0"
    assert value_body == encode_message(AmqpValue("v"))
    assert amqp091_parts(as_data) == (data_raw, data_body)  # the same, from the cache


# -- against rstream's 1.0 codec ----------------------------------------------------------------


def test_rstream_reads_what_we_write() -> None:
    message = amqp_decoder(to_amqp10(FULL, b"payload"))
    assert message.body == b"payload"
    assert message.header is not None
    assert message.header.durable
    assert message.properties is not None
    assert message.properties.message_id == uuid.UUID(UUID)
    assert message.properties.group_id == b"app"  # rstream reads strings as bytes
    assert message.properties.content_type == b"application/json"
    assert message.application_properties is not None
    assert message.application_properties[b"a"] == b"x"
    assert message.message_annotations[b"x-basic-type"] == b"order"


def test_we_read_what_rstream_writes() -> None:
    message = AMQPMessage(
        body=b"from rstream",
        header=RHeader(durable=True, priority=3),
        properties=RProperties(message_id="id-9", correlation_id="corr", reply_to="r"),
        application_properties={"k": "v", "n": 12},
        message_annotations={"x-opt-k": "a"},
    )
    props, body = from_amqp10(bytes(message))
    assert body == b"from rstream"
    assert props.delivery_mode == 2
    assert props.priority == 3
    assert props.message_id == "id-9"
    assert props.correlation_id == "corr"
    assert props.headers == {"k": "v", "n": 12, "x-opt-k": "a"}


# -- lossless round trips ------------------------------------------------------------------------

_text = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)
_ascii = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20)
_id = st.one_of(
    _text.filter(lambda s: not s.startswith("urn:uuid:")),
    st.uuids().map(lambda u: f"urn:uuid:{u}"),
)
_when = st.integers(0, 253402300799).map(
    lambda s: datetime.datetime.fromtimestamp(s, tz=datetime.UTC)
)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    _text,
    st.binary(max_size=20),
    _when,
)
_nested = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(_ascii.filter(bool), inner, max_size=3),
    ),
    max_leaves=5,
)
# Header names the table keeps: not the broker's own annotations, not x-basic-* or x-cc
# (the table's), an x- name a symbol can hold for nested values.
_OWN = ("x-exchange", "x-routing-key", "x-amqp091-properties", "x-cc", "CC")


def _kept(name: str) -> bool:
    return bool(name) and name not in _OWN and not name.startswith(("x-basic-", "x-opt-rabbitmq"))


_x_name = _ascii.map(lambda k: "x-" + k).filter(_kept)
_headers = st.dictionaries(_text.filter(_kept), _scalar, max_size=5) | st.dictionaries(
    _x_name, _nested, max_size=3
)


@st.composite
def _lossless_091(draw: st.DrawFn) -> BasicProperties:
    """0-9-1 properties in the table's lossless domain (its docstring)."""
    headers = draw(_headers)
    if draw(st.booleans()):
        headers = {**headers, "CC": draw(st.lists(_text, max_size=3))}

    def maybe(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(st.none() | strategy)

    return BasicProperties(
        content_type=maybe(_text),
        content_encoding=maybe(_text),
        headers=headers or None,
        delivery_mode=draw(st.sampled_from([1, 2])),
        priority=maybe(st.integers(0, 255)),
        correlation_id=maybe(_id),
        reply_to=maybe(_text),
        expiration=maybe(st.integers(0, 2**32 - 1).map(str)),
        message_id=maybe(_id),
        timestamp=maybe(st.integers(0, (2**63 - 1) // 1000)),
        type=maybe(_text.filter(lambda t: t != "amqp-1.0")),
        user_id=maybe(_text),
        app_id=maybe(_text),
    )


@settings(max_examples=300)
@given(_lossless_091(), st.binary(max_size=300))
def test_0_9_1_round_trips_through_1_0(props: BasicProperties, body: bytes) -> None:
    back, got = from_amqp10(to_amqp10(props, body))
    assert got == body
    assert back == props


_simple_10 = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    _text,
    st.binary(max_size=20),
    st.integers(0, 253402300799).map(lambda s: Timestamp(s * 1000)),
)
_id_10 = st.one_of(_text, st.uuids())


@st.composite
def _lossless_10(draw: st.DrawFn) -> bytes:
    """A 1.0 message in the table's lossless domain: a header, data, string or UUID ids, x-
    annotations, application properties of simple values (whole-second timestamps)."""

    def maybe(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(st.none() | strategy)

    creation = maybe(st.integers(0, (2**63 - 1) // 1000))
    return encode_message(
        Data(draw(st.binary(max_size=300))),
        header=Header(
            durable=draw(st.booleans()),
            priority=maybe(st.integers(0, 255).map(UByte)),
            ttl=maybe(st.integers(0, 2**32 - 1).map(UInt)),
        ),
        message_annotations={
            Symbol(k): v for k, v in draw(st.dictionaries(_x_name, _simple_10, max_size=3)).items()
        },
        properties=Properties(
            message_id=maybe(_id_10),
            user_id=maybe(_text.map(str.encode)),
            reply_to=maybe(_text),
            correlation_id=maybe(_id_10),
            content_type=maybe(_ascii.map(Symbol)),
            content_encoding=maybe(_ascii.map(Symbol)),
            creation_time=None if creation is None else Timestamp(creation * 1000),
            group_id=maybe(_text),
        ),
        application_properties=dict(
            draw(
                st.dictionaries(
                    _text.filter(lambda k: not k.startswith("x-")), _simple_10, max_size=4
                )
            )
        ),
    )


def _meaning(payload: bytes) -> tuple[object, ...]:
    parsed = parse_message(payload)
    header = parsed.header()
    assert header is not None
    props = parsed.properties() or Properties()
    return (
        (header.durable, header.priority, header.ttl),
        props,
        parsed.message_annotations(),
        parsed.application_properties(),
        parsed.data(),
    )


@settings(max_examples=300)
@given(_lossless_10())
def test_1_0_round_trips_through_0_9_1(payload: bytes) -> None:
    props, body = from_amqp10(payload)
    assert _meaning(to_amqp10(props, body)) == _meaning(payload)
