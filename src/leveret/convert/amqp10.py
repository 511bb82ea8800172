"""The AMQP 1.0 side of the protocol-neutral ``Message`` (RabbitMQ's ``mc_amqp``): how a
message published over 1.0 is kept, what the model reads of it, how features change it,
and what a 1.0 consumer of it is sent.

A 1.0 message keeps the sections it arrived with, split in two at the body:

- ``raw_properties``: the sections before the body (header, message-annotations,
  properties, application-properties) as they came; delivery-annotations are dropped (they
  are for one hop only, as RabbitMQ does);
- ``body``: the body sections (data, amqp-sequence or amqp-value) and the footer.

So the bare message is kept byte for byte, and a 1.0 consumer gets ``raw_properties +
body`` unchanged on a first delivery; a redelivery rewrites only the header
(``first-acquirer`` false, ``delivery-count``). ``Message.format`` is :data:`FORMAT`.

What the model reads (:class:`Amqp10View`, decoded lazily from ``raw_properties``) follows
RabbitMQ 4: ``delivery_mode`` 2 unless the header says ``durable`` false (a message without
a header is durable, as RabbitMQ 4 treats it), ``priority`` and ``expiration`` (the ttl in
ms) from the header, ``headers`` are the application properties plus the ``x-`` message
annotations (what the headers exchange matches and dead-lettering extends), ``user_id`` and
``reply_to`` from the properties. Changes (:func:`encode_properties`, for dead-lettering,
quorum delivery counts, stream offsets) put new ``x-`` headers into the message annotations
and leave the bare message alone unless an application property itself changes.

The 1.0 front end, the 0-9-1 table (``amqp10_amqp091.py``) and recovery import this module.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import uuid
from typing import TYPE_CHECKING

from leveret.model.message import (
    HINT_EXPIRATION,
    HINT_HEADERS,
    HINT_PERSISTENT,
    HINT_PRIORITY,
    HINT_USER_ID,
    Message,
)
from leveret.protocol.amqp091.fieldtable import Long
from leveret.protocol.amqp10 import (
    Array,
    Described,
    Header,
    Properties,
    Symbol,
    Timestamp,
)
from leveret.protocol.amqp10._generated.composites import (
    ApplicationProperties,
    MessageAnnotations,
)
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.message import (
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    DELIVERY_ANNOTATIONS,
    FOOTER,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    MessageSections,
    parse_message,
)
from leveret.protocol.amqp10.types import decode_value, encode_value, skip_value

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.message import PropertiesView
    from leveret.protocol.amqp10.types import Value

__all__ = [
    "FORMAT",
    "Amqp10View",
    "amqp10_message",
    "decode_properties",
    "encode_properties",
    "field_value",
    "first_sections",
    "payload_for_amqp10",
    "routing_annotations",
    "split_payload",
    "stored_message",
    "value_of_field",
]

FORMAT = 1
"""``Message.format`` of a message kept in AMQP 1.0 form."""

_BODY_CODES = frozenset((DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER))
# Message annotations the broker sets itself and never shows as headers (RabbitMQ's).
_INTERNAL = frozenset(("x-exchange", "x-routing-key", "x-cc", "x-opt-rabbitmq-received-time"))


def _code_at(data: bytes, off: int) -> int:
    """The section code at ``off``: 00 53 CC is how every client encodes a section."""
    if data[off] == 0 and data[off + 1] == 0x53:
        return data[off + 2]
    return -1


_SIZE8 = frozenset((0xA0, 0xA1, 0xA3, 0xC0, 0xC1))  # vbin8, str8, sym8, list8, map8
_BINARY = frozenset((0xA0, 0xB0))  # vbin8, vbin32
_LIST = frozenset((0x45, 0xC0, 0xD0))  # list0, list8, list32
_SIZE32 = frozenset((0xB0, 0xB1, 0xB3, 0xD0, 0xD1))  # their 32-bit forms


def _skip_section(data: bytes, off: int) -> int:
    """The end of the section at ``off``: its size read from the value's encoding for the
    forms every client uses (a section is ``00 53 code`` then a list, map, binary or
    string), the general ``skip_value`` otherwise. A size past the end is a decode-error."""
    n = len(data)
    if off + 5 <= n and data[off] == 0 and data[off + 1] == 0x53:
        kind = data[off + 3]
        if kind in _SIZE8:
            end = off + 5 + data[off + 4]
        elif kind in _SIZE32 and off + 8 <= n:
            end = off + 8 + int.from_bytes(data[off + 4 : off + 8], "big")
        else:
            return skip_value(data, off)
        if end > n:
            raise DecodeError("message: truncated section")
        return end
    return skip_value(data, off)


def first_sections(raw: bytes) -> dict[int, tuple[int, int]]:
    """Where each section of ``raw`` (a message's sections before its body) lies."""
    found: dict[int, tuple[int, int]] = {}
    off = 0
    n = len(raw)
    while off < n:
        code = _code_at(raw, off)
        end = _skip_section(raw, off)
        found[code] = (off, end)
        off = end
    return found


def split_payload(payload: bytes) -> tuple[bytes, bytes]:
    """(sections before the body without delivery-annotations, body and footer); the
    section order and encodings are checked (amqp:decode-error)."""
    off = 0
    n = len(payload)
    cut = -1
    da: tuple[int, int] | None = None
    try:
        while off < n:
            code = _code_at(payload, off)
            if code in _BODY_CODES:
                cut = off
                break
            if code not in (HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES,
                            APPLICATION_PROPERTIES):  # fmt: skip
                # A symbolic descriptor or an unknown section: the careful parser decides.
                parsed = _parsed(payload)
                return _split_parsed(payload, parsed.sections)
            end = _skip_section(payload, off)
            if code == DELIVERY_ANNOTATIONS:
                da = (off, end)
            off = end
    except IndexError as exc:
        raise DecodeError("message: truncated section") from exc
    if cut < 0:
        cut = n
    body = payload[cut:]
    if cut < n and not _well_formed(body):
        _parsed(payload)  # raises the precise decode-error
    if da is None:
        return payload[:cut], body
    return payload[: da[0]] + payload[da[1] : cut], body


def _parsed(payload: bytes) -> MessageSections:
    """``payload`` parsed by the careful parser, its body sections' values checked too (a
    data section holds a binary, an amqp-sequence a list; the parser reads them only when
    asked)."""
    parsed = parse_message(payload)
    if parsed.body_code in (DATA, AMQP_SEQUENCE):
        parsed.body()  # decodes each section as its kind's value
    return parsed


def _well_formed(body: bytes) -> bool:
    """Whether ``body`` is one body kind's sections then at most a footer (a truncated
    section is not: the careful parser says what is wrong)."""
    try:
        return _well_formed_body(body)
    except IndexError:
        return False


def _well_formed_body(body: bytes) -> bool:
    off = 0
    n = len(body)
    kind = -1
    while off < n:
        code = _code_at(body, off)
        if code == FOOTER:
            return _skip_section(body, off) == n
        if code not in (DATA, AMQP_SEQUENCE, AMQP_VALUE):
            return False
        if kind >= 0 and (code != kind or code == AMQP_VALUE):
            return False
        if code == DATA and body[off + 3] not in _BINARY:
            return False  # a data section holds a binary (the parser says what it holds)
        if code == AMQP_SEQUENCE and body[off + 3] not in _LIST:
            return False  # an amqp-sequence section holds a list
        kind = code
        off = _skip_section(body, off)
    return True


def _split_parsed(payload: bytes, sections: tuple[object, ...]) -> tuple[bytes, bytes]:
    before: list[bytes] = []
    cut = len(payload)
    for s in sections:
        code, start, end = s.code, s.start, s.end  # type: ignore[attr-defined]
        if code in _BODY_CODES:
            cut = start
            break
        if code != DELIVERY_ANNOTATIONS:
            before.append(_normalised(payload[start:end], code))
    return b"".join(before), payload[cut:]


def _normalised(section: bytes, code: int) -> bytes:
    """A section with a symbolic descriptor, re-encoded with the numeric one."""
    if _code_at(section, 0) == code:
        return section
    value, _ = decode_value(section)
    return encode_value(value)


def _hints(raw: bytes) -> int:
    if not raw:
        return HINT_PERSISTENT
    hints = 0
    durable: bool | None = None
    off = 0
    n = len(raw)
    while off < n:
        code = raw[off + 2]
        end = _skip_section(raw, off)
        if code == HEADER:
            header, _ = Header.decode_body(raw, off + 3, 0)
            durable = header.durable
            if header.priority is not None:
                hints |= HINT_PRIORITY
            if header.ttl is not None:
                hints |= HINT_EXPIRATION
        elif code in (MESSAGE_ANNOTATIONS, APPLICATION_PROPERTIES):
            hints |= HINT_HEADERS
        elif code == PROPERTIES and _has_user_id(raw, off):
            hints |= HINT_USER_ID
        off = end
    if durable is not False:
        hints |= HINT_PERSISTENT
    return hints


def _has_user_id(raw: bytes, off: int) -> bool:
    """Whether the properties section at ``off`` has a user-id (its second field), read
    from the list's encoding without decoding the section (true when unsure: the full
    decoder then says what is wrong)."""
    p = off + 3
    n = len(raw)
    code = raw[p] if p < n else -1
    if code == 0x45:  # list0
        return False
    if code == 0xC0 and p + 3 <= n:  # list8: size, count
        count = raw[p + 2]
        p += 3
    elif code == 0xD0 and p + 9 <= n:  # list32: size, count
        count = int.from_bytes(raw[p + 5 : p + 9], "big")
        p += 9
    else:
        return True  # not a list, or cut short
    if count < 2:
        return False
    p = skip_value(raw, p)  # message-id
    return p >= n or raw[p] != 0x40  # null


def amqp10_message(exchange: str, routing_key: str, payload: bytes) -> Message:
    """A ``Message`` from a 1.0 transfer's payload (amqp:decode-error when malformed)."""
    raw, body = split_payload(payload)
    return Message(
        exchange,
        routing_key,
        raw,
        body,
        decode_properties,
        encode_properties,
        _hints(raw),
        FORMAT,
    )


def stored_message(exchange: str, routing_key: str, raw: bytes, body: bytes) -> Message:
    """A 1.0 message as the store or a page kept it."""
    return Message(
        exchange,
        routing_key,
        raw,
        body,
        decode_properties,
        encode_properties,
        _hints(raw),
        FORMAT,
    )


# -- what the model reads -------------------------------------------------------------------


# What 0-9-1 field tables hold: int64 integers, timestamps of whole seconds up to 9999-12-31.
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_TIMESTAMP_MAX_MS = 253402300799999


def field_value(value: Value) -> object:
    """A 1.0 value as a header value of the model (0-9-1's field-table types: a long as a
    ``Long``, the other integers as ints). What a field table cannot hold keeps its value in
    the nearest type it can: an integer beyond int64 (a ulong) as its decimal text, a
    timestamp before 1970 or after 9999 as a long of ms."""
    if isinstance(value, Timestamp):
        ms = int(value)
        if 0 <= ms <= _TIMESTAMP_MAX_MS:
            return datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)
        return ms
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        number = int(value)
        if not _INT64_MIN <= number <= _INT64_MAX:
            return str(number)
        # A 1.0 long (the decoder's plain int) stays a long (``l``), as RabbitMQ 4 maps it:
        # readers of x-stream-offset and x-death counts look for that type.
        return Long(number) if type(value) is int else number
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return f"urn:uuid:{value}"
    if isinstance(value, list):
        return [field_value(v) for v in value]
    if isinstance(value, Array):
        return [field_value(v) for v in value.items]
    if isinstance(value, dict):
        return {str(k): field_value(v) for k, v in value.items() if isinstance(k, str)}
    if isinstance(value, Described):
        return field_value(value.value)
    return None


