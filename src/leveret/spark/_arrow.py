"""Deliveries (columns of raw bytes) to Arrow record batches in the connector's row schema.

No pyspark import: the read schema is defined here in Arrow terms and mirrored as a Spark DDL
string (:data:`READ_SCHEMA_DDL`). Property bytes are decoded once per row by a specialised
walker that appends straight into per-column lists (no ``BasicProperties``, no header dict):
header values are stringified (nested tables and arrays as JSON), ``x-stream-offset`` becomes
the ``offset`` column and ``x-stream-timestamp`` (Leveret, ms) or the ``timestamp`` property
(seconds) the ``timestamp`` column.
"""

from __future__ import annotations

import datetime
import decimal
import json
import struct
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from leveret.protocol.amqp091.fieldtable import FieldValue, decode_value

if TYPE_CHECKING:
    from leveret.spark._client import Deliveries

__all__ = [
    "PROPERTY_FIELDS",
    "READ_SCHEMA",
    "READ_SCHEMA_DDL",
    "STREAM_OFFSET_HEADER",
    "STREAM_TIMESTAMP_HEADER",
    "build_batch",
    "stream_offsets",
]

STREAM_OFFSET_HEADER = "x-stream-offset"
STREAM_TIMESTAMP_HEADER = "x-stream-timestamp"

PROPERTY_FIELDS: tuple[str, ...] = (
    "content_type",
    "content_encoding",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "type",
    "user_id",
    "app_id",
)
_INT_PROPERTIES = frozenset(("delivery_mode", "priority"))

_TS = pa.timestamp("us", tz="UTC")
PROPERTIES_TYPE = pa.struct(
    [
        pa.field(name, pa.int32() if name in _INT_PROPERTIES else pa.string())
        for name in PROPERTY_FIELDS
    ]
)
READ_SCHEMA = pa.schema(
    [
        pa.field("value", pa.binary()),
        pa.field("routing_key", pa.string()),
        pa.field("exchange", pa.string()),
        pa.field("queue", pa.string()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TS),
        pa.field("redelivered", pa.bool_()),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("properties", PROPERTIES_TYPE),
    ]
)
READ_SCHEMA_DDL = (
    "value BINARY, routing_key STRING, exchange STRING, queue STRING, offset BIGINT,"
    " timestamp TIMESTAMP, redelivered BOOLEAN, headers MAP<STRING, STRING>, properties STRUCT<"
    + ", ".join(
        f"{name}: {'INT' if name in _INT_PROPERTIES else 'STRING'}" for name in PROPERTY_FIELDS
    )
    + ">"
)

_OFFSET_KEY = b"\x0f" + STREAM_OFFSET_HEADER.encode() + b"l"
_TIMESTAMP_KEY = b"\x12" + STREAM_TIMESTAMP_HEADER.encode() + b"l"
_SKIPPED_HEADERS = frozenset((STREAM_OFFSET_HEADER, STREAM_TIMESTAMP_HEADER))
_Q = struct.Struct(">q")
_H = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def stream_offsets(properties: list[bytes]) -> list[int]:
    """The ``x-stream-offset`` header (type ``l``) of each raw property list; -1 when absent.

    A byte search, not a table decode: the reader needs offsets for every delivery (to cut its
    range) before it decides which rows to keep. The key is searched as it is encoded in a
    table (length octet, name, type letter); :func:`build_batch` decodes the table properly.
    """
    key = _OFFSET_KEY
    klen = len(key)
    unpack = _Q.unpack_from
    out: list[int] = []
    append = out.append
    for raw in properties:
        i = raw.find(key)
        append(unpack(raw, i + klen)[0] if i >= 0 else -1)
    return out


def _stringify(value: FieldValue) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, int | float | decimal.Decimal):
        return str(value)
    return json.dumps(value, default=str, separators=(",", ":"))


def _short(raw: bytes, o: int) -> tuple[str, int]:
    n = raw[o]
    end = o + 1 + n
    return raw[o + 1 : end].decode("utf-8", "replace"), end


