"""What a stream stores for each message, and the message a stream reader gets back.

The stream protocol's readers get AMQP 1.0 messages, so a stream keeps every message as a
1.0 message (one osiris record):

- a message published over 1.0 or the stream protocol: as it came (its sections before the
  body, then its body sections: the 1.0 form, ``amqp10.py``);
- a message published over 0-9-1 (or 0-10, 0-8/0-9, AMQP/Fast, which keep 0-9-1's form):
  the one 0-9-1 -> 1.0 table's sections (``amqp10_amqp091.py``, what a 1.0 consumer of it
  gets), with three message annotations first, in this order: ``x-exchange`` and
  ``x-routing-key`` (as RabbitMQ's streams give them to stream-protocol readers) and
  ``x-amqp091-properties``, the publisher's property bytes as they arrived.

Read back (:class:`StreamRecords`, the ``RecordCodec`` the model's stream logs use), a
record with ``x-amqp091-properties`` is the 0-9-1 message as published, taken with a
fixed-layout parse (so 0-9-1 in, 0-9-1 out stays byte-identical and cheap); any other
record is the 1.0 message as stored (exchange and routing key from its ``x-exchange`` /
``x-routing-key`` annotations, else "" and the stream's name), which a 1.0 reader gets as
it is and a 0-9-1 reader through the table, when it takes it. A record that is not a 1.0
message (a stream client may publish any bytes) reads as a 0-9-1 message with the bytes as
its body.

The head of a 0-9-1 append's record (everything before the body) depends only on the
exchange, routing key and property bytes and is kept per distinct triple (a small cache),
so a publisher that repeats its properties pays the table once; one whose properties
differ per message (the Spark sink's sequence and message-id) gets the head written
straight from the property bytes (``stream_head.py``), without decoding them.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from leveret.convert import amqp10
from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp091_headers import dedup_key
from leveret.convert.amqp10_amqp091 import sections_for
from leveret.convert.amqp10_sections import data_head, header_section
from leveret.convert.stream_head import stored_head
from leveret.convert.stream_reads import ChunkReads
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import types as t
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.message import (
    APPLICATION_PROPERTIES,
    DATA,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
)
from leveret.protocol.rabbitstream.chunk import encode_chunk, entry_records, split_entries

if TYPE_CHECKING:
    from leveret.model.message import Message

__all__ = [
    "EXCHANGE_ANNOTATION",
    "PROPERTIES_ANNOTATION",
    "RECORDS",
    "ROUTING_KEY_ANNOTATION",
    "MessageFormatError",
    "StreamRecords",
    "legacy_entry",
    "message_of",
    "record_of",
    "record_parts",
    "stored_parts",
]

EXCHANGE_ANNOTATION = "x-exchange"
ROUTING_KEY_ANNOTATION = "x-routing-key"
PROPERTIES_ANNOTATION = "x-amqp091-properties"

_I = struct.Struct(">I")
_II = struct.Struct(">II")
_BB = struct.Struct(">BB")


class MessageFormatError(ValueError):
    """The bytes are not an AMQP 1.0 message."""


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
        s = sections_for(props)
        self.header = header_section(s)
        self.items = _PROPERTIES_KEY + t.encode_value(raw) + s.annotations
        self.count = 6 + s.count
        self.rest = s.rest


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
    return prefix + data_head(body), body


def _properties_of(message: Message) -> BasicProperties:
    """The message's decoded properties: the decode the de-duplication key already made
    (``Message.properties`` keeps it), else one of the property bytes."""
    props = message.properties
    if isinstance(props, BasicProperties):
        return props
    return BasicProperties.decode(message.raw_properties)


def _head(exchange: str, routing_key: str, raw: bytes, message: Message) -> bytes:
    direct = stored_head(exchange, routing_key, raw)
    if direct is not None:
        return direct
    return decoded_head(exchange, routing_key, raw, message)


def decoded_head(exchange: str, routing_key: str, raw: bytes, message: Message) -> bytes:
    """The head through the decoded properties and the table (what ``stored_head`` leaves
    to it; it raises on malformed property bytes)."""
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
    """The record a stream stores for ``message`` (of either form)."""
    if message.format == amqp10.FORMAT:
        return message.raw_properties + message.body
    head, body = record_parts(message)
    return head + body


# -- reading a record back -------------------------------------------------------------------

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


def _routing(raw: bytes, stream: str) -> tuple[str, str]:
    """(exchange, routing key) of a 1.0 message's sections before the body: its
    ``x-exchange`` / ``x-routing-key`` annotations, else "" and the stream's name."""
    if _EXCHANGE_NAME not in raw and _ROUTING_KEY_NAME not in raw:
        return "", stream  # what stream clients send: no routing annotations to decode
    where = amqp10.first_sections(raw).get(MESSAGE_ANNOTATIONS)
    if where is None:
        return "", stream
    value, _ = t.decode_value(raw, where[0])
    annotations = getattr(value, "value", None)
    if not isinstance(annotations, dict):
        return "", stream
    exchange = annotations.get(EXCHANGE_ANNOTATION)
    key = annotations.get(ROUTING_KEY_ANNOTATION)
    return (
        exchange if isinstance(exchange, str) else "",
        key if isinstance(key, str) else stream,
    )


