"""The content of the 0-8/0-9 ``file``, ``stream`` and ``message`` classes as the core's
``Message`` and back. The core keeps 0-9-1's basic properties (``amqp091.py``),
so whatever these classes publish is consumed over 0-9-1 (and through it every other front
end), and what any front end published can be delivered to these classes' consumers.

- file, stream and message ``content-type``, ``content-encoding``, ``priority`` and
  ``timestamp``: the same properties; file and stream ``headers`` and message
  ``application-headers``: ``headers``;
- file ``reply-to``, ``message-id``, ``cluster-id``: the same; file ``filename``: the header
  ``x-amqp-0-9-filename``; file content is persistent (``delivery-mode`` 2, the class's
  "reliable storage" rule), stream content transient (1: the class is unreliable);
- message ``delivery-mode``, ``correlation-id``, ``reply-to``, ``message-id``, ``user-id``,
  ``app-id``: the same; ``ttl`` (ms) is ``expiration``; ``expiration`` (absolute, seconds
  since the epoch, used when ``ttl`` is 0) becomes ``expiration`` in ms from now;
  ``transaction-id`` and ``security-token`` are not kept; 0-9-1's ``type`` and
  ``cluster-id``, which a transfer has no field for, travel as the headers
  ``x-amqp-0-9-1-type`` and ``x-amqp-0-9-1-cluster-id`` (and back).

Properties a class cannot carry are left out on delivery (a stream consumer gets no
``reply-to``). Owned by the legacy front end's class modules.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import amqp091_parts
from leveret.protocol.amqp091._generated.properties import BasicProperties

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = [
    "FILENAME_HEADER",
    "basic_properties",
    "file_message",
    "file_properties",
    "stream_message",
    "stream_properties",
    "transfer_fields",
    "transfer_message",
]

FILENAME_HEADER = "x-amqp-0-9-filename"
TYPE_HEADER = "x-amqp-0-9-1-type"
CLUSTER_ID_HEADER = "x-amqp-0-9-1-cluster-id"

PERSISTENT = 2
TRANSIENT = 1


def basic_properties(message: Message) -> tuple[BasicProperties, bytes]:
    """The 0-9-1 properties and body of any core message (converted if published in
    another protocol)."""
    raw, body = amqp091_parts(message)
    return BasicProperties.decode(raw), body


def _headers(value: FieldTable | None) -> dict[str, Any]:
    return dict(value) if value else {}


# -- file ---------------------------------------------------------------------------------


def file_message(exchange: str, routing_key: str, properties: Any, body: bytes) -> Message:
    """A core message from decoded file properties (0-8's or 0-9's ``FileProperties``)."""
    headers = _headers(properties.headers)
    if properties.filename is not None:
        headers[FILENAME_HEADER] = properties.filename
    basic = BasicProperties(
        content_type=properties.content_type,
        content_encoding=properties.content_encoding,
        headers=headers or None,
        delivery_mode=PERSISTENT,
        priority=properties.priority,
        reply_to=properties.reply_to,
        message_id=properties.message_id,
        timestamp=properties.timestamp,
        cluster_id=properties.cluster_id,
    )
    return wire_message(exchange, routing_key, basic.encode(), body)


def file_properties(cls: type[Any], message: Message) -> tuple[Any, bytes]:
    """The file properties (of class ``cls``) and body of a core message."""
    basic, body = basic_properties(message)
    headers = _headers(basic.headers)
    filename = headers.pop(FILENAME_HEADER, None)
    if isinstance(filename, bytes):
        filename = filename.decode(errors="replace")
    props = cls(
        content_type=basic.content_type,
        content_encoding=basic.content_encoding,
        headers=headers or None,
        priority=basic.priority,
        reply_to=basic.reply_to,
        message_id=basic.message_id,
        filename=filename if isinstance(filename, str) else None,
        timestamp=basic.timestamp,
        cluster_id=basic.cluster_id,
    )
    return props, body


# -- stream -------------------------------------------------------------------------------


def stream_message(exchange: str, routing_key: str, properties: Any, body: bytes) -> Message:
    """A core message from decoded stream properties."""
    basic = BasicProperties(
        content_type=properties.content_type,
        content_encoding=properties.content_encoding,
        headers=_headers(properties.headers) or None,
        delivery_mode=TRANSIENT,
        priority=properties.priority,
        timestamp=properties.timestamp,
    )
    return wire_message(exchange, routing_key, basic.encode(), body)


def stream_properties(cls: type[Any], message: Message) -> tuple[Any, bytes]:
    """The stream properties (of class ``cls``) and body of a core message."""
    basic, body = basic_properties(message)
    props = cls(
        content_type=basic.content_type,
        content_encoding=basic.content_encoding,
        headers=basic.headers or None,
        priority=basic.priority,
        timestamp=basic.timestamp,
    )
    return props, body


# -- message (0-9's message.transfer) -----------------------------------------------------


def transfer_message(method: Any, exchange: str, body: bytes, wall: float) -> Message:
    """A core message from a client's ``message.transfer`` (its fields are the properties),
    received at wall-clock ``wall``."""
    headers = _headers(method.application_headers)
    message_type = headers.pop(TYPE_HEADER, None)
    cluster_id = headers.pop(CLUSTER_ID_HEADER, None)
    expiration = None
    if method.ttl:
        expiration = str(method.ttl)
    elif method.expiration:
        expiration = str(max(0, math.ceil((method.expiration - wall) * 1000)))
    basic = BasicProperties(
        content_type=method.content_type or None,
        content_encoding=method.content_encoding or None,
        headers=headers or None,
        delivery_mode=method.delivery_mode or None,
        priority=method.priority or None,
        correlation_id=method.correlation_id or None,
        reply_to=method.reply_to or None,
        expiration=expiration,
        message_id=method.message_id or None,
        timestamp=method.timestamp or None,
        type=_text(message_type),
        user_id=method.user_id or None,
        app_id=method.app_id or None,
        cluster_id=_text(cluster_id),
    )
    return wire_message(exchange, method.routing_key, basic.encode(), body)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def transfer_fields(message: Message) -> tuple[dict[str, Any], bytes]:
    """The ``message.transfer`` fields that carry a core message's properties, and its body."""
    basic, body = basic_properties(message)
    headers = _headers(basic.headers)
    if basic.type is not None:
        headers[TYPE_HEADER] = basic.type
    if basic.cluster_id is not None:
        headers[CLUSTER_ID_HEADER] = basic.cluster_id
    ttl = 0
    if basic.expiration:
        try:
            ttl = max(int(basic.expiration), 0)
        except ValueError:
            ttl = 0
    fields = {
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "content_type": basic.content_type or "",
        "content_encoding": basic.content_encoding or "",
        "application_headers": headers,
        "delivery_mode": basic.delivery_mode or 0,
        "priority": basic.priority or 0,
        "correlation_id": basic.correlation_id or "",
        "reply_to": basic.reply_to or "",
        "ttl": ttl,
        "message_id": basic.message_id or "",
        "timestamp": basic.timestamp or 0,
        "user_id": basic.user_id or "",
        "app_id": basic.app_id or "",
    }
    return fields, body
