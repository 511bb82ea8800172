"""0-9-1 messages in AMQP 1.0 form and back, and the form a stream stores a message in.

The stream protocol's readers get AMQP 1.0 messages, so a stream keeps every message as a
1.0 message (one osiris record). The server's stream glue and the stream store's codec
import this module.

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
                             ``x-basic-cluster-id`` (and ``x-basic-content-type`` /
                             ``-encoding`` for a content type that is not ASCII, which
                             a symbol cannot hold)
headers                      application properties (strings, numbers, booleans,
                             timestamps, binaries; nested tables and arrays are left out,
                             as in RabbitMQ 3.10)
body                         one data section
===========================  ==============================================================

Back to 0-9-1: the same table read the other way; other message annotations and every
application property become headers; data sections are concatenated into the body; an
``amqp-value`` or ``amqp-sequence`` body is given as its encoded bytes.

What a stream stores for a 0-9-1 publish (:func:`record_parts`): the mapping above, plus
three message annotations first, in this order: ``x-exchange`` and ``x-routing-key`` (as
RabbitMQ's streams give them to stream-protocol readers) and ``x-amqp091-properties``, the
publisher's property bytes as they arrived. A 0-9-1 reader of such a record
(:func:`message_of`) takes those bytes back with a fixed-layout parse instead of the
mapping, so 0-9-1 in, 0-9-1 out stays byte-identical and cheap; only a message published
over the stream protocol (or 1.0) pays the mapping when a 0-9-1 reader takes it. The 1.0
sections of a property set are made once per distinct property bytes (a small cache), so a
publisher that repeats its properties pays the mapping once; one whose properties differ
per message (the Spark sink's producer, sequence and message-id) has them written straight
from the message's decoded properties by ``stream_sections.py``, the same bytes
without the 1.0 composites, for the values it takes.

The AMQP 1.0 encoding is ``leveret.protocol.amqp10``'s.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import TYPE_CHECKING

from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import AMQP10
from leveret.convert.stream_reads import ChunkReads
from leveret.convert.stream_sections import sections
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import types as t
from leveret.protocol.amqp10._generated.composites import (
    ApplicationProperties,
    Header,
    MessageAnnotations,
    Properties,
)
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.message import (
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    HEADER,
    PROPERTIES,
    parse_message,
)
from leveret.protocol.rabbitstream.chunk import encode_chunk, entry_records, split_entries

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.protocol.amqp091.fieldtable import FieldTable, FieldValue
    from leveret.protocol.amqp10.types import Value

EXCHANGE_ANNOTATION = "x-exchange"
ROUTING_KEY_ANNOTATION = "x-routing-key"
PROPERTIES_ANNOTATION = "x-amqp091-properties"

_I = struct.Struct(">I")
_II = struct.Struct(">II")
_BB = struct.Struct(">BB")


class MessageFormatError(ValueError):
    """The bytes are not an AMQP 1.0 message this mapping can read."""


# -- 0-9-1 -> 1.0 ----------------------------------------------------------------------------

_LEFT_OUT = object()


def _simple(value: FieldValue) -> Value | object:
    """A header value as an application property, or ``_LEFT_OUT``."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, datetime.datetime):
        return t.Timestamp(int(value.timestamp() * 1000))
    if isinstance(value, decimal.Decimal):
        return str(value)
    return _LEFT_OUT


