"""AMQP 0-9-1 → AMQP 1.0: what a 1.0 consumer gets of a message published over 0-9-1
(RabbitMQ 4's ``mc_amqpl:convert_to(mc_amqp, ...)`` and ``mc_amqp:protocol_state``).
Converted only when such a consumer takes the message.

==============================  ===========================================================
0-9-1 basic property            AMQP 1.0
==============================  ===========================================================
delivery-mode, priority,        header: durable (delivery-mode 2), priority, ttl (ms);
expiration                      first-acquirer (not redelivered), delivery-count
message-id, correlation-id      properties: message-id, correlation-id (``urn:uuid:…`` as a
                                UUID, otherwise a string)
user-id                         properties: user-id (binary)
reply-to                        properties: reply-to
content-type, content-encoding  properties: content-type, content-encoding (symbols)
timestamp (s)                   properties: creation-time (ms)
app-id                          properties: group-id
type                            message annotation ``x-basic-type`` (``amqp-1.0``: the body
                                already is encoded 1.0 sections and is sent as it is)
headers ``x-…``                 message annotations (symbols)
header ``CC`` (an array)        message annotation ``x-cc``
other headers                   application-properties (nested tables and arrays are left
                                out: 1.0 forbids them there)
exchange, routing key           message annotations ``x-exchange``, ``x-routing-key``
body                            one data section
==============================  ===========================================================

Only the 1.0 front end and the stream glue import it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import (
    Header,
    Properties,
    Symbol,
    Timestamp,
    UByte,
    UInt,
)
from leveret.protocol.amqp10._generated.composites import (
    ApplicationProperties,
    MessageAnnotations,
)
from leveret.server.amqp10.message import value_of_field

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.protocol.amqp10.types import Value

__all__ = ["payload_from_amqp091", "sections_of", "to_amqp10"]

AMQP10_TYPE = "amqp-1.0"
_DATA_PREFIX_SMALL = b"\x00\x53\x75\xa0"
_DATA_PREFIX_LARGE = b"\x00\x53\x75\xb0"


def _id(value: str | None) -> Value:
    if value is None:
        return None
    if value.startswith("urn:uuid:"):
        try:
            return uuid.UUID(value[9:])
        except ValueError:
            return value
    return value


def _data_section(body: bytes) -> bytes:
    n = len(body)
    if n < 256:
        return _DATA_PREFIX_SMALL + bytes((n,)) + body
    return _DATA_PREFIX_LARGE + n.to_bytes(4, "big") + body


def sections_of(
    props: BasicProperties,
    body: bytes,
    *,
    exchange: str | None = None,
    routing_key: str | None = None,
    redelivered: bool = False,
    delivery_count: int = 0,
    first_acquirer: bool | None = None,
) -> bytes:
    """The 1.0 message for 0-9-1 ``props`` and ``body``."""
    headers = props.headers or {}
    expiration = props.expiration
    ttl: int | None = None
    if expiration is not None:
        try:
            ttl = int(expiration)
        except ValueError:
            ttl = None
    header = Header(
        durable=props.delivery_mode == 2,
        priority=None if props.priority is None else UByte(props.priority),
        ttl=None if ttl is None else UInt(ttl),
        first_acquirer=first_acquirer,
        delivery_count=UInt(delivery_count) if redelivered and delivery_count else None,
    )
    annotations: dict[Value, Value] = {}
    app: dict[Value, Value] = {}
    for key, value in headers.items():
        if key.startswith("x-"):
            annotations[Symbol(key)] = value_of_field(value)
        elif key == "CC" and isinstance(value, list):
            annotations[Symbol("x-cc")] = value_of_field(value)
        elif not isinstance(value, (list, dict)):
            app[key] = value_of_field(value)
    if props.type is not None and props.type != AMQP10_TYPE:
        annotations[Symbol("x-basic-type")] = props.type
    if exchange is not None:
        annotations[Symbol("x-exchange")] = exchange
    if routing_key is not None:
        annotations[Symbol("x-routing-key")] = routing_key
    properties = Properties(
        message_id=_id(props.message_id),
        user_id=None if props.user_id is None else props.user_id.encode(),
        reply_to=props.reply_to,
        correlation_id=_id(props.correlation_id),
        content_type=None if props.content_type is None else Symbol(props.content_type),
        content_encoding=(
            None if props.content_encoding is None else Symbol(props.content_encoding)
        ),
        creation_time=None if props.timestamp is None else Timestamp(props.timestamp * 1000),
        group_id=props.app_id,
    )
    pieces = [header.encode()]
    if annotations:
        pieces.append(MessageAnnotations(annotations).encode())
    if properties != _EMPTY_PROPERTIES:
        pieces.append(properties.encode())
    if app:
        pieces.append(ApplicationProperties(app).encode())
    if props.type == AMQP10_TYPE:
        pieces.append(body)
    else:
        pieces.append(_data_section(body))
    return b"".join(pieces)


_EMPTY_PROPERTIES = Properties()


def payload_from_amqp091(message: Message, redelivered: bool, delivery_count: int) -> bytes:
    """The transfer payload of a 0-9-1 ``message`` for a 1.0 consumer."""
    props = message.properties
    assert isinstance(props, BasicProperties)
    return sections_of(
        props,
        message.body,
        exchange=message.exchange,
        routing_key=message.routing_key,
        redelivered=redelivered,
        delivery_count=delivery_count,
        first_acquirer=not redelivered,
    )


def to_amqp10(props: BasicProperties, body: bytes) -> bytes:
    """A 0-9-1 message as a whole 1.0 message (what a stream keeps for its 1.0 readers)."""
    return sections_of(props, body)
