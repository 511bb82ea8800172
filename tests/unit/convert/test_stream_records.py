"""What a stream stores and what its readers get back (convert/stream_records.py): a 0-9-1
publish as the one table's sections plus its own property bytes (read back byte for byte),
a 1.0 or stream-protocol publish as it came (read back in 1.0 form, converted only for a
0-9-1 reader), records of the earlier format, and bytes that are no message."""

from __future__ import annotations

import pytest
from rstream._pyamqp.message import Properties as RProperties  # type: ignore[attr-defined]
from rstream.amqp import AMQPMessage, amqp_decoder

from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10 import payload_for_amqp10
from leveret.convert.amqp10_amqp091 import to_amqp10
from leveret.convert.formats import AMQP091, AMQP10, amqp091_parts
from leveret.convert.stream_records import (
    RECORDS,
    MessageFormatError,
    message_of,
    record_of,
)
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import Data, Header, Symbol, parse_message
from leveret.protocol.amqp10.message import encode_message

PROPS = BasicProperties(
    content_type="text/plain",
    headers={"k": "v", "x-stream-producer": "p", "nested": {"a": [1]}},
    delivery_mode=2,
    message_id="m-1",
    app_id="app",
    cluster_id="cl",
)


def test_a_0_9_1_publish_is_stored_with_the_tables_sections_and_its_own_bytes() -> None:
    raw = PROPS.encode()
    record = record_of(wire_message("amq.direct", "key", raw, b"body"))
    parsed = parse_message(record)
    annotations = parsed.message_annotations()
    # The stored form's three annotations first, then the table's.
    assert list(annotations)[:3] == ["x-exchange", "x-routing-key", "x-amqp091-properties"]
    assert annotations["x-amqp091-properties"] == raw
    assert annotations["x-stream-producer"] == "p"  # an x- header: an annotation
    assert parsed.application_properties() == {"k": "v"}
    assert parsed.data() == b"body"
    # What a stream-protocol reader (rstream) sees is what a 1.0 consumer gets.
    seen = amqp_decoder(record)
    assert seen.properties.group_id == b"app"
    assert seen.properties.message_id == b"m-1"
    # A 0-9-1 reader gets the publish back byte for byte, nested table and cluster-id kept.
    message = message_of(record, "s")
    assert message.format == AMQP091
    assert (message.exchange, message.routing_key, message.raw_properties) == (
        "amq.direct",
        "key",
        raw,
    )
    assert message.body == b"body"


def test_a_1_0_publish_is_stored_and_read_back_as_it_came() -> None:
    payload = encode_message(
        Data(b"from 1.0"),
        header=Header(durable=True),
        message_annotations={Symbol("x-opt-k"): "a", Symbol("plain"): 1},
    )
    record = RECORDS.entry(message_of(payload, "s"))
    assert b"".join(record[1:]) == payload
    message = message_of(payload, "s")
    assert message.format == AMQP10
    assert (message.exchange, message.routing_key) == ("", "s")  # routed by the stream
    # A 1.0 reader gets every section as stored (only the routing annotations added) ...
    sent = parse_message(payload_for_amqp10(message, False, 0))
    assert sent.message_annotations() == {
        "x-opt-k": "a",
        "plain": 1,
        "x-exchange": "",
        "x-routing-key": "s",
    }
    # ... and a 0-9-1 reader the one table's conversion.
    raw, body = amqp091_parts(message)
    assert body == b"from 1.0"
    assert BasicProperties.decode(raw).headers == {"x-opt-k": "a"}


def test_routing_annotations_of_a_record_are_its_exchange_and_routing_key() -> None:
    record = to_amqp10(BasicProperties(), b"x")
    annotated = encode_message(
        Data(b"x"),
        message_annotations={Symbol("x-exchange"): "ex", Symbol("x-routing-key"): "rk"},
    )
    assert (message_of(record, "s").exchange, message_of(record, "s").routing_key) == ("", "s")
    message = message_of(annotated, "s")
    assert (message.exchange, message.routing_key) == ("ex", "rk")


def test_a_stream_protocol_client_s_message_reads_as_rstream_wrote_it() -> None:
    sent = AMQPMessage(body=b"rs", properties=RProperties(message_id="id", group_id="g"))
    message = message_of(bytes(sent), "s")
    raw, body = amqp091_parts(message)
    props = BasicProperties.decode(raw)
    assert (props.message_id, props.app_id, body) == ("id", "g", b"rs")


def test_a_record_of_the_earlier_table_reads_back() -> None:
    # Before the one table a 0-9-1 publish was stored with a header only when needed and
    # RabbitMQ 3.10's x-basic-* annotations after the property bytes: read byte for byte.
    raw = PROPS.encode()
    items = b"".join(
        _sym(name) + value
        for name, value in (
            ("x-exchange", b"\xa1\x02ex"),
            ("x-routing-key", b"\xa1\x02rk"),
            ("x-amqp091-properties", b"\xa0" + bytes((len(raw),)) + raw),
            ("x-basic-app-id", b"\xa1\x03app"),
        )
    )
    size_count = (len(items) + 4).to_bytes(4, "big") + (8).to_bytes(4, "big")
    record = bytes.fromhex("005372d1") + size_count + items + bytes.fromhex("005375a0026869")
    message = message_of(record, "s")
    assert message.format == AMQP091
    assert (message.exchange, message.routing_key) == ("ex", "rk")
    assert (message.raw_properties, message.body) == (raw, b"hi")


def _sym(name: str) -> bytes:
    return b"\xa3" + bytes((len(name),)) + name.encode()


@pytest.mark.parametrize(
    "data",
    [b"\x00\x53", b"\xa1\x05ab", b"\x00\x53\x75\xa0\x09short", b"\x00\x53\x75\xe0\x00"],
)
def test_bytes_that_are_no_message(data: bytes) -> None:
    with pytest.raises(MessageFormatError):
        message_of(data, "s")
    # A reader gets them as the body of a message without properties.
    (message,) = RECORDS.messages(len(data).to_bytes(4, "big") + data, "s")
    assert message is not None
    assert (message.format, message.raw_properties, message.body) == (AMQP091, b"\x00\x00", data)
