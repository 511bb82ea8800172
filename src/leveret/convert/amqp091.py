"""The AMQP 0-9-1 side of the protocol-neutral ``Message``: how its encoded basic properties
are decoded, re-encoded with changes (dead-lettering), and read cheaply for the hints and the
persistence flag the model needs without decoding anything. Used by the 0-9-1 front end and
by recovery, which rebuilds messages from the store.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Final

from leveret.model.message import (
    HINT_EXPIRATION,
    HINT_HEADERS,
    HINT_PERSISTENT,
    HINT_PRIORITY,
    HINT_REPLY_TO,
    Message,
)
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.fieldtable import Long

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.message import PropertiesView


def decode_properties(raw: bytes) -> BasicProperties:
    return BasicProperties.decode(raw)


def encode_properties(view: PropertiesView, changes: Mapping[str, object]) -> bytes:
    assert isinstance(view, BasicProperties)
    headers = changes.get("headers")
    if isinstance(headers, dict) and isinstance(headers.get("x-death"), list):
        changes = {**changes, "headers": _typed_x_death(headers)}
    return dataclasses.replace(view, **changes).encode()  # type: ignore[arg-type]


def _typed_x_death(headers: dict[str, object]) -> dict[str, object]:
    """``x-death`` entries' ``count`` as a long (``l``), the type RabbitMQ gives it."""
    deaths = headers["x-death"]
    assert isinstance(deaths, list)
    typed = [
        {**death, "count": Long(death["count"])}
        if isinstance(death, dict) and type(death.get("count")) is int
        else death
        for death in deaths
    ]
    return {**headers, "x-death": typed}


def _hints_of_flags(flags_high: int) -> int:
    """Message.hints from the high octet of the property flags (spec bit order)."""
    hints = 0
    if flags_high & 0x01:
        hints |= HINT_EXPIRATION
    if flags_high & 0x08:
        hints |= HINT_PRIORITY
    if flags_high & 0x20:
        hints |= HINT_HEADERS
    if flags_high & 0x02:
        hints |= HINT_REPLY_TO
    return hints


HINTS: Final = tuple(_hints_of_flags(octet) for octet in range(256))


def delivery_mode(raw: bytes) -> int:
    """delivery-mode read straight from the encoded properties (flag bit 12); 0 when it is
    absent (or the properties are too short to hold it)."""
    flags = raw[0]
    if not flags & 0x10:
        return 0
    pos = 2
    try:
        if flags & 0x80:  # content-type
            pos += 1 + raw[pos]
        if flags & 0x40:  # content-encoding
            pos += 1 + raw[pos]
        if flags & 0x20:  # headers
            pos += 4 + int.from_bytes(raw[pos : pos + 4], "big")
        return raw[pos]
    except IndexError:
        return 0


def hints_of(raw: bytes) -> int:
    """``Message.hints`` for encoded basic properties."""
    if not raw:
        return 0
    hints = HINTS[raw[0]]
    if raw[0] & 0x10 and delivery_mode(raw) == 2:
        hints |= HINT_PERSISTENT
    return hints


def wire_message(exchange: str, routing_key: str, raw: bytes, body: bytes) -> Message:
    """A ``Message`` from a publish as it arrived (or as the store kept it)."""
    # hints_of(raw), inlined: this runs once per published message.
    hints = 0
    if raw:
        flags = raw[0]
        hints = HINTS[flags]
        if flags & 0x10 and delivery_mode(raw) == 2:  # persistent
            hints |= HINT_PERSISTENT
    return Message(exchange, routing_key, raw, body, decode_properties, encode_properties, hints)
