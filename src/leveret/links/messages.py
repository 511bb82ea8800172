"""What links do to a message on its way: the headers a shovel or a federation link adds,
the properties a shovel sets, and the conversions between 0-9-1 and 1.0 (the broker's own
table, ``convert/amqp10_amqp091.py``).

A 0-9-1 message stays as the raw property bytes it came with unless something must change,
so a shovel between two 0-9-1 ends never decodes properties on its default path.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from leveret.convert.amqp10_amqp091 import from_amqp10, to_amqp10
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.fieldtable import Long
from leveret.protocol.amqp10 import (
    ApplicationProperties,
    MessageAnnotations,
    Properties,
    Symbol,
    Timestamp,
    UInt,
    parse_message,
)

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable, FieldValue
    from leveret.protocol.amqp10.types import Value

__all__ = [
    "amqp091_of_amqp10",
    "amqp10_of_amqp091",
    "prepend_table_header",
    "rewrite_amqp10",
    "set_publish_properties",
]

# 1.0 properties a shovel's dest-properties may set, and how each is typed on the wire.
_SYMBOLS = frozenset(("content_type", "content_encoding"))
_TIMESTAMPS = frozenset(("creation_time", "absolute_expiry_time"))
_PROPERTY_FIELDS = frozenset(Properties.FIELDS)


def prepend_table_header(headers: FieldTable | None, name: str, table: FieldTable) -> FieldTable:
    """RabbitMQ's ``rabbit_basic:prepend_table_header``: ``table`` goes first in the array
    header ``name`` (made if missing; a header of another type is kept as
    ``x-invalid-<name>`` and replaced, as RabbitMQ does)."""
    out: dict[str, FieldValue] = dict(headers or {})
    existing = out.get(name)
    if isinstance(existing, list):
        out[name] = [table, *existing]
    else:
        if existing is not None:
            out["x-invalid-" + name] = existing
        out[name] = [table]
    return out


def set_publish_properties(props: BasicProperties, values: dict[str, Any]) -> None:
    """A shovel's ``dest-publish-properties``: each named property set as given."""
    for key, value in values.items():
        if key in ("delivery_mode", "priority", "timestamp") and isinstance(value, int | float):
            setattr(props, key, int(value))
        elif hasattr(props, key) and key != "headers":
            setattr(props, key, value)


def timestamp_header(props: BasicProperties) -> None:
    """``x-shovelled-timestamp``: seconds, as a 64-bit integer (RabbitMQ's ``long``)."""
    headers = dict(props.headers or {})
    headers["x-shovelled-timestamp"] = Long(int(time.time()))
    props.headers = headers


def amqp10_of_amqp091(properties: bytes, body: bytes) -> bytes:
    """A 0-9-1 message (raw properties, body) as a whole 1.0 message."""
    return to_amqp10(BasicProperties.decode(properties), body)


def amqp091_of_amqp10(payload: bytes) -> tuple[BasicProperties, bytes]:
    """A whole 1.0 message as 0-9-1 properties and body (RabbitMQ 3.10's shovel passes only
    the body; Leveret keeps what maps, as its own front ends do)."""
    return from_amqp10(payload)


def _property_value(key: str, value: Any) -> Value:
    if key in _SYMBOLS:
        return Symbol(str(value))
    if key in _TIMESTAMPS:
        return Timestamp(int(value))
    if key == "group_sequence":
        return UInt(int(value))
    if key == "user_id":
        return str(value).encode()
    return value  # type: ignore[no-any-return]


def rewrite_amqp10(
    payload: bytes,
    *,
    properties: dict[str, Any] | None = None,
    application_properties: dict[str, Any] | None = None,
    message_annotations: dict[str, Any] | None = None,
) -> bytes:
    """``payload`` with properties set, application properties and message annotations
    merged in (what a shovel's 1.0 destination adds); the header, the body sections and the
    footer are kept as they are."""
    sections = parse_message(payload)
    data = sections.payload
    pieces: list[bytes] = []
    head = sections.find(0x70)  # header
    if head is not None:
        pieces.append(data[head.start : head.end])
    annotations = sections.message_annotations()
    if message_annotations:
        annotations = {**annotations, **{Symbol(k): v for k, v in message_annotations.items()}}
    if annotations:
        pieces.append(MessageAnnotations(annotations).encode())
    props = sections.properties() or Properties()
    for key, value in (properties or {}).items():
        if key in _PROPERTY_FIELDS:
            setattr(props, key, _property_value(key, value))
    if props != Properties():
        pieces.append(props.encode())
    app: dict[Value, Value] = {
        **sections.application_properties(),
        **cast("dict[Value, Value]", application_properties or {}),
    }
    if app:
        pieces.append(ApplicationProperties(app).encode())
    body = [s for s in sections.sections if s.code >= 0x75]  # data, sequence, value, footer
    if body:
        pieces.append(data[body[0].start : body[-1].end])
    return b"".join(pieces)
