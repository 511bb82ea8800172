"""AMQP 0-10 message headers <-> the core's ``Message``; the 0-10 front end imports it.

The core's ``Message`` keeps its properties as encoded AMQP 0-9-1 basic properties (the
store and every 0-9-1 consumer read them as they are), so a 0-10 transfer is mapped onto
them when it arrives and a delivery to a 0-10 subscriber maps them back. This module is that
pair of conversions and nothing else, so that it can be replaced by the general "message in
one protocol, consumed in another" design (RabbitMQ's ``mc``) without touching the front end.

==========================================  =====================================
0-10 (delivery-properties / message-props)  0-9-1 basic property
==========================================  =====================================
content-type, content-encoding              content-type, content-encoding
application-headers                         headers (values converted, below)
delivery-mode, priority                     delivery-mode, priority
ttl (ms)                                    expiration (ms as text)
timestamp (s)                               timestamp (s)
message-id (uuid)                           message-id (its canonical text)
correlation-id, user-id, app-id (vbin16)    correlation-id, user-id, app-id (text)
reply-to {exchange, routing-key}            reply-to: ``routing-key`` when the exchange
                                            is empty, else ``exchange/routing-key``
header ``x-amqp-0-9-1-type``                type
header ``x-amqp-0-9-1-cluster-id``          cluster-id
header ``x-amqp-0-9-1-message-id``          a message-id that is not a UUID
==========================================  =====================================

0-10 fields with no 0-9-1 counterpart are not kept: ``content-length`` (the body says it),
``expiration`` (the broker's own, recomputed from ``ttl``), ``discard-unroutable``,
``immediate``, ``resume-id``/``resume-ttl``. Map values: a UUID becomes its text, an array
a list, a typed value its plain value, a struct is dropped (0-9-1 tables have neither).
Text fields sent as binary decode as UTF-8, or Latin-1 when they are not UTF-8.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import TYPE_CHECKING

from leveret.convert.amqp091 import decode_properties, wire_message
from leveret.convert.formats import AMQP091, amqp091_parts
from leveret.protocol.amqp010._generated.structs import (
    DeliveryProperties,
    MessageProperties,
    ReplyTo,
)
from leveret.protocol.amqp010.ops import encode_header
from leveret.protocol.amqp010.types import Array, Struct, Typed
from leveret.protocol.amqp091._generated.properties import BasicProperties

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from leveret.model.message import Message
    from leveret.protocol.amqp010.types import Value
    from leveret.protocol.amqp091.fieldtable import FieldValue

__all__ = ["TYPE_HEADER", "delivery_header", "delivery_parts", "transfer_message"]

TYPE_HEADER = "x-amqp-0-9-1-type"
CLUSTER_ID_HEADER = "x-amqp-0-9-1-cluster-id"
MESSAGE_ID_HEADER = "x-amqp-0-9-1-message-id"


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _to_091(value: Value) -> FieldValue | Struct:
    if isinstance(value, Typed):
        return _to_091(value.value)
    if isinstance(value, Array):
        return [v for v in (_to_091(i) for i in value.items) if not isinstance(v, Struct)]
    if isinstance(value, dict):
        return _table_091(value)
    if isinstance(value, list):
        return [v for v in (_to_091(i) for i in value) if not isinstance(v, Struct)]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(
        value, bool | int | float | decimal.Decimal | str | bytes | datetime.datetime | Struct
    ):
        return value
    if value is None:
        return None
    return str(value)


def _table_091(table: Mapping[str, Value]) -> dict[str, FieldValue]:
    out: dict[str, FieldValue] = {}
    for key, value in table.items():
        converted = _to_091(value)
        if not isinstance(converted, Struct):
            out[key] = converted
    return out


def _properties_of(header: Sequence[Struct]) -> BasicProperties:
    dp: DeliveryProperties | None = None
    mp: MessageProperties | None = None
    for struct in header:
        if isinstance(struct, DeliveryProperties):
            dp = struct
        elif isinstance(struct, MessageProperties):
            mp = struct
    props = BasicProperties()
    if dp is not None:
        props.delivery_mode = dp.delivery_mode
        props.priority = dp.priority
        if dp.ttl is not None:
            props.expiration = str(dp.ttl)
        props.timestamp = dp.timestamp
    if mp is not None:
        props.content_type = mp.content_type
        props.content_encoding = mp.content_encoding
        if mp.message_id is not None:
            props.message_id = str(mp.message_id)
        props.correlation_id = _text(mp.correlation_id)
        props.user_id = _text(mp.user_id)
        props.app_id = _text(mp.app_id)
        reply_to = mp.reply_to
        if reply_to is not None:
            exchange, key = reply_to.exchange or "", reply_to.routing_key or ""
            props.reply_to = f"{exchange}/{key}" if exchange else key
        if mp.application_headers is not None:
            headers = _table_091(mp.application_headers)
            for name, field in (
                (TYPE_HEADER, "type"),
                (CLUSTER_ID_HEADER, "cluster_id"),
                (MESSAGE_ID_HEADER, "message_id"),
            ):
                carried = headers.pop(name, None)
                if isinstance(carried, bytes):
                    carried = _text(carried)
                if isinstance(carried, str):
                    setattr(props, field, carried)
            props.headers = headers
    return props


def transfer_message(
    exchange: str, routing_key: str, header: Sequence[Struct], body: bytes
) -> Message:
    """The core's message for a ``message.transfer`` with these header structs."""
    return wire_message(exchange, routing_key, _properties_of(header).encode(), body)


