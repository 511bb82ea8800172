"""The AMQP 1.0 sections of decoded 0-9-1 basic properties, encoded directly.

``stream_records.py`` stores a 0-9-1 publish in a stream as a 1.0 message; its
general mapping (``_sections``) builds the 1.0 composites and encodes them through the
generic encoder, some 13 µs a property set. A stream writer that gives every message its
own properties (the Spark sink: its own ``x-stream-producer`` / ``x-stream-sequence`` and
``message-id`` per row) pays that on every message, since the record head cache never
hits. :func:`sections` writes the same bytes straight from the decoded properties for the
values a 0-9-1 publisher sends (strings, integers, booleans, floats, binaries, void in the
headers; the basic properties but a non-ASCII content type or encoding, or a non-numeric
expiration), and returns None for anything else, which the general mapping takes. The
bytes must be the general mapping's exactly (``tests/unit/convert/test_stream_sections.py``
compares them over generated properties).

Only ``stream_records.py`` imports this module.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from leveret.protocol.amqp091._generated.properties import BasicProperties

_NULL: Final = b"\x40"
_TRUE: Final = b"\x41"
_FALSE: Final = b"\x42"
_HEADER: Final = b"\x00\x53\x70"
_PROPERTIES: Final = b"\x00\x53\x73"
_APPLICATION_PROPERTIES: Final = b"\x00\x53\x74"
_LONG_MAX: Final = (1 << 63) - 1
_DURABLE_ONLY: Final = _HEADER + b"\xc0\x02\x01\x41"  # header: durable, nothing else

_BB = struct.Struct(">BB").pack
_BI = struct.Struct(">BI").pack
_Bb = struct.Struct(">Bb").pack
_Bq = struct.Struct(">Bq").pack
_Bd = struct.Struct(">Bd").pack
_BBB = struct.Struct(">BBB").pack
_BII = struct.Struct(">BII").pack

# Annotation keys (symbols) for the basic properties 1.0 has no field for.
_TYPE_KEY: Final = b"\xa3\x0cx-basic-type"
_APP_ID_KEY: Final = b"\xa3\x0ex-basic-app-id"
_CLUSTER_ID_KEY: Final = b"\xa3\x12x-basic-cluster-id"


class Sections:
    """A property set's 1.0 parts: the header section (or b""), the message annotations
    after ``x-amqp091-properties`` (encoded key/value pairs, and how many of them), and
    the properties and application-properties sections (or b"")."""

    __slots__ = ("annotations", "count", "header", "rest")

    def __init__(self, header: bytes, annotations: bytes, count: int, rest: bytes) -> None:
        self.header = header
        self.annotations = annotations
        self.count = count
        self.rest = rest


def _str(text: str) -> bytes:
    data = text.encode()
    if len(data) < 256:
        return _BB(0xA1, len(data)) + data
    return _BI(0xB1, len(data)) + data


def _binary(data: bytes) -> bytes:
    if len(data) < 256:
        return _BB(0xA0, len(data)) + data
    return _BI(0xB0, len(data)) + data


def _symbol(text: str) -> bytes:
    data = text.encode("ascii")
    if len(data) < 256:
        return _BB(0xA3, len(data)) + data
    return _BI(0xB3, len(data)) + data


def _list(descriptor: bytes, parts: list[bytes]) -> bytes:
    """A described list, trailing nulls dropped (the generated composites' encoding)."""
    n = len(parts)
    while n and parts[n - 1] == _NULL:
        n -= 1
    if n == 0:
        return descriptor + b"\x45"
    body = b"".join(parts[:n])
    if len(body) < 255:
        return descriptor + _BBB(0xC0, len(body) + 1, n) + body
    return descriptor + _BII(0xD0, len(body) + 4, n) + body


def _value(value: object) -> bytes | None:
    """A header value as an application-property value; None when this module does not
    take its type (the general mapping does)."""
    kind = type(value)
    if kind is str:
        return _str(value)  # type: ignore[arg-type]
    if kind is int:
        number: int = value  # type: ignore[assignment]
        if -128 <= number <= 127:
            return _Bb(0x55, number)
        return _Bq(0x81, number)
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is bytes:
        return _binary(value)  # type: ignore[arg-type]
    if kind is float:
        return _Bd(0x82, value)
    if value is None:
        return _NULL
    return None


# Header names as application-property keys: a writer sends the same few names.
_names: dict[str, bytes] = {}


def _application(headers: dict[str, object]) -> bytes | None:
    parts: list[bytes] = []
    names = _names
    for key, value in headers.items():
        name = names.get(key)
        if name is None:
            if len(names) >= 256:
                names.clear()
            name = names[key] = _str(key)
        parts.append(name)
        # Strings and integers (most headers) here, the other types in _value.
        if type(value) is str:
            parts.append(_str(value))
        elif type(value) is int:
            parts.append(_Bb(0x55, value) if -128 <= value <= 127 else _Bq(0x81, value))
        else:
            encoded = _value(value)
            if encoded is None:
                return None
            parts.append(encoded)
    if not parts:
        return b""
    body = b"".join(parts)
    if len(parts) < 256 and len(body) < 255:
        return _APPLICATION_PROPERTIES + _BBB(0xC1, len(body) + 1, len(parts)) + body
    return _APPLICATION_PROPERTIES + _BII(0xD1, len(body) + 4, len(parts)) + body


def sections(props: BasicProperties) -> Sections | None:
    """The 1.0 parts of ``props``; None when the general mapping must make them."""
    try:
        return _sections(props)
    except (UnicodeEncodeError, struct.error, OverflowError):
        return None  # the general mapping gives the error (or the answer) for these


def _sections(props: BasicProperties) -> Sections | None:
    content_type, content_encoding = props.content_type, props.content_encoding
    if content_type is not None and not content_type.isascii():
        return None
    if content_encoding is not None and not content_encoding.isascii():
        return None
    ttl = _NULL
    expiration = props.expiration
    if expiration is not None:
        if not (expiration.isascii() and expiration.isdigit()):
            return None
        number = min(int(expiration), 0xFFFFFFFF)
        ttl = b"\x43" if number == 0 else _BB(0x52, number) if number < 256 else _BI(0x70, number)
    durable = props.delivery_mode == 2
    priority = props.priority
    if priority is None and ttl is _NULL:
        header = _DURABLE_ONLY if durable else b""
    else:
        header = _list(
            _HEADER,
            [
                _TRUE if durable else _FALSE,
                _NULL if priority is None else _BB(0x50, priority),
                ttl,
            ],
        )
    annotations = b""
    count = 0
    if props.type is not None:
        annotations += _TYPE_KEY + _str(props.type)
        count += 2
    if props.app_id is not None:
        annotations += _APP_ID_KEY + _str(props.app_id)
        count += 2
    if props.cluster_id is not None:
        annotations += _CLUSTER_ID_KEY + _str(props.cluster_id)
        count += 2
    message_id, user_id, reply_to = props.message_id, props.user_id, props.reply_to
    correlation_id, timestamp = props.correlation_id, props.timestamp
    rest = b""
    if (
        message_id is not None
        or user_id is not None
        or reply_to is not None
        or correlation_id is not None
        or content_type is not None
        or content_encoding is not None
        or timestamp is not None
    ):
        if timestamp is not None and timestamp * 1000 > _LONG_MAX:
            return None
        if (
            user_id is None
            and reply_to is None
            and correlation_id is None
            and content_type is None
            and content_encoding is None
            and timestamp is None
        ):
            # Only a message-id (what a writer that numbers its messages sets): one item.
            assert message_id is not None
            encoded = _str(message_id)
            if len(encoded) < 255:
                rest = _PROPERTIES + _BBB(0xC0, len(encoded) + 1, 1) + encoded
            else:
                rest = _PROPERTIES + _BII(0xD0, len(encoded) + 4, 1) + encoded
        else:
            rest = _list(
                _PROPERTIES,
                [
                    _NULL if message_id is None else _str(message_id),
                    _NULL if user_id is None else _binary(user_id.encode()),
                    _NULL,
                    _NULL,
                    _NULL if reply_to is None else _str(reply_to),
                    _NULL if correlation_id is None else _str(correlation_id),
                    _NULL if content_type is None else _symbol(content_type),
                    _NULL if content_encoding is None else _symbol(content_encoding),
                    _NULL,
                    _NULL if timestamp is None else _Bq(0x83, timestamp * 1000),
                ],
            )
    headers = props.headers
    if headers:
        application = _application(headers)  # type: ignore[arg-type]
        if application is None:
            return None
        rest += application
    return Sections(header, annotations, count, rest)
