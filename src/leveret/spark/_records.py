"""Osiris chunks of AMQP 1.0 messages (the stream protocol's ``deliver``) to Arrow, in bulk.

A chunk is walked once: each record's bytes are split into its *prefix* (every section before
the body: header, annotations, properties, application properties) and its body. Rows are
grouped by prefix: each distinct prefix of a batch is decoded once into the property and
header columns, which are then gathered for every row with one Arrow ``take`` (as
``_arrow.build_batch`` does for 0-9-1 property lists). The per-record work in the common
case, a record whose prefix equals the one before it followed by one ``data`` section, is a
size read, one ``startswith`` and a slice.

How a prefix becomes columns:

- Leveret's stored form of a 0-9-1 publish (message annotations ``x-exchange``,
  ``x-routing-key``, ``x-amqp091-properties`` first): the 0-9-1 property bytes are decoded by
  ``_arrow``'s property walker, so a row is exactly what the 0-9-1 reader gives.
- Any other message: the broker's one 1.0 → 0-9-1 table (RabbitMQ 4's;
  ``convert/amqp10_amqp091.py`` documents it): header durable/priority/ttl →
  ``delivery_mode`` (2 or 1) / ``priority`` / ``expiration``; the properties section →
  ``message_id``, ``correlation_id`` (a UUID as ``urn:uuid:…``), ``reply_to``, ``user_id``,
  ``content_type``, ``content_encoding``, ``app_id`` (group-id); the ``x-basic-type``
  annotation → ``type`` (and ``x-basic-app-id`` / ``-expiration`` / ``-content-type`` /
  ``-content-encoding``, which earlier writers used, where the properties have none);
  ``x-exchange`` / ``x-routing-key`` → ``exchange`` / ``routing_key`` (else ``""`` and the
  stream's name, as Leveret's 0-9-1 reader gives them); application properties and the
  other ``x-`` message annotations (``x-cc`` as ``CC``) → ``headers`` (values as text).
- Body: the ``data`` sections' bytes; an ``amqp-value`` holding a string or binary: its bytes;
  any other ``amqp-value`` / ``amqp-sequence``: the encoded sections.

``timestamp`` is the chunk's timestamp (ms; every record of a chunk shares it, as RabbitMQ's
and Leveret's ``x-stream-timestamp``), ``offset`` the record's, ``redelivered`` false.
No pyspark import here.
"""

from __future__ import annotations

import datetime
import decimal
import json
import struct
import uuid
import zlib
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from leveret.protocol.amqp10 import DecodeError, decode_value, parse_message
from leveret.protocol.amqp10 import types as t
from leveret.protocol.rabbitstream.chunk import (
    CHUNK_USER,
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    HEADER_SIZE,
    ChunkHeader,
    parse_header,
)
from leveret.protocol.rabbitstream.errors import StreamProtocolError
from leveret.spark._arrow import PROPERTIES_TYPE, READ_SCHEMA, _Columns, _decode_properties

if TYPE_CHECKING:
    from leveret.protocol.amqp10.types import Value

__all__ = ["ChunkError", "RecordColumns", "chunk_header"]

_U32 = struct.Struct(">I")
_SUB_BATCH = struct.Struct(">BHII")
_TS = pa.timestamp("us", tz="UTC")

# Section descriptors (0x00 0x53 code): the common smallulong form.
_DATA = 0x75
_AMQP_SEQUENCE = 0x76
_AMQP_VALUE = 0x77
_FOOTER = 0x78
_BODY_CODES = frozenset((_DATA, _AMQP_SEQUENCE, _AMQP_VALUE))
_DATA_HEAD = b"\x00\x53\x75"
_MA_HEAD = b"\x00\x53\x72"

EXCHANGE_ANNOTATION = "x-exchange"
ROUTING_KEY_ANNOTATION = "x-routing-key"
PROPERTIES_ANNOTATION = "x-amqp091-properties"
_EXCHANGE_KEY = t.encode_value(t.Symbol(EXCHANGE_ANNOTATION))
_ROUTING_KEY_KEY = t.encode_value(t.Symbol(ROUTING_KEY_ANNOTATION))
_PROPERTIES_KEY = t.encode_value(t.Symbol(PROPERTIES_ANNOTATION))
_BASIC = {
    "x-basic-type": 8,  # index in PROPERTY_FIELDS
    "x-basic-app-id": 10,
    "x-basic-expiration": 6,
    "x-basic-content-type": 0,
    "x-basic-content-encoding": 1,
}
_LEFT_OUT = frozenset((EXCHANGE_ANNOTATION, ROUTING_KEY_ANNOTATION, "x-opt-rabbitmq-received-time"))


class ChunkError(ValueError):
    """A chunk or record the connector cannot read (cut short, a codec it lacks)."""