def value_of_field(value: object) -> Value:
    """A model header value (0-9-1 field-table types) as a 1.0 value (RabbitMQ's from_091)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        return Timestamp(int(value.timestamp()) * 1000)
    if isinstance(value, (list, tuple)):
        return [value_of_field(v) for v in value]
    if isinstance(value, dict):
        # A symbol is ASCII: a name that is not stays a string (RabbitMQ writes its UTF-8
        # bytes as a symbol, which a 1.0 decoder may refuse).
        return {
            Symbol(k) if k.isascii() else k: value_of_field(v)
            for k, v in ((str(k), v) for k, v in value.items())
        }
    return str(value)


class Amqp10View:
    """What the model reads of a 1.0 message (``PropertiesView``), decoded once."""

    __slots__ = ("annotations", "app_properties", "header", "props", "raw", "sections")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.sections = first_sections(raw)
        header = self._value(HEADER)
        self.header = header if isinstance(header, Header) else None
        props = self._value(PROPERTIES)
        self.props = props if isinstance(props, Properties) else None
        self.annotations: dict[Value, Value] = self._map(MESSAGE_ANNOTATIONS)
        self.app_properties: dict[Value, Value] = self._map(APPLICATION_PROPERTIES)

    def _value(self, code: int) -> Value:
        where = self.sections.get(code)
        if where is None:
            return None
        value, _ = decode_value(self.raw, where[0])
        return value

    def _map(self, code: int) -> dict[Value, Value]:
        inner = getattr(self._value(code), "value", None)
        return inner if isinstance(inner, dict) else {}

    @property
    def headers(self) -> Mapping[str, object] | None:
        out: dict[str, object] = {}
        for key, value in self.app_properties.items():
            if isinstance(key, str):
                out[str(key)] = field_value(value)
        for key, value in self.annotations.items():
            if isinstance(key, str) and key.startswith("x-") and key not in _INTERNAL:
                out[str(key)] = field_value(value)
        return out or None

    @property
    def delivery_mode(self) -> int | None:
        header = self.header
        return 1 if header is not None and header.durable is False else 2

    @property
    def priority(self) -> int | None:
        header = self.header
        return None if header is None else header.priority

    @property
    def expiration(self) -> str | None:
        header = self.header
        if header is not None and header.ttl is not None:
            return str(header.ttl)
        return None

    @property
    def user_id(self) -> str | None:
        props = self.props
        if props is not None and props.user_id is not None:
            try:
                return bytes(props.user_id).decode()
            except UnicodeDecodeError:
                return None
        return None

    @property
    def reply_to(self) -> str | None:
        props = self.props
        if props is not None and isinstance(props.reply_to, str):
            return str(props.reply_to)
        return None

    @property
    def group_id(self) -> str | None:
        """The message's ``group-id`` (what a grouped queue groups it by, without the header)."""
        props = self.props
        if props is not None and isinstance(props.group_id, str):
            return str(props.group_id)
        return None

    @property
    def message_id(self) -> str | None:
        """The ``message-id`` as text (what a consistent-hash exchange may hash on)."""
        props = self.props
        return None if props is None or props.message_id is None else _id_text(props.message_id)

    @property
    def correlation_id(self) -> str | None:
        props = self.props
        if props is None or props.correlation_id is None:
            return None
        return _id_text(props.correlation_id)

    @property
    def timestamp(self) -> int | None:
        """The ``creation-time`` in seconds, as a 0-9-1 timestamp."""
        props = self.props
        created = None if props is None else props.creation_time
        if isinstance(created, int):
            return int(created) // 1000
        return None


