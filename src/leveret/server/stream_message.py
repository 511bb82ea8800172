"""0-9-1 messages in AMQP 1.0 form and back: what a stream keeps for a message published
over 0-9-1 (the stream protocol's readers get AMQP 1.0 messages), and what a 0-9-1 reader
gets from a message published over the stream protocol. The server's stream glue imports it.

The mapping is RabbitMQ's (``rabbit_msg_record`` in 3.10):

===========================  ==============================================================
0-9-1 basic property         AMQP 1.0
===========================  ==============================================================
delivery-mode 2 / priority   header: durable / priority
expiration (ms)              header: ttl (a non-numeric expiration: annotation
                             ``x-basic-expiration``)
message-id, correlation-id   properties: message-id, correlation-id (strings)
reply-to                     properties: reply-to
user-id                      properties: user-id (binary)
content-type / -encoding     properties: content-type / content-encoding (symbols)
timestamp (s)                properties: creation-time (ms)
type, app-id, cluster-id     message annotations ``x-basic-type``, ``x-basic-app-id``,
                             ``x-basic-cluster-id``
headers                      application properties (strings, numbers, booleans,
                             timestamps, binaries; nested tables and arrays are left out,
                             as in RabbitMQ 3.10)
body                         one data section
===========================  ==============================================================

Back to 0-9-1: the same table read the other way; other message annotations and every
application property become headers; data sections are concatenated into the body; an
``amqp-value`` or ``amqp-sequence`` body is given as its encoded bytes.

The AMQP 1.0 encoding here is the few types this mapping needs (described lists and maps of
primitives). When ``leveret.protocol.amqp10`` lands (its ``types.encode``/``decode`` and its
message sections), ``_encode``/``_decode`` below are replaced by it and the interface stays:
``to_amqp10(properties, body) -> bytes`` and ``from_amqp10(data) -> (properties, body)``.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import TYPE_CHECKING, TypeAlias

from leveret.protocol.amqp091._generated.properties import BasicProperties

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.protocol.amqp091.fieldtable import FieldTable, FieldValue

HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = 0x70, 0x72, 0x73, 0x74
DATA, AMQP_SEQUENCE, AMQP_VALUE = 0x75, 0x76, 0x77
DELIVERY_ANNOTATIONS, FOOTER = 0x71, 0x78

_B = struct.Struct(">B")
_I = struct.Struct(">I")
_Q = struct.Struct(">q")
_UQ = struct.Struct(">Q")
_D = struct.Struct(">d")
_BB = struct.Struct(">BB")
_II = struct.Struct(">II")


class Symbol(str):
    """An AMQP 1.0 symbol (encoded 0xa3/0xb3), as opposed to a string."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP 1.0 timestamp, ms since the epoch (0x83)."""

    __slots__ = ()


class UByte(int):
    __slots__ = ()


class UInt(int):
    __slots__ = ()


Value: TypeAlias = (
    "bool | int | float | str | bytes | list[Value] | dict[Value, Value] | Described | None"
)


class Described:
    """A described value with an unsigned-long descriptor (sections, unknown types)."""

    __slots__ = ("code", "value")

    def __init__(self, code: int, value: Value) -> None:
        self.code = code
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Described) and (other.code, other.value) == (
            self.code,
            self.value,
        )

    def __hash__(self) -> int:
        return hash(self.code)


class MessageFormatError(ValueError):
    """The bytes are not an AMQP 1.0 message this mapping can read."""


# -- encoding --------------------------------------------------------------------------------


def _encode(value: Value) -> bytes:
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, Timestamp):
        return b"\x83" + _Q.pack(value)
    if isinstance(value, UByte):
        return b"\x50" + _B.pack(value)
    if isinstance(value, UInt):
        return b"\x70" + _I.pack(value)
    if isinstance(value, int):
        if -128 <= value <= 127:
            return b"\x55" + struct.pack(">b", value)
        if -(2**63) <= value < 2**63:
            return b"\x81" + _Q.pack(value)
        return b"\x80" + _UQ.pack(value)  # ulong: an unsigned value past long's range
    if isinstance(value, float):
        return b"\x82" + _D.pack(value)
    if isinstance(value, str):
        raw = value.encode()
        small, large = (0xA3, 0xB3) if isinstance(value, Symbol) else (0xA1, 0xB1)
        if len(raw) < 256:
            return _BB.pack(small, len(raw)) + raw
        return _B.pack(large) + _I.pack(len(raw)) + raw
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) < 256:
            return _BB.pack(0xA0, len(raw)) + raw
        return b"\xb0" + _I.pack(len(raw)) + raw
    if isinstance(value, Described):
        return b"\x00\x53" + _B.pack(value.code) + _encode(value.value)
    if isinstance(value, list):
        return _compound(0xC0, 0xD0, [_encode(v) for v in value]) if value else b"\x45"
    if isinstance(value, dict):
        items = [part for k, v in value.items() for part in (_encode(k), _encode(v))]
        return _compound(0xC1, 0xD1, items)
    raise TypeError(f"cannot encode {type(value).__name__} as AMQP 1.0")


