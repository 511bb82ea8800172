"""An AMQP/Fast message header (RFC 006, 3.4) as the core's ``Message`` and back.

The core keeps messages in 0-9-1's form (``amqp091.py``), so a message sent
over AMQP/Fast is consumed over 0-9-1 (and through it every other front end) unchanged. The
mapping, field by field:

| AMQP/Fast header | 0-9-1 basic property |
|---|---|
| ``mime-type`` | ``content-type`` |
| ``encoding`` | ``content-encoding`` |
| ``headers`` | ``headers`` (S, I, D, T values as they are) |
| ``persistent`` | ``delivery-mode`` 2 (1 when clear) |
| ``priority`` | ``priority`` |
| ``expiration`` (time_t, 0 = never) | ``expiration`` (ms from now) |
| ``identifier`` | ``message-id`` |

Back, a 0-9-1 message's ``expiration`` becomes an absolute time again (at least one second
ahead), and 0-9-1 header values AMQP/Fast tables cannot carry (booleans, floats, arrays,
nested tables) and names its naming rule forbids (``x-death``) are left out. The RFC's
default MIME type and encoding are not written into the properties.
"""

from __future__ import annotations

import datetime
import math
import re
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import amqp091_parts
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqpfast.commands import MessageHeader

if TYPE_CHECKING:
    from leveret.model.message import Message

__all__ = ["from_message", "to_message"]

_INT32 = range(-(2**31), 2**31)
# The RFC's field names (3.2.3.1): a letter, '$' or '#', then letters, digits, '$', '#', '_'.
_NAME = re.compile(r"[A-Za-z$#][A-Za-z0-9$#_]{0,127}\Z")


def to_message(
    exchange: str, routing_key: str, header: MessageHeader, body: bytes, wall: float
) -> Message:
    """A core message from an AMQP/Fast header and body, received at wall-clock ``wall``."""
    expiration = None
    if header.expiration:
        expiration = str(max(0, math.ceil((header.expiration - wall) * 1000)))
    properties = BasicProperties(
        content_type=header.mime_type or None,
        content_encoding=header.encoding or None,
        headers=dict(header.headers) if header.headers else None,
        delivery_mode=2 if header.persistent else 1,
        priority=header.priority or None,
        expiration=expiration,
        message_id=header.identifier or None,
    )
    return wire_message(exchange, routing_key, properties.encode(), body)


def _fast_value(value: object) -> Any:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value in _INT32 else None
    if isinstance(value, str | bytes | Decimal | datetime.datetime):
        return value
    return None


def from_message(message: Message, wall: float) -> tuple[MessageHeader, bytes]:
    """The AMQP/Fast header and body of a core message, delivered at wall-clock ``wall``
    (a message published in another protocol, such as AMQP 1.0, is converted to 0-9-1's
    form first)."""
    raw, body = amqp091_parts(message)
    props = BasicProperties.decode(raw)
    headers = {}
    for name, value in (props.headers or {}).items():
        converted = _fast_value(value)
        if converted is not None and _NAME.match(name):
            headers[name] = converted
    expiration = 0
    if props.expiration:
        try:
            expiration = math.ceil(wall + max(int(props.expiration), 1000) / 1000)
        except ValueError:
            expiration = 0
    header = MessageHeader(
        body_size=len(body),
        persistent=props.delivery_mode == 2,
        priority=props.priority or 0,
        expiration=expiration,
        mime_type=props.content_type or "",
        encoding=props.content_encoding or "",
        identifier=props.message_id or "",
        headers=headers,
    )
    return header, body