def user_id_of(header: Sequence[Struct]) -> bytes | None:
    """message-properties.user-id, which the broker must check against the login."""
    for struct in header:
        if isinstance(struct, MessageProperties):
            return struct.user_id
    return None


def routing_key_of(header: Sequence[Struct]) -> str:
    for struct in header:
        if isinstance(struct, DeliveryProperties):
            return struct.routing_key or ""
    return ""


def _message_id(text: str) -> uuid.UUID | None:
    if len(text) != 36:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def delivery_header(message: Message, redelivered: bool) -> bytes:
    """The header segment of a ``message.transfer`` delivering ``message``."""
    return delivery_parts(message, redelivered)[0]


def delivery_parts(message: Message, redelivered: bool) -> tuple[bytes, bytes]:
    """(header segment, body) of a ``message.transfer`` delivering ``message``. A message
    kept in another format (published over 1.0) goes through its 0-9-1 form, the one
    mapping the 0-10 side already has (1.0 → 0-9-1 is RabbitMQ's own conversion)."""
    if message.format == AMQP091:
        props = message.properties
        body = message.body
    else:
        raw, body = amqp091_parts(message)
        props = decode_properties(raw)
    assert isinstance(props, BasicProperties)
    dp = DeliveryProperties(
        redelivered=redelivered,
        priority=props.priority,
        delivery_mode=props.delivery_mode,
        timestamp=props.timestamp,
        exchange=message.exchange,
        routing_key=message.routing_key,
    )
    if props.expiration is not None and props.expiration.isdigit():
        dp.ttl = int(props.expiration)
    entries: list[Struct] = [dp]
    headers: dict[str, Value] | None = None
    if props.headers is not None:
        headers = dict(props.headers)  # type: ignore[arg-type]  # 0-9-1 values are 0-10 values
    carried: list[tuple[str, str]] = []
    if props.type is not None:
        carried.append((TYPE_HEADER, props.type))
    if props.cluster_id is not None:
        carried.append((CLUSTER_ID_HEADER, props.cluster_id))
    message_id = None
    if props.message_id is not None:
        message_id = _message_id(props.message_id)
        if message_id is None:
            carried.append((MESSAGE_ID_HEADER, props.message_id))
    if carried:
        headers = dict(headers or {})
        headers.update(carried)
    reply_to = None
    if props.reply_to is not None:
        exchange, sep, key = props.reply_to.partition("/")
        reply_to = ReplyTo(exchange, key) if sep else ReplyTo("", exchange)
    if (
        props.content_type is not None
        or props.content_encoding is not None
        or headers is not None
        or message_id is not None
        or props.correlation_id is not None
        or reply_to is not None
        or props.user_id is not None
        or props.app_id is not None
    ):
        entries.append(
            MessageProperties(
                content_length=len(body),
                message_id=message_id,
                correlation_id=_binary(props.correlation_id),
                reply_to=reply_to,
                content_type=props.content_type,
                content_encoding=props.content_encoding,
                user_id=_binary(props.user_id),
                app_id=_binary(props.app_id),
                application_headers=headers,
            )
        )
    return encode_header(entries), body


def _binary(text: str | None) -> bytes | None:
    return None if text is None else text.encode()