def _compound(small: int, large: int, items: list[bytes]) -> bytes:
    body = b"".join(items)
    if len(body) + 1 < 256 and len(items) < 256:
        return _BB.pack(small, len(body) + 1) + _B.pack(len(items)) + body
    return _B.pack(large) + _II.pack(len(body) + 4, len(items)) + body


def _section(code: int, fields: list[Value]) -> bytes:
    while fields and fields[-1] is None:
        fields.pop()  # trailing nulls are left out of a described list
    return _encode(Described(code, fields))


_LEFT_OUT = object()


def _simple(value: FieldValue) -> Value | object:
    """A header value as an application property, or ``_LEFT_OUT``."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, datetime.datetime):
        return Timestamp(int(value.timestamp() * 1000))
    if isinstance(value, decimal.Decimal):
        return str(value)
    return _LEFT_OUT


def to_amqp10(props: BasicProperties, body: bytes) -> bytes:
    """A 0-9-1 message (decoded properties, body) as an AMQP 1.0 message."""
    parts = []
    priority = props.priority
    ttl: Value = None
    annotations: dict[Value, Value] = {}
    if props.expiration is not None:
        if props.expiration.isdigit():
            ttl = UInt(min(int(props.expiration), 0xFFFFFFFF))
        else:
            annotations[Symbol("x-basic-expiration")] = props.expiration
    durable = props.delivery_mode == 2
    if durable or priority is not None or ttl is not None:
        parts.append(
            _section(HEADER, [durable, UByte(priority) if priority is not None else None, ttl])
        )
    for name, value in (
        ("x-basic-type", props.type),
        ("x-basic-app-id", props.app_id),
        ("x-basic-cluster-id", props.cluster_id),
    ):
        if value is not None:
            annotations[Symbol(name)] = value
    if annotations:
        parts.append(_encode(Described(MESSAGE_ANNOTATIONS, annotations)))
    fields: list[Value] = [
        props.message_id,
        props.user_id.encode() if props.user_id is not None else None,
        None,  # to
        None,  # subject
        props.reply_to,
        props.correlation_id,
        Symbol(props.content_type) if props.content_type is not None else None,
        Symbol(props.content_encoding) if props.content_encoding is not None else None,
        None,  # absolute-expiry-time
        Timestamp(props.timestamp * 1000) if props.timestamp is not None else None,
    ]
    if any(f is not None for f in fields):
        parts.append(_section(PROPERTIES, fields))
    if props.headers:
        app: dict[Value, Value] = {}
        for key, header in props.headers.items():
            mapped = _simple(header)
            if mapped is not _LEFT_OUT:
                app[key] = mapped  # type: ignore[assignment]
        if app:
            parts.append(_encode(Described(APPLICATION_PROPERTIES, app)))
    parts.append(b"\x00\x53\x75" + _encode(body))
    return b"".join(parts)


# -- decoding --------------------------------------------------------------------------------

_FIXED: dict[int, tuple[int, Callable[[bytes], Value]]] = {
    0x50: (1, lambda b: b[0]),
    0x51: (1, lambda b: struct.unpack(">b", b)[0]),
    0x52: (1, lambda b: b[0]),
    0x53: (1, lambda b: b[0]),
    0x54: (1, lambda b: struct.unpack(">b", b)[0]),
    0x55: (1, lambda b: struct.unpack(">b", b)[0]),
    0x60: (2, lambda b: struct.unpack(">H", b)[0]),
    0x61: (2, lambda b: struct.unpack(">h", b)[0]),
    0x70: (4, lambda b: struct.unpack(">I", b)[0]),
    0x71: (4, lambda b: struct.unpack(">i", b)[0]),
    0x72: (4, lambda b: struct.unpack(">f", b)[0]),
    0x73: (4, lambda b: chr(struct.unpack(">I", b)[0])),
    0x80: (8, lambda b: struct.unpack(">Q", b)[0]),
    0x81: (8, lambda b: struct.unpack(">q", b)[0]),
    0x82: (8, lambda b: struct.unpack(">d", b)[0]),
    0x83: (8, lambda b: Timestamp(struct.unpack(">q", b)[0])),
    0x98: (16, lambda b: bytes(b)),
}


def _decode(data: bytes, at: int) -> tuple[Value, int]:
    code = data[at]
    at += 1
    if code == 0x00:
        descriptor, at = _decode(data, at)
        value, at = _decode(data, at)
        if not isinstance(descriptor, int) or isinstance(descriptor, bool):
            return Described(-1, value), at  # a symbolic descriptor: kept opaque
        return Described(descriptor, value), at
    if code == 0x40:
        return None, at
    if code in (0x41, 0x42):
        return code == 0x41, at
    if code == 0x56:
        return data[at] == 1, at + 1
    if code in (0x43, 0x44):
        return 0, at
    if code == 0x45:
        return [], at
    fixed = _FIXED.get(code)
    if fixed is not None:
        size, read = fixed
        if at + size > len(data):
            raise MessageFormatError("value cut short")
        return read(data[at : at + size]), at + size
    if code in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
        if code < 0xB0:
            size, at = data[at], at + 1
        else:
            size, at = _I.unpack_from(data, at)[0], at + 4
        raw = data[at : at + size]
        if len(raw) != size:
            raise MessageFormatError("value cut short")
        at += size
        if code in (0xA0, 0xB0):
            return raw, at
        text = raw.decode()
        return (Symbol(text) if code in (0xA3, 0xB3) else text), at
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code < 0xD0:
            _size, count, at = data[at], data[at + 1], at + 2
        else:
            _size, count = _II.unpack_from(data, at)
            at += 8
        items = []
        for _ in range(count):
            item, at = _decode(data, at)
            items.append(item)
        if code in (0xC0, 0xD0):
            return items, at
        return dict(zip(items[::2], items[1::2], strict=True)), at
    raise MessageFormatError(f"AMQP 1.0 type 0x{code:02x} is not read by this mapping")


def _str(value: Value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def from_amqp10(data: bytes) -> tuple[BasicProperties, bytes]:
    """An AMQP 1.0 message as 0-9-1 properties and a body; ``MessageFormatError`` when the
    bytes are not a message."""
    at = 0
    body: list[bytes] = []
    headers: FieldTable = {}
    kw: dict[str, object] = {}
    try:
        while at < len(data):
            start = at
            section, at = _decode(data, at)
            if not isinstance(section, Described):
                raise MessageFormatError("a message section must be a described value")
            code, value = section.code, section.value
            if code == HEADER and isinstance(value, list):
                value += [None] * (3 - len(value))
                kw["delivery_mode"] = 2 if value[0] else 1
                if isinstance(value[1], int):
                    kw["priority"] = value[1]
                if isinstance(value[2], int):
                    kw["expiration"] = str(value[2])
            elif code == MESSAGE_ANNOTATIONS and isinstance(value, dict):
                for key, item in value.items():
                    name = str(key)
                    if name == "x-basic-type":
                        kw["type"] = _str(item)
                    elif name == "x-basic-app-id":
                        kw["app_id"] = _str(item)
                    elif name == "x-basic-cluster-id":
                        kw["cluster_id"] = _str(item)
                    elif name == "x-basic-expiration":
                        kw["expiration"] = _str(item)
                    elif isinstance(item, bool | int | float | str | bytes):
                        headers[name] = item
            elif code == PROPERTIES and isinstance(value, list):
                value += [None] * (10 - len(value))
                kw["message_id"] = _str(value[0])
                kw["user_id"] = _str(value[1])
                kw["reply_to"] = _str(value[4])
                kw["correlation_id"] = _str(value[5])
                kw["content_type"] = _str(value[6])
                kw["content_encoding"] = _str(value[7])
                if isinstance(value[9], int):
                    kw["timestamp"] = value[9] // 1000
            elif code == APPLICATION_PROPERTIES and isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, bool | int | float | str | bytes):
                        headers[str(key)] = item
            elif code == DATA and isinstance(value, bytes):
                body.append(value)
            elif code in (AMQP_VALUE, AMQP_SEQUENCE):
                body.append(data[start:at])
    except (IndexError, struct.error, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, MessageFormatError):
            raise
        raise MessageFormatError(f"not an AMQP 1.0 message: {exc}") from exc
    if headers:
        kw["headers"] = headers
    props = BasicProperties(**{k: v for k, v in kw.items() if v is not None})  # type: ignore[arg-type]
    return props, b"".join(body)
