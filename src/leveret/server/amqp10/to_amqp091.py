"""AMQP 1.0 → AMQP 0-9-1: what a 0-9-1 consumer gets of a message published over 1.0
(RabbitMQ 4's ``mc_amqpl:convert_from(mc_amqp, ...)``). Converted only when such a consumer
takes the message; the message itself stays in 1.0 form.

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

Only the 0-9-1 glue (``server/formats.py``) and the stream glue import it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import Data, Properties
from leveret.protocol.amqp10.message import DATA, FOOTER
from leveret.protocol.amqp10.types import decode_value
from leveret.server.amqp10.message import Amqp10View, field_value, split_payload

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.protocol.amqp091.fieldtable import FieldValue
    from leveret.protocol.amqp10.types import Value

__all__ = ["AMQP10_TYPE", "amqp091_parts", "from_amqp10", "properties_of"]

AMQP10_TYPE = "amqp-1.0"


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