class _Columns:
    """Per-column Python lists for one record batch."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.props: list[list[object]] = [[] for _ in PROPERTY_FIELDS]
        self.timestamps: list[int | None] = []
        self.header_offsets: list[int] = [0]
        self.header_keys: list[str] = []
        self.header_values: list[str | None] = []
        self.header_valid: list[bool] = []


def _decode_properties(raw: bytes, cols: _Columns) -> None:
    """Append one row's properties, headers and timestamp to ``cols``."""
    flags = _H.unpack_from(raw, 0)[0]
    o = 2
    (
        content_type,
        content_encoding,
        delivery_mode,
        priority,
        correlation_id,
        reply_to,
        expiration,
        message_id,
        type_,
        user_id,
        app_id,
    ) = cols.props
    ts: int | None = None
    stream_ts: int | None = None
    if flags & 0x8000:
        value, o = _short(raw, o)
        content_type.append(value)
    else:
        content_type.append(None)
    if flags & 0x4000:
        value, o = _short(raw, o)
        content_encoding.append(value)
    else:
        content_encoding.append(None)
    keys = cols.header_keys
    values = cols.header_values
    if flags & 0x2000:
        size = _U32.unpack_from(raw, o)[0]
        o += 4
        end = o + size
        while o < end:
            klen = raw[o]
            key = raw[o + 1 : o + 1 + klen].decode("utf-8", "replace")
            o += 1 + klen
            letter = raw[o]
            o += 1
            text: str | None
            if letter == 0x53:  # S: longstr
                n = _U32.unpack_from(raw, o)[0]
                text = raw[o + 4 : o + 4 + n].decode("utf-8", "replace")
                o += 4 + n
            elif letter == 0x6C:  # l: int64
                number = _Q.unpack_from(raw, o)[0]
                o += 8
                if key == STREAM_TIMESTAMP_HEADER:
                    stream_ts = number
                text = str(number)
            elif letter == 0x49:  # I: int32
                text = str(_I32.unpack_from(raw, o)[0])
                o += 4
            else:
                value_, o = decode_value(raw, o - 1)
                text = _stringify(value_)
            if cols.include_headers and key not in _SKIPPED_HEADERS:
                keys.append(key)
                values.append(text)
        if cols.include_headers:
            cols.header_valid.append(True)
    elif cols.include_headers:
        cols.header_valid.append(False)
    cols.header_offsets.append(len(keys))
    if flags & 0x1000:
        delivery_mode.append(raw[o])
        o += 1
    else:
        delivery_mode.append(None)
    if flags & 0x0800:
        priority.append(raw[o])
        o += 1
    else:
        priority.append(None)
    for bit, column in (
        (0x0400, correlation_id),
        (0x0200, reply_to),
        (0x0100, expiration),
        (0x0080, message_id),
    ):
        if flags & bit:
            value, o = _short(raw, o)
            column.append(value)
        else:
            column.append(None)
    if flags & 0x0040:
        ts = _U64.unpack_from(raw, o)[0]
        o += 8
    for bit, column in ((0x0020, type_), (0x0010, user_id), (0x0008, app_id)):
        if flags & bit:
            value, o = _short(raw, o)
            column.append(value)
        else:
            column.append(None)
    if stream_ts is not None:
        cols.timestamps.append(stream_ts * 1000)
    elif ts is not None:
        cols.timestamps.append(ts * 1_000_000)
    else:
        cols.timestamps.append(None)


def _strings(raw: list[bytes]) -> pa.Array:
    """Short strings as they came off the wire: one binary array, cast (and validated) once."""
    return pa.array(raw, pa.binary()).cast(pa.string())


def build_batch(
    deliveries: Deliveries,
    queue: str,
    offsets: list[int] | None,
    *,
    include_headers: bool = True,
) -> pa.RecordBatch:
    """One record batch in :data:`READ_SCHEMA` from ``deliveries`` (all of them).

    Property lists are decoded once per distinct shape: the per-delivery ``x-stream-offset``
    and ``x-stream-timestamp`` entries are cut out of the raw bytes to form a key, each new key
    is decoded once, and the property/header columns are gathered with one Arrow ``take``.
    Messages that differ in every property (a unique ``message_id`` each) pay one decode each.
    """
    n = len(deliveries.bodies)
    okey = _OFFSET_KEY
    olen = len(okey) + 8
    tkey = _TIMESTAMP_KEY
    tlen = len(tkey) + 8
    unpack = _Q.unpack_from
    cache: dict[bytes, int] = {}
    uniques: list[bytes] = []
    index: list[int] = []
    stream_ts: list[int | None] = []
    saw_stream_ts = False
    for raw in deliveries.properties:
        key = raw
        i = key.find(okey)
        if i >= 0:
            key = key[:i] + key[i + olen :]
        j = key.find(tkey)
        if j >= 0:
            stream_ts.append(unpack(key, j + tlen - 8)[0] * 1000)
            key = key[:j] + key[j + tlen :]
            saw_stream_ts = True
        else:
            stream_ts.append(None)
        slot = cache.get(key)
        if slot is None:
            slot = cache[key] = len(uniques)
            uniques.append(raw)
        index.append(slot)
    cols = _Columns(include_headers)
    for raw in uniques:
        _decode_properties(raw, cols)
    take = pa.array(index, pa.int32())
    if include_headers:
        headers: pa.Array = pa.MapArray.from_arrays(
            pa.array(cols.header_offsets, pa.int32()),
            pa.array(cols.header_keys, pa.string()),
            pa.array(cols.header_values, pa.string()),
            mask=pc.invert(pa.array(cols.header_valid, pa.bool_())),
        ).take(take)
    else:
        headers = pa.nulls(n, READ_SCHEMA.field("headers").type)
    properties = pa.StructArray.from_arrays(
        [pa.array(column, PROPERTIES_TYPE.field(i).type) for i, column in enumerate(cols.props)],
        fields=list(PROPERTIES_TYPE),
    ).take(take)
    timestamps = pa.array(cols.timestamps, _TS).take(take)
    if saw_stream_ts:
        timestamps = pc.coalesce(pa.array(stream_ts, _TS), timestamps)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(deliveries.bodies, pa.binary()),
            _strings(deliveries.routing_keys),
            _strings(deliveries.exchanges),
            pa.repeat(pa.scalar(queue, pa.string()), n),
            pa.array(offsets, pa.int64()) if offsets is not None else pa.nulls(n, pa.int64()),
            timestamps,
            pa.array(deliveries.redelivered, pa.uint8()).cast(pa.bool_()),
            headers,
            properties,
        ],
        schema=READ_SCHEMA,
    )