def _id_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def decode_properties(raw: bytes) -> Amqp10View:
    return Amqp10View(raw)


def encode_properties(view: PropertiesView, changes: Mapping[str, object]) -> bytes:
    """``view``'s sections with ``changes`` (headers, expiration, priority, reply_to)."""
    assert isinstance(view, Amqp10View)
    header = view.header
    props = view.props
    annotations = dict(view.annotations)
    app = view.app_properties
    app_changed = False
    header_changed = False
    if "headers" in changes:
        headers = changes["headers"]
        new = headers if isinstance(headers, dict) else {}
        old = view.headers or {}
        for key in old:
            if key not in new and key.startswith("x-"):
                annotations.pop(Symbol(key), None)
        new_app: dict[Value, Value] = {}
        for key, value in new.items():
            if key.startswith("x-"):
                # An x- application property leaves the application properties (below):
                # kept as an annotation even when its value did not change.
                if key not in old or old[key] != value or key in app:
                    annotations[Symbol(key)] = value_of_field(value)
            else:
                kept = app.get(key)
                new_app[key] = (
                    kept if key in app and field_value(kept) == value else value_of_field(value)
                )
        plain_old = {k: v for k, v in app.items() if isinstance(k, str)}
        if new_app != plain_old or list(new_app) != list(plain_old):
            app = new_app
            app_changed = True
    if "expiration" in changes or "priority" in changes:
        header = header or Header()
        header_changed = True
        if "expiration" in changes:
            expiration = changes["expiration"]
            header.ttl = None if expiration is None else int(str(expiration))
        if "priority" in changes:
            priority = changes["priority"]
            header.priority = None if priority is None else int(str(priority))
    props_changed = False
    if "reply_to" in changes:
        props = props or Properties()
        reply_to = changes["reply_to"]
        props.reply_to = None if reply_to is None else str(reply_to)
        props_changed = True
    raw = view.raw
    sections = view.sections
    pieces: list[bytes] = []

    def original(code: int) -> bytes:
        where = sections.get(code)
        return b"" if where is None else raw[where[0] : where[1]]

    pieces.append(header.encode() if header_changed and header is not None else original(HEADER))
    if annotations:
        pieces.append(MessageAnnotations(annotations).encode())
    pieces.append(props.encode() if props_changed and props is not None else original(PROPERTIES))
    if app_changed:
        if app:
            pieces.append(ApplicationProperties(app).encode())
    else:
        pieces.append(original(APPLICATION_PROPERTIES))
    return b"".join(pieces)


