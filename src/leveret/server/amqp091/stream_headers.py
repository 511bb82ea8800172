"""Stream deliveries' headers in 0-9-1 form: ``x-stream-offset`` and ``x-stream-timestamp``
spliced into the encoded properties as ``l`` (int64) fields, without decoding the rest.

The splice appends two entries to the headers table (adding the table when there is none);
only when the publisher already set one of these names are the properties decoded and
re-encoded without them first, so a delivery never carries a header twice.
"""

from __future__ import annotations

import struct

from leveret.model.message import HINT_HEADERS, Message
from leveret.model.stream import OFFSET_HEADER, TIMESTAMP_HEADER
from leveret.server.amqp091.message import decode_properties, encode_properties

_LONG = struct.Struct(">q")
_U32 = struct.Struct(">I")
_OFFSET_KEY = bytes([len(OFFSET_HEADER)]) + OFFSET_HEADER.encode() + b"l"
_TIMESTAMP_KEY = bytes([len(TIMESTAMP_HEADER)]) + TIMESTAMP_HEADER.encode() + b"l"


def stream_headers(raw: bytes, offset: int, timestamp: int) -> bytes:
    """``raw`` basic properties with the two stream headers added."""
    if len(raw) < 2:
        raw = b"\x00\x00"
    entries = _OFFSET_KEY + _LONG.pack(offset) + _TIMESTAMP_KEY + _LONG.pack(timestamp)
    flags = raw[0]
    pos = 2
    if flags & 0x80:  # content-type
        pos += 1 + raw[pos]
    if flags & 0x40:  # content-encoding
        pos += 1 + raw[pos]
    if flags & 0x20:  # headers: append to the table
        length = _U32.unpack_from(raw, pos)[0]
        end = pos + 4 + length
        table = _U32.pack(length + len(entries)) + raw[pos + 4 : end] + entries
        return raw[:pos] + table + raw[end:]
    return bytes([flags | 0x20]) + raw[1:pos] + _U32.pack(len(entries)) + entries + raw[pos:]


def stamp_stream(message: Message, offset: int, timestamp: int) -> Message:
    """The ``StreamBackend.stamp`` of the 0-9-1 front end."""
    raw = message.raw_properties
    if message.hints & HINT_HEADERS and (_OFFSET_KEY[:-1] in raw or _TIMESTAMP_KEY[:-1] in raw):
        headers = dict(message.headers or {})
        headers.pop(OFFSET_HEADER, None)
        headers.pop(TIMESTAMP_HEADER, None)
        raw = encode_properties(message.properties, {"headers": headers})
    return Message(
        message.exchange,
        message.routing_key,
        stream_headers(raw, offset, timestamp),
        message.body,
        decode_properties,
        encode_properties,
        message.hints | HINT_HEADERS,
    )
