"""The one AMQP 0-9-1 <-> AMQP 1.0 table, both ways: RabbitMQ 4's (``mc_amqpl``'s
``convert_from(mc_amqp, ...)`` and ``convert_to(mc_amqp, ...)``). What a 0-9-1 consumer gets
of a message published over 1.0, what a 1.0 consumer gets of one published over 0-9-1 (or
any protocol of the 0-x family, which keep 0-9-1's form), and what a stream stores for a
0-9-1 publish (``stream_records.py``). Converted only when a consumer of the other protocol
takes the message; the message itself stays in the form it came in.

AMQP 1.0 -> 0-9-1
-----------------
==============================  ===========================================================
AMQP 1.0                        0-9-1 basic property
==============================  ===========================================================
header durable                  delivery-mode 2 (1 when durable is false; absent: 2, as
                                RabbitMQ 4 treats a message without a header as durable)
header priority / ttl           priority / expiration (ms, as a string)
properties message-id,          message-id, correlation-id: strings of up to 255 octets;
correlation-id                  a UUID as ``urn:uuid:…``, a ulong in decimal; a binary id or
                                a longer string goes to the header ``x-message-id`` /
                                ``x-correlation-id``
properties user-id              user-id (when it is UTF-8 of up to 255 octets)
properties reply-to             reply-to
properties content-type/        content-type / content-encoding
content-encoding
properties creation-time (ms)   timestamp (s)
properties group-id             app-id
application-properties          headers (keys of up to 255 octets)
message-annotations ``x-…``     headers, except the broker's own (``x-exchange``,
                                ``x-routing-key``, ``x-basic-*``); ``x-cc`` → ``CC``
``x-basic-type``                type
body: data sections             the body (sections concatenated)
body: amqp-value/-sequence      the body is the encoded body sections and footer, and type
                                is ``amqp-1.0``
==============================  ===========================================================

AMQP 0-9-1 -> 1.0
-----------------
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
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from leveret.convert.amqp10 import Amqp10View, field_value, split_payload, value_of_field
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import (
    Data,
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
from leveret.protocol.amqp10.message import DATA, FOOTER
from leveret.protocol.amqp10.types import decode_value

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.protocol.amqp091.fieldtable import FieldValue
    from leveret.protocol.amqp10.types import Value

__all__ = [
    "AMQP10_TYPE",
    "amqp091_parts",
    "from_amqp10",
    "payload_from_amqp091",
    "properties_of",
    "sections_of",
    "to_amqp10",
]

AMQP10_TYPE = "amqp-1.0"
"""0-9-1 ``type`` of a message whose body is encoded 1.0 body sections (not data)."""

# -- AMQP 1.0 -> 0-9-1 ------------------------------------------------------------------------


def _shortstr(value: object) -> str | None:
    if isinstance(value, str) and len(value.encode()) <= 255:
        return str(value)
    return None


def _message_id(value: Value, header: str, headers: dict[str, FieldValue]) -> str | None:
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return f"urn:uuid:{value}"
    if isinstance(value, bytes):
        headers[header] = bytes(value)
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, str):
        short = _shortstr(value)
        if short is None:
            headers[header] = str(value)
        return short
    return None


def _annotation(annotations: dict[Value, Value], key: str) -> Value:
    return annotations.get(key)


def properties_of(view: Amqp10View, *, amqp_body: bool) -> BasicProperties:
    """The 0-9-1 properties of a 1.0 message (``amqp_body``: its body is not data)."""
    header = view.header
    props = view.props or Properties()
    annotations = view.annotations
    headers: dict[str, FieldValue] = {}
    for key, value in view.app_properties.items():
        if isinstance(key, str) and len(key.encode()) <= 255:
            headers[str(key)] = field_value(value)  # type: ignore[assignment]
    for key, value in annotations.items():
        if not isinstance(key, str) or not key.startswith("x-") or len(key.encode()) > 255:
            continue
        if key == "x-cc":
            headers["CC"] = field_value(value)  # type: ignore[assignment]
        elif key in ("x-exchange", "x-routing-key", "x-opt-rabbitmq-received-time") or (
            key.startswith("x-basic-")
        ):
            continue
        else:
            headers[str(key)] = field_value(value)  # type: ignore[assignment]
    message_id = _message_id(props.message_id, "x-message-id", headers)
    correlation_id = _message_id(props.correlation_id, "x-correlation-id", headers)
    if header is not None and header.durable is not None:
        delivery_mode = 2 if header.durable else 1
    else:
        mode = _annotation(annotations, "x-basic-delivery-mode")
        delivery_mode = int(mode) if isinstance(mode, int) else 2
    priority: int | None = None
    if header is not None and header.priority is not None:
        priority = header.priority
    else:
        p = _annotation(annotations, "x-basic-priority")
        priority = int(p) if isinstance(p, int) and not isinstance(p, bool) else None
    expiration: str | None = None
    if header is not None and header.ttl is not None:
        expiration = str(header.ttl)
    else:
        e = _annotation(annotations, "x-basic-expiration")
        expiration = _shortstr(e)
    kind = AMQP10_TYPE if amqp_body else _shortstr(_annotation(annotations, "x-basic-type"))
    user_id: str | None = None
    if props.user_id is not None:
        try:
            user_id = _shortstr(bytes(props.user_id).decode())
        except UnicodeDecodeError:
            user_id = None
    creation = props.creation_time
    return BasicProperties(
        content_type=_shortstr(props.content_type),
        content_encoding=_shortstr(props.content_encoding),
        headers=headers or None,
        delivery_mode=delivery_mode,
        priority=priority,
        correlation_id=correlation_id,
        reply_to=_shortstr(props.reply_to),
        expiration=expiration,
        message_id=message_id,
        timestamp=None if creation is None else int(creation) // 1000,
        type=kind,
        user_id=user_id,
        app_id=_shortstr(props.group_id),
    )


def _body(body: bytes) -> tuple[bytes, bool]:
    """(0-9-1 body, whether it is the encoded 1.0 body) of a 1.0 message's body sections."""
    if not body:
        return b"", False
    if body[0] == 0 and body[1] == 0x53 and body[2] == DATA:
        parts: list[bytes] = []
        off = 0
        n = len(body)
        while off < n:
            if body[off + 2] == FOOTER:
                break
            value, off = decode_value(body, off)
            assert isinstance(value, Data)
            parts.append(value.value)
        return (parts[0] if len(parts) == 1 else b"".join(parts)), False
    return body, True


def amqp091_parts(message: Message) -> tuple[bytes, bytes]:
    """(encoded basic properties, body) of a 1.0 ``message`` for a 0-9-1 consumer."""
    body, amqp_body = _body(message.body)
    view = message.properties
    assert isinstance(view, Amqp10View)
    return properties_of(view, amqp_body=amqp_body).encode(), body


def from_amqp10(payload: bytes) -> tuple[BasicProperties, bytes]:
    """A whole 1.0 message (sections as on the wire or in a stream) as 0-9-1 properties and
    body (the stream protocol's readers and writers)."""
    raw, body = split_payload(payload)
    converted, amqp_body = _body(body)
    return properties_of(Amqp10View(raw), amqp_body=amqp_body), converted


# -- AMQP 0-9-1 -> 1.0 ------------------------------------------------------------------------

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