# -- what a 1.0 consumer is sent -------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def routing_annotations(exchange: str, routing_key: str) -> bytes:
    """The message-annotations section RabbitMQ 4 gives a 1.0 consumer: ``x-exchange`` and
    ``x-routing-key`` (encoded once per exchange and key)."""
    return MessageAnnotations(
        {Symbol("x-exchange"): exchange, Symbol("x-routing-key"): routing_key}
    ).encode()


def payload_for_amqp10(message: Message, redelivered: bool, delivery_count: int) -> bytes:
    """The transfer payload of a 1.0 message for a 1.0 consumer: the bare message and body
    as they came, the message annotations with ``x-exchange`` and ``x-routing-key`` (as
    RabbitMQ 4 sends them), and on a redelivery a header with ``first-acquirer`` false and
    the ``delivery-count`` (spec 3.2.1)."""
    raw = message.raw_properties
    routing = routing_annotations(message.exchange, message.routing_key)
    if not raw:
        return (
            routing + message.body
            if not redelivered
            else (_redelivered_header(None, delivery_count) + routing + message.body)
        )
    end = 0
    header: Header | None = None
    if _code_at(raw, 0) == HEADER:
        end = _skip_section(raw, 0)
        if redelivered:  # only a redelivery rewrites it
            header, _ = Header.decode_body(raw, 3, 0)
    head = _redelivered_header(header, delivery_count) if redelivered else raw[:end]
    if end < len(raw) and _code_at(raw, end) == MESSAGE_ANNOTATIONS:
        ma_end = _skip_section(raw, end)
        value, _ = decode_value(raw, end)
        annotations = dict(getattr(value, "value", None) or {})
        annotations[Symbol("x-exchange")] = message.exchange
        annotations[Symbol("x-routing-key")] = message.routing_key
        return b"".join(
            (head, MessageAnnotations(annotations).encode(), raw[ma_end:], message.body)
        )
    return b"".join((head, routing, raw[end:], message.body))


def _redelivered_header(header: Header | None, delivery_count: int) -> bytes:
    header = header or Header()
    header.first_acquirer = False
    header.delivery_count = max(delivery_count, 1)
    return header.encode()