def _sections(props: BasicProperties) -> tuple[bytes, dict[Value, Value], bytes]:
    """(header section, extra message annotations, properties + application properties)."""
    ttl: int | None = None
    annotations: dict[Value, Value] = {}
    if props.expiration is not None:
        if props.expiration.isdigit():
            ttl = min(int(props.expiration), 0xFFFFFFFF)
        else:
            annotations[t.Symbol("x-basic-expiration")] = props.expiration
    durable = props.delivery_mode == 2
    header = b""
    if durable or props.priority is not None or ttl is not None:
        header = Header(durable=durable, priority=props.priority, ttl=ttl).encode()
    # Symbols are ASCII; a 0-9-1 content type that is not goes in an annotation instead.
    content_type, content_encoding = props.content_type, props.content_encoding
    if content_type is not None and not content_type.isascii():
        annotations[t.Symbol("x-basic-content-type")] = content_type
        content_type = None
    if content_encoding is not None and not content_encoding.isascii():
        annotations[t.Symbol("x-basic-content-encoding")] = content_encoding
        content_encoding = None
    for name, value in (
        ("x-basic-type", props.type),
        ("x-basic-app-id", props.app_id),
        ("x-basic-cluster-id", props.cluster_id),
    ):
        if value is not None:
            annotations[t.Symbol(name)] = value
    fields = Properties(
        message_id=props.message_id,
        user_id=props.user_id.encode() if props.user_id is not None else None,
        reply_to=props.reply_to,
        correlation_id=props.correlation_id,
        content_type=t.Symbol(content_type) if content_type is not None else None,
        content_encoding=t.Symbol(content_encoding) if content_encoding is not None else None,
        creation_time=props.timestamp * 1000 if props.timestamp is not None else None,
    )
    rest = fields.encode() if fields != Properties() else b""
    if props.headers:
        app: dict[Value, Value] = {}
        for key, header_value in props.headers.items():
            mapped = _simple(header_value)
            if mapped is not _LEFT_OUT:
                app[key] = mapped  # type: ignore[assignment]
        if app:
            rest += ApplicationProperties(app).encode()
    return header, annotations, rest


def _data(body: bytes) -> bytes:
    """The head of a data section holding ``body`` (the body itself follows it)."""
    if len(body) < 256:
        return b"\x00\x53\x75\xa0" + bytes((len(body),))
    return b"\x00\x53\x75\xb0" + _I.pack(len(body))


def to_amqp10(props: BasicProperties, body: bytes) -> bytes:
    """A 0-9-1 message (decoded properties, body) as an AMQP 1.0 message."""
    header, annotations, rest = _sections(props)
    parts = [header]
    if annotations:
        parts.append(MessageAnnotations(annotations).encode())
    parts += [rest, _data(body), body]
    return b"".join(parts)


# -- the stored form of a 0-9-1 publish ------------------------------------------------------

_MA_HEAD = b"\x00\x53\x72\xd1"
_EXCHANGE_KEY = t.encode_value(t.Symbol(EXCHANGE_ANNOTATION))
_ROUTING_KEY_KEY = t.encode_value(t.Symbol(ROUTING_KEY_ANNOTATION))
_PROPERTIES_KEY = t.encode_value(t.Symbol(PROPERTIES_ANNOTATION))
_CACHE_MAX = 1024


class _Prepared:
    """The parts of a stored record that depend only on the property bytes."""

    __slots__ = ("count", "header", "items", "rest")

    def __init__(self, raw: bytes, props: BasicProperties) -> None:
        self.items = _PROPERTIES_KEY + t.encode_value(raw)
        direct = sections(props)
        if direct is not None:
            self.header = direct.header
            self.items += direct.annotations
            self.count = 6 + direct.count
            self.rest = direct.rest
            return
        header, annotations, rest = _sections(props)
        self.header = header
        for key, value in annotations.items():
            self.items += t.encode_value(key) + t.encode_value(value)
        self.count = 6 + 2 * len(annotations)
        self.rest = rest


_prepared: dict[bytes, _Prepared] = {}


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) < 256:
        return _BB.pack(0xA1, len(data)) + data
    return b"\xb1" + _I.pack(len(data)) + data


# The head of a record but its data section's, by (exchange, routing key, property bytes):
# a publisher sends the same few over and over, so most records cost one lookup.
_heads: dict[tuple[str, str, bytes], bytes] = {}


