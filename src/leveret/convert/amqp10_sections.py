"""The 0-9-1 -> 1.0 direction of the one table (``amqp10_amqp091.py``), written directly into
the 1.0 encoding from decoded basic properties: the compiled fast path of that table.

The table's general implementation builds the 1.0 composites and encodes them through the
generic encoder, some 13 µs a property set in pure Python. Every 0-9-1 message a 1.0
consumer takes and every 0-9-1 append to a stream pays the table once (a stream caches it per
distinct property bytes, but a writer that gives every message its own properties, as the
Spark sink does with ``message-id`` and its de-duplication headers, never hits that cache).
:func:`sections` writes the same bytes for the values 0-9-1 publishers send (strings,
integers, booleans, floats, binaries, decimals, timestamps and void in the headers; the
basic properties but a ``urn:uuid:`` id, a non-ASCII content type or encoding, or a
timestamp past 2^63 ms) and returns None for anything else, which the general
implementation takes. The two must agree byte for byte
(``tests/unit/convert/test_amqp10_sections.py`` compares them over generated properties).

Compiled (``build_info.HOT_PATH_MODULES``). Imported by ``amqp10_amqp091.py``.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from leveret.protocol.amqp091._generated.properties import BasicProperties

__all__ = [
    "AMQP10_TYPE",
    "NULL",
    "RESERVED",
    "Sections",
    "annotations_section",
    "binary",
    "data_head",
    "described_list",
    "described_map",
    "header_section",
    "sections",
    "string",
    "symbol",
    "uint",
]

AMQP10_TYPE: Final = "amqp-1.0"
"""0-9-1 ``type`` of a message whose body is encoded 1.0 body sections (not data)."""

# Message annotations the broker writes itself: a 0-9-1 header of one of these names never
# becomes one (RabbitMQ's x-exchange / x-routing-key, and the stored form's property bytes).
RESERVED: Final = frozenset(("x-exchange", "x-routing-key", "x-amqp091-properties"))

NULL: Final = b"\x40"
_TRUE: Final = b"\x41"
_FALSE: Final = b"\x42"
_HEADER: Final = b"\x00\x53\x70"
_MESSAGE_ANNOTATIONS: Final = b"\x00\x53\x72"
_PROPERTIES: Final = b"\x00\x53\x73"
_APPLICATION_PROPERTIES: Final = b"\x00\x53\x74"
_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1
_UINT_MAX: Final = 0xFFFFFFFF
_TYPE_KEY: Final = b"\xa3\x0cx-basic-type"

_BB = struct.Struct(">BB").pack
_BI = struct.Struct(">BI").pack
_Bb = struct.Struct(">Bb").pack
_Bq = struct.Struct(">Bq").pack
_Bd = struct.Struct(">Bd").pack
_BBB = struct.Struct(">BBB").pack
_BII = struct.Struct(">BII").pack


class Sections:
    """A property set's 1.0 parts: the header's fields (``durable``; ``priority`` and ``ttl``
    encoded, or ``NULL``), the message annotations (encoded key/value pairs, and how many
    keys and values), and the properties and application-properties sections (or b"")."""

    __slots__ = ("annotations", "count", "durable", "priority", "rest", "ttl")

    def __init__(
        self,
        durable: bool,
        priority: bytes,
        ttl: bytes,
        annotations: bytes,
        count: int,
        rest: bytes,
    ) -> None:
        self.durable = durable
        self.priority = priority
        self.ttl = ttl
        self.annotations = annotations
        self.count = count
        self.rest = rest

    def parts(self) -> tuple[bool, bytes, bytes, bytes, int, bytes]:
        """Every field, for comparing two ``Sections``."""
        return (self.durable, self.priority, self.ttl, self.annotations, self.count, self.rest)


def string(text: str) -> bytes:
    """``text`` as a 1.0 string (str8 or str32)."""
    data = text.encode()
    if len(data) < 256:
        return _BB(0xA1, len(data)) + data
    return _BI(0xB1, len(data)) + data


def binary(data: bytes) -> bytes:
    if len(data) < 256:
        return _BB(0xA0, len(data)) + data
    return _BI(0xB0, len(data)) + data


def symbol(text: str) -> bytes:
    data = text.encode("ascii")
    if len(data) < 256:
        return _BB(0xA3, len(data)) + data
    return _BI(0xB3, len(data)) + data


def uint(number: int) -> bytes:
    """``number`` as a 1.0 uint, in its shortest form."""
    if number == 0:
        return b"\x43"
    if number < 256:
        return _BB(0x52, number)
    return _BI(0x70, number)


def described_list(descriptor: bytes, parts: list[bytes]) -> bytes:
    """A described list, trailing nulls dropped (the generated composites' encoding)."""
    n = len(parts)
    while n and parts[n - 1] == NULL:
        n -= 1
    if n == 0:
        return descriptor + b"\x45"
    body = b"".join(parts[:n])
    if len(body) < 255:
        return descriptor + _BBB(0xC0, len(body) + 1, n) + body
    return descriptor + _BII(0xD0, len(body) + 4, n) + body


def described_map(descriptor: bytes, body: bytes, count: int) -> bytes:
    """A described map of ``count`` encoded keys and values (the generic encoder's form)."""
    if count < 256 and len(body) < 255:
        return descriptor + _BBB(0xC1, len(body) + 1, count) + body
    return descriptor + _BII(0xD1, len(body) + 4, count) + body


def header_section(s: Sections, first_acquirer: bytes = NULL, delivery_count: int = 0) -> bytes:
    """The header section of ``s``; ``first_acquirer`` (``NULL``, or true/false encoded) and
    ``delivery_count`` (0: not given) are a delivery's, not the message's."""
    return described_list(
        _HEADER,
        [
            _TRUE if s.durable else _FALSE,
            s.priority,
            s.ttl,
            first_acquirer,
            uint(delivery_count) if delivery_count else NULL,
        ],
    )


def annotations_section(items: bytes, count: int) -> bytes:
    """The message-annotations section of these encoded keys and values."""
    return described_map(_MESSAGE_ANNOTATIONS, items, count)


def data_head(body: bytes) -> bytes:
    """The head of a data section holding ``body`` (the body itself follows it)."""
    n = len(body)
    if n < 256:
        return b"\x00\x53\x75\xa0" + bytes((n,))
    return b"\x00\x53\x75\xb0" + n.to_bytes(4, "big")


def _value(value: object) -> bytes | None:
    """A header value as a 1.0 value (``value_of_field`` then the generic encoder); None
    when this module does not take its type (the general implementation does)."""
    kind = type(value)
    if kind is str:
        return string(value)  # type: ignore[arg-type]
    if kind is int:
        number: int = value  # type: ignore[assignment]
        if -128 <= number <= 127:
            return _Bb(0x55, number)
        return _Bq(0x81, number)
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is bytes:
        return binary(value)  # type: ignore[arg-type]
    if kind is float:
        return _Bd(0x82, value)
    if value is None:
        return NULL
    if kind is decimal.Decimal:
        return string(str(value))
    if kind is datetime.datetime:
        when: datetime.datetime = value  # type: ignore[assignment]
        return _Bq(0x83, int(when.timestamp()) * 1000)
    return None


# Header names as keys: a writer sends the same few names.
_names: dict[str, bytes] = {}
_symbols: dict[str, bytes] = {}


def sections(props: BasicProperties) -> Sections | None:
    """The 1.0 parts of ``props``; None when the general implementation must make them."""
    try:
        return _sections(props)
    except (UnicodeEncodeError, struct.error, OverflowError):
        return None  # the general implementation gives the answer for these


def _sections(props: BasicProperties) -> Sections | None:
    content_type, content_encoding = props.content_type, props.content_encoding
    if content_type is not None and not content_type.isascii():
        return None
    if content_encoding is not None and not content_encoding.isascii():
        return None
    ttl = NULL
    expiration = props.expiration
    if expiration is not None and expiration.isascii() and expiration.isdigit():
        ttl = uint(min(int(expiration), _UINT_MAX))
    priority = props.priority
    annotations: list[bytes] = []
    count = 0
    app: list[bytes] = []
    headers = props.headers
    if headers:
        names = _names
        symbols = _symbols
        for key, value in headers.items():
            if key.startswith("x-"):
                if key in RESERVED:
                    continue
                if key.startswith("x-basic-") or key == "x-cc" or not key.isascii():
                    return None  # the table's own annotations, or not a symbol
                encoded = _value(value)
                if encoded is None:
                    return None
                name = symbols.get(key)
                if name is None:
                    if len(symbols) >= 256:
                        symbols.clear()
                    name = symbols[key] = symbol(key)
                annotations.append(name)
                annotations.append(encoded)
                count += 2
                continue
            if isinstance(value, (list, dict)):
                if key == "CC" and isinstance(value, list):
                    return None  # an x-cc annotation: the general implementation's
                continue  # 1.0 forbids them in application properties
            encoded = _value(value)
            if encoded is None:
                return None
            name = names.get(key)
            if name is None:
                if len(names) >= 256:
                    names.clear()
                name = names[key] = string(key)
            app.append(name)
            app.append(encoded)
    kind = props.type
    if kind is not None and kind != AMQP10_TYPE:
        annotations.append(_TYPE_KEY)
        annotations.append(string(kind))
        count += 2
    rest = b""
    message_id, correlation_id = props.message_id, props.correlation_id
    user_id, reply_to, timestamp, app_id = (
        props.user_id,
        props.reply_to,
        props.timestamp,
        props.app_id,
    )
    if (
        message_id is not None
        or user_id is not None
        or reply_to is not None
        or correlation_id is not None
        or content_type is not None
        or content_encoding is not None
        or timestamp is not None
        or app_id is not None
    ):
        if message_id is not None and message_id.startswith("urn:uuid:"):
            return None
        if correlation_id is not None and correlation_id.startswith("urn:uuid:"):
            return None
        creation = NULL
        if timestamp is not None:
            if timestamp * 1000 > _LONG_MAX:
                return None
            creation = _Bq(0x83, timestamp * 1000)
        rest = described_list(
            _PROPERTIES,
            [
                NULL if message_id is None else string(message_id),
                NULL if user_id is None else binary(user_id.encode()),
                NULL,
                NULL,
                NULL if reply_to is None else string(reply_to),
                NULL if correlation_id is None else string(correlation_id),
                NULL if content_type is None else symbol(content_type),
                NULL if content_encoding is None else symbol(content_encoding),
                NULL,
                creation,
                NULL if app_id is None else string(app_id),
            ],
        )
    if app:
        rest += described_map(_APPLICATION_PROPERTIES, b"".join(app), len(app))
    return Sections(
        props.delivery_mode == 2,
        NULL if priority is None else _BB(0x50, priority),
        ttl,
        b"".join(annotations),
        count,
        rest,
    )