_DATA_SECTION = b"\x00\x53\x75"
_EXCHANGE_NAME = EXCHANGE_ANNOTATION.encode()
_ROUTING_KEY_NAME = ROUTING_KEY_ANNOTATION.encode()


def _read(record: bytes, stream: str) -> tuple[Message, int]:
    """A record's message, and the length of the head ``ChunkReads`` may reuse (0: none).

    The head of a 0-9-1 publish's record runs to its data section's value; that of a 1.0
    message to its body sections, when the body is one data section."""
    parts = stored_parts(record)
    if parts is not None:
        exchange_bytes, key_bytes, props, data, head = parts
        return wire_message(exchange_bytes.decode(), key_bytes.decode(), props, data), head
    raw, body = amqp10.split_payload(record)
    exchange, routing_key = _routing(raw, stream)
    message = amqp10.stored_message(exchange, routing_key, raw, body)
    cut = len(record) - len(body)
    reuse = 0
    if body.startswith(_DATA_SECTION) and len(body) > 4:
        try:
            _, end = _read_sized(body, 3, 0xA0)
        except MessageFormatError:
            end = -1
        if end == len(body):
            reuse = cut
    return message, reuse


_READ_ERRORS = (IndexError, struct.error, DecodeError, UnicodeDecodeError, MessageFormatError)


def message_of(record: bytes, stream: str = "") -> Message:
    """The message a reader of ``stream`` gets for a stored ``record`` (module docstring);
    ``MessageFormatError`` when it is not a 1.0 message."""
    try:
        return _read(record, stream)[0]
    except MessageFormatError:
        raise
    except _READ_ERRORS as exc:
        raise MessageFormatError(f"not an AMQP 1.0 message: {exc}") from exc


# -- the RecordCodec the model's stream logs use --------------------------------------------

_U32 = struct.Struct(">I")


def _unreadable(record: bytes, stream: str) -> Message:
    """What a reader gets for a record that is not an AMQP 1.0 message (a stream client may
    publish any bytes): the bytes as the body of a 0-9-1 message without properties."""
    return wire_message("", stream, b"\x00\x00", record)


class StreamRecords:
    """``model.stream.RecordCodec``: entries are osiris entries holding 1.0 messages."""

    def __init__(self) -> None:
        self._reads = ChunkReads(self._record, self.messages)

    def entry(self, message: Message) -> list[bytes]:
        if message.format == amqp10.FORMAT:
            # A 1.0 message is stored as it came: its sections before the body, then the
            # body sections (formats.py).
            head, body = message.raw_properties, message.body
        else:
            head, body = record_parts(message)
        return [_U32.pack(len(head) + len(body)), head, body]

    def dedup_key(self, message: Message) -> tuple[str, int] | None:
        if message.format:
            return None  # a 1.0 message's headers: decoded
        return dedup_key(message.raw_properties)

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
            return _read(record, stream)
        except _READ_ERRORS:
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