def record_parts(message: Message) -> tuple[bytes, bytes]:
    """A 0-9-1 ``message`` as the record a stream stores: (everything before the body,
    the body), so the body is copied only once, into the chunk."""
    raw = message.raw_properties
    key = (message.exchange, message.routing_key, raw)
    body = message.body
    prefix = _heads.get(key)
    if prefix is None:
        if len(_heads) >= _CACHE_MAX:
            _heads.clear()
        prefix = _heads[key] = _head(message.exchange, message.routing_key, raw, message)
    return prefix + _data(body), body


def _properties_of(message: Message) -> BasicProperties:
    """The message's decoded properties: the decode the de-duplication key already made
    (``Message.properties`` keeps it), else one of the property bytes."""
    props = message.properties
    if isinstance(props, BasicProperties):
        return props
    return BasicProperties.decode(message.raw_properties)


def _head(exchange: str, routing_key: str, raw: bytes, message: Message) -> bytes:
    prepared = _prepared.get(raw)
    if prepared is None:
        if len(_prepared) >= _CACHE_MAX:
            _prepared.clear()
        prepared = _prepared[raw] = _Prepared(raw, _properties_of(message))
    items = (
        _EXCHANGE_KEY + _string(exchange) + _ROUTING_KEY_KEY + _string(routing_key) + prepared.items
    )
    return b"".join(
        (prepared.header, _MA_HEAD, _II.pack(len(items) + 4, prepared.count), items, prepared.rest)
    )


def record_of(message: Message) -> bytes:
    """``record_parts`` joined."""
    head, body = record_parts(message)
    return head + body


# -- 1.0 -> 0-9-1 ----------------------------------------------------------------------------