def chunk_header(chunk: bytes) -> ChunkHeader:
    """The chunk's header; ``ChunkError`` when it is not an osiris chunk."""
    try:
        return parse_header(chunk)
    except StreamProtocolError as exc:
        raise ChunkError(f"not an osiris chunk: {exc}") from exc


def _text(value: Value) -> str | None:
    """A header value as text (the 0-9-1 reader's rules: booleans as true/false, numbers as
    decimal text, bytes as UTF-8 with replacement, compound values as JSON)."""
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, int | float | decimal.Decimal):
        return str(int(value)) if isinstance(value, int) else str(value)
    if isinstance(value, uuid.UUID | datetime.datetime):
        return str(value)
    return json.dumps(value, default=str, separators=(",", ":"))


def _as_str(value: Value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _as_id(value: Value) -> str | None:
    """A message or correlation id as the 0-9-1 reader gives it."""
    if isinstance(value, uuid.UUID):
        return f"urn:uuid:{value}"
    return _as_str(value)


def _skip_section(buf: bytes, p: int) -> int:
    """The end of the section at ``p`` (a described value), fast for the usual encodings."""
    if buf[p] != 0 or buf[p + 1] != 0x53:
        return t.skip_value(buf, p)
    v = p + 3
    code = buf[v]
    if code == 0xC0 or code == 0xC1 or code == 0xA0 or code == 0xA1 or code == 0xA3:
        end = v + 2 + buf[v + 1]
    elif code == 0xD0 or code == 0xD1 or code == 0xB0 or code == 0xB1 or code == 0xB3:
        end = v + 5 + _U32.unpack_from(buf, v + 1)[0]
    else:
        return t.skip_value(buf, p)
    if end > len(buf):
        raise DecodeError("section runs past the end of the record")
    return end


def _section_code(buf: bytes, p: int) -> int:
    if buf[p] != 0:
        raise DecodeError("not a described section")
    if buf[p + 1] == 0x53:
        return buf[p + 2]
    descriptor, _ = decode_value(buf, p + 1)
    if isinstance(descriptor, int):
        return int(descriptor)
    names = {
        "amqp:data:binary": _DATA,
        "amqp:amqp-sequence:list": _AMQP_SEQUENCE,
        "amqp:amqp-value:*": _AMQP_VALUE,
        "amqp:footer:map": _FOOTER,
    }
    return names.get(str(descriptor), 0)


def _body(buf: bytes, p: int, end: int) -> bytes:
    """The body of the sections in ``buf[p:end]`` (see the module docstring)."""
    record = buf[p:end]
    parts: list[bytes] = []
    kind = 0
    q = 0
    n = len(record)
    while q < n:
        code = _section_code(record, q)
        stop = _skip_section(record, q)
        if code == _FOOTER:
            break
        kind = kind or code
        if code == _DATA:
            value, _ = decode_value(record, q)
            data = getattr(value, "value", b"")
            parts.append(bytes(data) if isinstance(data, bytes | bytearray) else b"")
        elif code == _AMQP_VALUE:
            value, _ = decode_value(record, q)
            inner = getattr(value, "value", None)
            if isinstance(inner, bytes | str):
                parts.append(inner.encode() if isinstance(inner, str) else inner)
            else:
                parts.append(record[q:stop])
        else:
            parts.append(record[q:stop])
        q = stop
    return b"".join(parts)


class _Shape:
    """What a distinct prefix decodes to, besides the property columns."""

    __slots__ = ("exchange", "routing_key")

    def __init__(self, exchange: str | None, routing_key: str | None) -> None:
        self.exchange = exchange
        self.routing_key = routing_key


def _stored_091(prefix: bytes) -> tuple[str, str, bytes] | None:
    """(exchange, routing key, 0-9-1 property bytes) of Leveret's stored form, else None."""
    at = 0
    if prefix.startswith(b"\x00\x53\x70"):
        at = _skip_section(prefix, 0)
    if not prefix.startswith(_MA_HEAD, at):
        return None
    code = prefix[at + 3]
    if code == 0xC1:
        p = at + 6
    elif code == 0xD1:
        p = at + 12
    else:
        return None
    values: list[bytes] = []
    for key in (_EXCHANGE_KEY, _ROUTING_KEY_KEY, _PROPERTIES_KEY):
        if not prefix.startswith(key, p):
            return None
        p += len(key)
        value_code = prefix[p]
        if value_code in (0xA0, 0xA1):
            size, start = prefix[p + 1], p + 2
        elif value_code in (0xB0, 0xB1):
            size, start = _U32.unpack_from(prefix, p + 1)[0], p + 5
        else:
            return None
        values.append(prefix[start : start + size])
        p = start + size
    return values[0].decode("utf-8", "replace"), values[1].decode("utf-8", "replace"), values[2]


def _decode_amqp10(prefix: bytes, stream: str, cols: _Columns, *, readable: bool = True) -> _Shape:
    """Append one row of property and header columns for a 1.0 ``prefix`` to ``cols``
    (``readable`` false: the record is not a 1.0 message, and has no properties)."""
    message = parse_message(prefix)
    header = message.header()
    annotations = message.message_annotations()
    properties = message.properties()
    application = message.application_properties()
    values: list[object] = [None] * len(cols.props)
    # Durable unless the header says otherwise (RabbitMQ 4 takes a message without one as
    # durable).
    if readable:
        values[2] = 1 if header is not None and header.durable is False else 2
    if header is not None:
        values[3] = header.priority
        if header.ttl is not None:
            values[6] = str(header.ttl)
    exchange: str | None = ""
    routing_key: str | None = stream
    keys = cols.header_keys
    texts = cols.header_values
    had_headers = False
    for key, item in annotations.items():
        name = str(key)
        index = _BASIC.get(name)
        if index is not None:
            if values[index] is None:
                values[index] = _as_str(item)
        elif name == EXCHANGE_ANNOTATION:
            exchange = _as_str(item)
        elif name == ROUTING_KEY_ANNOTATION:
            routing_key = _as_str(item)
        elif name.startswith("x-") and name not in _LEFT_OUT and not name.startswith("x-basic-"):
            had_headers = True
            if cols.include_headers:
                keys.append("CC" if name == "x-cc" else name)
                texts.append(_text(item))
    if properties is not None:
        values[7] = _as_id(properties.message_id)
        values[9] = _as_str(properties.user_id)
        values[5] = _as_str(properties.reply_to)
        values[4] = _as_id(properties.correlation_id)
        if properties.content_type is not None:
            values[0] = str(properties.content_type)
        if properties.content_encoding is not None:
            values[1] = str(properties.content_encoding)
        if properties.group_id is not None:
            values[10] = str(properties.group_id)
    for key, item in application.items():
        had_headers = True
        if cols.include_headers:
            keys.append(str(key))
            texts.append(_text(item))
    for column, value in zip(cols.props, values, strict=True):
        column.append(value)
    if cols.include_headers:
        cols.header_valid.append(had_headers)
    cols.header_offsets.append(len(keys))
    return _Shape(exchange, routing_key)


class RecordColumns:
    """Rows of chunks gathered into columns; :meth:`build` makes the record batch.

    ``add_chunk`` keeps the records whose offsets lie in ``[start, end)``.
    """

    def __init__(self, queue: str, *, include_headers: bool = True) -> None:
        self.queue = queue
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.bodies: list[bytes] = []
        self.slots: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self._shapes: dict[bytes | None, int] = {}
        self._prefixes: list[bytes | None] = []  # None: a record that is not a 1.0 message
        self._last = b"\xff"  # no record starts so: the first one takes the general walk
        self._last_slot = 0

    def __len__(self) -> int:
        return len(self.bodies)

    def add_chunk(self, chunk: bytes, start: int = 0, end: int = 1 << 63) -> int:
        """Add the records of ``chunk`` with offsets in ``[start, end)``; returns the offset
        after the chunk's last record (the next offset), or -1 for a chunk without records."""
        header = chunk_header(chunk)
        if header.chunk_type != CHUNK_USER or not header.num_records:
            return -1
        first = header.chunk_id
        after = first + header.num_records
        if after <= start or first >= end:
            return after
        data_start = HEADER_SIZE + header.bloom_size
        data_end = data_start + header.data_length
        if len(chunk) < data_end:
            raise ChunkError(f"chunk {first} cut short: {len(chunk)} of {data_end} bytes")
        try:
            self._entries(
                chunk, data_start, data_end, header.num_entries, first, start, end, header.timestamp
            )
        except (DecodeError, struct.error, IndexError, zlib.error) as exc:
            raise ChunkError(f"chunk {first}: unreadable record: {exc}") from exc
        return after

    def _entries(
        self,
        buf: bytes,
        at: int,
        stop: int,
        entries: int,
        offset: int,
        start: int,
        end: int,
        timestamp: int,
    ) -> None:
        ts = timestamp * 1000  # ms -> the column's µs
        kept_from = len(self.bodies)
        first_kept = -1
        for _ in range(entries):
            if at >= stop:
                raise ChunkError("fewer entries than the chunk header says")
            if not buf[at] & 0x80:
                size = _U32.unpack_from(buf, at)[0]
                a = at + 4
                at = a + size
                if at > stop:
                    raise ChunkError("entry overruns the chunk")
                if start <= offset < end:
                    if first_kept < 0:
                        first_kept = offset
                    self._record(buf, a, at)
                offset += 1
                continue
            kind, count, _uncompressed, length = _SUB_BATCH.unpack_from(buf, at)
            a = at + _SUB_BATCH.size
            at = a + length
            if at > stop:
                raise ChunkError("sub-batch overruns the chunk")
            if offset + count <= start or offset >= end:
                offset += count
                continue
            compression = (kind >> 4) & 0x07
            if compression == COMPRESSION_NONE:
                inner, p = buf, a
            elif compression == COMPRESSION_GZIP:
                inner, p = zlib.decompress(buf[a:at], 16 + zlib.MAX_WBITS), 0
            else:
                raise ChunkError(f"sub-batch compression {compression} is not supported")
            for _ in range(count):
                size = _U32.unpack_from(inner, p)[0]
                q = p + 4
                p = q + size
                if p > len(inner):
                    raise ChunkError("record overruns its sub-batch")
                if start <= offset < end:
                    if first_kept < 0:
                        first_kept = offset
                    self._record(inner, q, p)
                offset += 1
        kept = len(self.bodies) - kept_from
        if kept:
            self.offsets.extend(range(first_kept, first_kept + kept))
            self.timestamps.extend([ts] * kept)

    def _record(self, buf: bytes, a: int, b: int) -> None:
        """One record ``buf[a:b]``: its body, and the slot of its prefix."""
        last = self._last
        p = a + len(last)
        if buf.startswith(last, a) and buf.startswith(_DATA_HEAD, p):
            code = buf[p + 3]
            if code == 0xA0:
                s = p + 5
                n = buf[p + 4]
            elif code == 0xB0:
                s = p + 8
                n = _U32.unpack_from(buf, p + 4)[0]
            else:
                s = n = -1
            if s + n == b:
                self.bodies.append(buf[s:b])
                self.slots.append(self._last_slot)
                return
        # The general walk: every section up to the first body section.
        prefix: bytes | None
        try:
            p = a
            while p < b:
                if _section_code(buf, p) in _BODY_CODES:
                    break
                p = _skip_section(buf, p)
            prefix = buf[a:p]
            body = _body(buf, p, b) if p < b else b""
        except (DecodeError, struct.error, IndexError, UnicodeDecodeError):
            # Not an AMQP 1.0 message (a stream client may publish any bytes): the record is
            # the body, without properties, as Leveret's 0-9-1 reader gives it.
            prefix, body = None, buf[a:b]
        slot = self._shapes.get(prefix)
        if slot is None:
            slot = self._shapes[prefix] = len(self._prefixes)
            self._prefixes.append(prefix)
        if prefix is not None:
            self._last = prefix
            self._last_slot = slot
        self.slots.append(slot)
        self.bodies.append(body)

    def build(self) -> pa.RecordBatch:
        """Every row added since the last build, as one record batch in ``READ_SCHEMA``."""
        n = len(self.bodies)
        cols = _Columns(self.include_headers)
        shapes: list[_Shape] = []
        for prefix in self._prefixes:
            if prefix is None:
                shapes.append(_decode_amqp10(b"", self.queue, cols, readable=False))
                continue
            try:
                stored = _stored_091(prefix)
                if stored is not None:
                    _decode_properties(stored[2], cols)
                    shapes.append(_Shape(stored[0], stored[1]))
                else:
                    shapes.append(_decode_amqp10(prefix, self.queue, cols))
            except (DecodeError, struct.error, IndexError) as exc:
                raise ChunkError(f"unreadable message sections: {exc}") from exc
        take = pa.array(self.slots, pa.int32())
        if self.include_headers:
            headers: pa.Array = pa.MapArray.from_arrays(
                pa.array(cols.header_offsets, pa.int32()),
                pa.array(cols.header_keys, pa.string()),
                pa.array(cols.header_values, pa.string()),
                mask=pc.invert(pa.array(cols.header_valid, pa.bool_())),
            ).take(take)
        else:
            headers = pa.nulls(n, READ_SCHEMA.field("headers").type)
        properties = pa.StructArray.from_arrays(
            [
                pa.array(column, PROPERTIES_TYPE.field(i).type)
                for i, column in enumerate(cols.props)
            ],
            fields=list(PROPERTIES_TYPE),
        ).take(take)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.bodies, pa.binary()),
                pa.array([s.routing_key for s in shapes], pa.string()).take(take),
                pa.array([s.exchange for s in shapes], pa.string()).take(take),
                pa.repeat(pa.scalar(self.queue, pa.string()), n),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.int64()).cast(_TS),
                pa.repeat(pa.scalar(False, pa.bool_()), n),
                headers,
                properties,
            ],
            schema=READ_SCHEMA,
        )
        self._reset()
        return batch
