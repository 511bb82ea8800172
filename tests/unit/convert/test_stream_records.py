"""0-9-1 messages as AMQP 1.0 and back (convert/stream_records.py): RabbitMQ's mapping, and
agreement with rstream's own AMQP 1.0 codec in both directions."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# rstream's vendored AMQP 1.0 codec has no type hints mypy reads.
from rstream._pyamqp.message import Header, Properties  # type: ignore[attr-defined]
from rstream.amqp import AMQPMessage, amqp_decoder

from leveret.convert.stream_records import MessageFormatError, from_amqp10, to_amqp10
from leveret.protocol.amqp091._generated.properties import BasicProperties

FULL = BasicProperties(
    content_type="application/json",
    content_encoding="gzip",
    headers={"a": "x", "n": 7, "big": 2**40, "f": 1.5, "t": True, "b": b"\x00\x01"},
    delivery_mode=2,
    priority=5,
    correlation_id="c-1",
    reply_to="replies",
    expiration="60000",
    message_id="m-1",
    timestamp=1_700_000_000,
    type="order",
    user_id="guest",
    app_id="app",
    cluster_id="cl",
)


def test_every_basic_property_survives_the_round_trip() -> None:
    props, body = from_amqp10(to_amqp10(FULL, b"payload"))
    assert body == b"payload"
    assert props == FULL


def test_a_plain_persistent_message_is_a_header_and_a_data_section() -> None:
    data = to_amqp10(BasicProperties(delivery_mode=2), b"hi")
    # header [durable=true] + data "hi"
    assert data == bytes.fromhex("005370c0020141") + bytes.fromhex("005375a0026869")
    assert from_amqp10(data) == (BasicProperties(delivery_mode=2), b"hi")


def test_nested_tables_and_arrays_are_left_out_as_rabbitmq_3_10_does() -> None:
    props = BasicProperties(headers={"keep": 1, "table": {"x": 1}, "array": [1, 2]})
    back, _body = from_amqp10(to_amqp10(props, b""))
    assert back.headers == {"keep": 1}


def test_timestamps_and_decimals_in_headers() -> None:
    when = datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)
    back, _body = from_amqp10(to_amqp10(BasicProperties(headers={"when": when}), b""))
    assert back.headers == {"when": int(when.timestamp() * 1000)}


def test_rstream_reads_what_we_write() -> None:
    message = amqp_decoder(to_amqp10(FULL, b"payload"))
    assert message.body == b"payload"
    assert message.header is not None
    assert message.header.durable
    assert message.properties is not None
    assert message.properties.message_id == b"m-1"  # rstream reads strings as bytes
    assert message.properties.content_type == b"application/json"
    assert message.application_properties is not None
    assert message.application_properties[b"a"] == b"x"


def test_we_read_what_rstream_writes() -> None:
    message = AMQPMessage(
        body=b"from rstream",
        header=Header(durable=True, priority=3),
        properties=Properties(message_id="id-9", correlation_id="corr", reply_to="r"),
        application_properties={"k": "v", "n": 12},
    )
    props, body = from_amqp10(bytes(message))
    assert body == b"from rstream"
    assert props.delivery_mode == 2
    assert props.priority == 3
    assert props.message_id == "id-9"
    assert props.correlation_id == "corr"
    assert props.headers == {"k": "v", "n": 12}


def test_an_amqp_value_body_is_given_as_its_encoded_section() -> None:
    value = bytes.fromhex("005377a103616263")  # amqp-value "abc"
    assert from_amqp10(value) == (BasicProperties(), value)


@pytest.mark.parametrize(
    "data",
    [b"\x00\x53", b"\xa1\x05ab", b"\x00\x53\x75\xa0\x09short", b"\x00\x53\x75\xe0\x00"],
)
def test_bad_bytes_are_a_message_format_error(data: bytes) -> None:
    with pytest.raises(MessageFormatError):
        from_amqp10(data)


simple = st.one_of(
    st.text(max_size=10),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.binary(max_size=10),
    st.floats(allow_nan=False),
)
short = st.none() | st.text(min_size=1, max_size=20)


@settings(max_examples=200)
@given(
    st.builds(
        lambda ct, mid, cid, headers, mode, prio, ts, typ: BasicProperties(
            content_type=ct,
            message_id=mid,
            correlation_id=cid,
            headers=headers or None,
            delivery_mode=mode,
            priority=prio,
            timestamp=ts,
            type=typ,
        ),
        short,
        short,
        short,
        st.dictionaries(st.text(min_size=1, max_size=8), simple, max_size=4),
        st.sampled_from([None, 2]),
        st.none() | st.integers(0, 9),
        st.none() | st.integers(0, 2**40),
        short,
    ),
    st.binary(max_size=300),
)
def test_round_trip_property(props: BasicProperties, body: bytes) -> None:
    back, got = from_amqp10(to_amqp10(props, body))
    assert got == body
    assert back == _as_read_back(props)


def _as_read_back(props: BasicProperties) -> BasicProperties:
    # A header section is written when durable or a priority is set; reading it back
    # gives delivery_mode 1 for a non-durable message that had a priority.
    if props.priority is not None and props.delivery_mode is None:
        return dataclasses.replace(props, delivery_mode=1)
    return props
