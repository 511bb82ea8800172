"""AMQP 0-10 headers <-> the core's message (convert/amqp010.py)."""

from __future__ import annotations

import uuid

from leveret.convert.amqp010 import delivery_header, delivery_parts, transfer_message
from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10 import amqp10_message
from leveret.protocol.amqp010._generated.structs import (
    DeliveryProperties,
    MessageProperties,
    ReplyTo,
)
from leveret.protocol.amqp010.ops import decode_header
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import Data, Header, Properties, UByte, UInt
from leveret.protocol.amqp10.message import encode_message


def test_a_0_10_transfer_maps_to_0_9_1_properties_and_back() -> None:
    message_id = uuid.uuid4()
    header = [
        DeliveryProperties(priority=5, delivery_mode=2, ttl=1500, timestamp=1700000000,
                           routing_key="rk"),
        MessageProperties(
            message_id=message_id,
            correlation_id=b"c\xff",
            reply_to=ReplyTo("amq.direct", "back"),
            content_type="text/plain",
            user_id=b"guest",
            app_id=b"app",
            application_headers={"k": "v", "n": 3, "x-amqp-0-9-1-type": "t"},
        ),
    ]  # fmt: skip
    message = transfer_message("amq.topic", "rk", header, b"body")
    props = message.properties
    assert isinstance(props, BasicProperties)
    assert (props.priority, props.delivery_mode, props.expiration) == (5, 2, "1500")
    assert props.message_id == str(message_id)
    assert props.correlation_id == "cÿ"  # not UTF-8: Latin-1
    assert props.reply_to == "amq.direct/back"
    assert props.type == "t"
    assert props.headers == {"k": "v", "n": 3}
    back = decode_header(delivery_header(message, True))
    dp, mp = back
    assert isinstance(dp, DeliveryProperties)
    assert isinstance(mp, MessageProperties)
    assert (dp.redelivered, dp.exchange, dp.routing_key, dp.ttl) == (True, "amq.topic", "rk", 1500)
    assert mp.message_id == message_id
    assert mp.reply_to == ReplyTo("amq.direct", "back")
    assert mp.application_headers == {"k": "v", "n": 3, "x-amqp-0-9-1-type": "t"}
    assert mp.content_length == 4


def test_a_bare_message_gets_delivery_properties_only() -> None:
    message = wire_message("", "q", BasicProperties().encode(), b"abcdefgh")
    header = delivery_header(message, False)
    [dp] = decode_header(header)
    assert dp == DeliveryProperties(exchange="", routing_key="q")
    # Qpid's byte credit count for this message: header + body.
    assert len(header) + 8 == 19


def test_a_0_9_1_message_id_that_is_not_a_uuid_travels_in_a_header() -> None:
    raw = BasicProperties(message_id="order-1", reply_to="plain-queue").encode()
    _dp, mp = decode_header(delivery_header(wire_message("", "q", raw, b""), False))
    assert isinstance(mp, MessageProperties)
    assert mp.message_id is None
    assert mp.application_headers == {"x-amqp-0-9-1-message-id": "order-1"}
    assert mp.reply_to == ReplyTo("", "plain-queue")
    again = transfer_message("", "q", [mp], b"")
    assert again.properties.reply_to == "plain-queue"
    assert isinstance(again.properties, BasicProperties)
    assert again.properties.message_id == "order-1"


def test_a_message_published_over_1_0_is_delivered_through_its_0_9_1_form() -> None:
    payload = encode_message(
        Data(b"payload"),
        header=Header(durable=True, priority=UByte(4), ttl=UInt(5000)),
        properties=Properties(message_id="m1", correlation_id="c1", content_type="text/plain"),
        application_properties={"k": "v"},
    )
    header, body = delivery_parts(amqp10_message("amq.direct", "rk", payload), False)
    assert body == b"payload"
    dp, mp = decode_header(header)
    assert isinstance(dp, DeliveryProperties)
    assert isinstance(mp, MessageProperties)
    assert (dp.priority, dp.delivery_mode, dp.ttl, dp.routing_key) == (4, 2, 5000, "rk")
    assert (mp.correlation_id, mp.content_type, mp.content_length) == (b"c1", "text/plain", 7)
    assert mp.application_headers == {"k": "v", "x-amqp-0-9-1-message-id": "m1"}