def _str(value: Value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _header_value(value: Value) -> FieldValue | object:
    if isinstance(value, bool | int | float | str | bytes):
        return value
    return _LEFT_OUT


def from_amqp10(data: bytes) -> tuple[BasicProperties, bytes]:
    """An AMQP 1.0 message as 0-9-1 properties and a body; ``MessageFormatError`` when the
    bytes are not a message."""
    props, body, _annotations = _from_amqp10(data)
    return props, body


def _from_amqp10(data: bytes) -> tuple[BasicProperties, bytes, dict[Value, Value]]:
    try:
        message = parse_message(data)
        header = message.header()
        annotations = message.message_annotations()
        properties = message.properties()
        application = message.application_properties()
        body_code = message.body_code
        if body_code == DATA:
            body = message.data()
        elif body_code in (AMQP_VALUE, AMQP_SEQUENCE):
            body = b"".join(data[s.start : s.end] for s in message.sections if s.code == body_code)
        else:
            body = b""
    except DecodeError as exc:
        raise MessageFormatError(f"not an AMQP 1.0 message: {exc}") from exc
    kw: dict[str, object] = {}
    headers: FieldTable = {}
    if header is not None:
        kw["delivery_mode"] = 2 if header.durable else 1
        kw["priority"] = header.priority
        if header.ttl is not None:
            kw["expiration"] = str(header.ttl)
    for key, item in annotations.items():
        name = str(key)
        if name == "x-basic-type":
            kw["type"] = _str(item)
        elif name == "x-basic-app-id":
            kw["app_id"] = _str(item)
        elif name == "x-basic-cluster-id":
            kw["cluster_id"] = _str(item)
        elif name == "x-basic-expiration":
            kw["expiration"] = _str(item)
        elif name == "x-basic-content-type":
            kw["content_type"] = _str(item)
        elif name == "x-basic-content-encoding":
            kw["content_encoding"] = _str(item)
        elif name not in (EXCHANGE_ANNOTATION, ROUTING_KEY_ANNOTATION, PROPERTIES_ANNOTATION):
            value = _header_value(item)
            if value is not _LEFT_OUT:
                headers[name] = value  # type: ignore[assignment]
    if properties is not None:
        kw["message_id"] = _str(properties.message_id)
        kw["user_id"] = _str(properties.user_id)
        kw["reply_to"] = _str(properties.reply_to)
        kw["correlation_id"] = _str(properties.correlation_id)
        kw["content_type"] = _str(properties.content_type) or kw.get("content_type")
        kw["content_encoding"] = _str(properties.content_encoding) or kw.get("content_encoding")
        if properties.creation_time is not None:
            kw["timestamp"] = int(properties.creation_time) // 1000
    for key, item in application.items():
        value = _header_value(item)
        if value is not _LEFT_OUT:
            headers[str(key)] = value  # type: ignore[assignment]
    if headers:
        kw["headers"] = headers
    props = BasicProperties(**{k: v for k, v in kw.items() if v is not None})  # type: ignore[arg-type]
    return props, body, annotations


_HEADER_PREFIX = b"\x00\x53" + bytes((HEADER,))
_DATA_PREFIX = b"\x00\x53" + bytes((DATA,))
_EXCHANGE_AT = len(_MA_HEAD) + 8
_SKIPPABLE = frozenset((PROPERTIES, APPLICATION_PROPERTIES))
_STRING_HEAD = frozenset((0xA1, 0xB1))


def _read_sized(record: bytes, at: int, small: int) -> tuple[bytes, int]:
    """The bytes of a str8/str32 (``small`` 0xa1) or vbin8/vbin32 (0xa0) value at ``at``."""
    code = record[at]
    if code == small:
        size = record[at + 1]
        start = at + 2
    elif code == small + 0x10:
        size = _I.unpack_from(record, at + 1)[0]
        start = at + 5
    else:
        raise MessageFormatError("not the stored form")
    end = start + size
    if end > len(record):
        raise MessageFormatError("value cut short")
    return record[start:end], end


def _skip_section(record: bytes, at: int) -> int:
    """The end of the described section at ``at``: its list or map is measured from its
    size field (the sections a 0-9-1 publish's record holds), anything else is skipped
    value by value."""
    code = record[at + 3]
    if code in (0xC0, 0xC1):
        return at + 5 + record[at + 4]
    if code in (0xD0, 0xD1):
        size: int = _I.unpack_from(record, at + 4)[0]
        return at + 8 + size
    if code == 0x45:  # list0
        return at + 4
    return t.skip_value(record, at)


def stored_parts(record: bytes) -> tuple[bytes, bytes, bytes, bytes, int] | None:
    """(exchange, routing key, property bytes, body, head) of a record written by
    ``record_parts``; None for any other. ``head`` is where the value of its one data
    section starts (0 when the body is in several): a record that starts with the same
    ``head`` bytes and holds one data section after them has the same exchange, routing
    key and properties."""
    at = 0
    if record.startswith(_HEADER_PREFIX):
        at = _skip_section(record, 0)
    if record[at : at + 4] != _MA_HEAD:
        return None
    ma_end = at + 8 + _I.unpack_from(record, at + 4)[0]
    p = at + _EXCHANGE_AT
    if record[p : p + len(_EXCHANGE_KEY)] != _EXCHANGE_KEY:
        return None
    exchange, p = _read_sized(record, p + len(_EXCHANGE_KEY), 0xA1)
    if record[p : p + len(_ROUTING_KEY_KEY)] != _ROUTING_KEY_KEY:
        return None
    routing_key, p = _read_sized(record, p + len(_ROUTING_KEY_KEY), 0xA1)
    if record[p : p + len(_PROPERTIES_KEY)] != _PROPERTIES_KEY:
        return None
    raw, p = _read_sized(record, p + len(_PROPERTIES_KEY), 0xA0)
    p = ma_end
    n = len(record)
    while p < n and record[p + 2] in _SKIPPABLE and record[p] == 0:
        p = _skip_section(record, p)
    body: bytes = b""
    head = 0
    parts = 0
    while p < n:
        if record[p : p + 3] != _DATA_PREFIX:
            return None
        head = p + 3 if not parts else 0
        chunk, p = _read_sized(record, p + 3, 0xA0)
        body = chunk if not parts else body + chunk
        parts += 1
    if p > n:
        raise MessageFormatError("section cut short")
    return exchange, routing_key, raw, body, head


def _stored_form(record: bytes) -> Message | None:
    """The 0-9-1 message of a record written by ``record_parts``; None for any other."""
    parts = stored_parts(record)
    if parts is None:
        return None
    exchange, routing_key, raw, body, _head = parts
    return wire_message(exchange.decode(), routing_key.decode(), raw, body)


def message_of(record: bytes, routing_key: str = "") -> Message:
    """The 0-9-1 message a reader of a stream gets for a stored ``record``.

    A record stored from a 0-9-1 publish gives back its exchange, routing key and property
    bytes as published; any other 1.0 message goes through the mapping (exchange "",
    routing key ``routing_key``, the stream's name, unless it carries ``x-exchange`` /
    ``x-routing-key`` annotations). ``MessageFormatError`` when it is not a message."""
    try:
        message = _stored_form(record)
    except (IndexError, struct.error, DecodeError, UnicodeDecodeError) as exc:
        raise MessageFormatError(f"not an AMQP 1.0 message: {exc}") from exc
    if message is not None:
        return message
    props, body, annotations = _from_amqp10(record)
    exchange = _str(annotations.get(t.Symbol(EXCHANGE_ANNOTATION))) or ""
    key = _str(annotations.get(t.Symbol(ROUTING_KEY_ANNOTATION)))
    return wire_message(exchange, routing_key if key is None else key, props.encode(), body)


# -- the RecordCodec the model's stream logs use --------------------------------------------

_U32 = struct.Struct(">I")


def _unreadable(record: bytes, stream: str) -> Message:
    """What a 0-9-1 reader gets for a record that is not an AMQP 1.0 message (a stream
    client may publish any bytes): the bytes as the body, no properties."""
    return wire_message("", stream, b"\x00\x00", record)


class StreamRecords:
    """``model.stream.RecordCodec``: entries are osiris entries holding 1.0 messages."""

    def __init__(self) -> None:
        self._reads = ChunkReads(self._record, self.messages)

    def entry(self, message: Message) -> list[bytes]:
        if message.format == AMQP10:
            # A 1.0 message is stored as it came: its sections before the body, then the
            # body sections (formats.py).
            head, body = message.raw_properties, message.body
        else:
            head, body = record_parts(message)
        return [_U32.pack(len(head) + len(body)), head, body]

    def messages(self, entry: bytes, stream: str, entries: int = 1) -> list[Message | None]:
        if entries != 1:
            out: list[Message | None] = []
            for one, _records in split_entries(entry, entries):
                out.extend(self.messages(one, stream))
            return out
        return [
            None if record is None else self._record(record, stream)[0]
            for record in entry_records(entry)
        ]

    def chunk_messages(
        self, data: bytes, at: int, end: int, entries: int, stream: str
    ) -> list[Message | None]:
        return self._reads.messages(data, at, end, entries, stream)

    @staticmethod
    def _record(record: bytes, stream: str) -> tuple[Message, int]:
        """A record's message, and the length of its head ``ChunkReads`` may reuse."""
        try:
            parts = stored_parts(record)
            if parts is not None:
                exchange, routing_key, raw, body, head = parts
                return wire_message(exchange.decode(), routing_key.decode(), raw, body), head
            return message_of(record, stream), 0
        except (IndexError, struct.error, DecodeError, UnicodeDecodeError, MessageFormatError):
            return _unreadable(record, stream), 0

    def chunk(
        self, entries: list[bytes], records: int, first: int, timestamp: int, count: int = 0
    ) -> bytes:
        return encode_chunk(
            entries,
            chunk_id=first,
            timestamp=timestamp,
            num_records=records,
            num_entries=count or None,
            epoch=1,
        )


RECORDS = StreamRecords()


def legacy_entry(exchange: str, routing_key: str, properties: bytes, body: bytes) -> list[bytes]:
    """The stored entry of a message kept in the previous stream format (0-9-1 parts)."""
    return RECORDS.entry(wire_message(exchange, routing_key, properties, body))
