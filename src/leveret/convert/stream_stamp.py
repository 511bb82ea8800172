"""What a stream's readers get added to each message: ``x-stream-offset`` and
``x-stream-timestamp`` (``StreamBackend.stamp``), for a message of either form.

A message in 1.0 form gets them as message annotations (as RabbitMQ 4 does). One in 0-9-1
form gets them spliced into the encoded properties as ``l`` (int64) header fields, without
decoding the rest.

The splice appends two entries to the headers table (adding the table when there is none);
only when the publisher already set one of these names are the properties decoded and
re-encoded without them first, so a delivery never carries a header twice. The splice of
each distinct property encoding is kept (a small cache): a stream's readers get messages of
a few encodings, and stamping one is then a single ``struct`` pack.
"""

from __future__ import annotations

import struct

from leveret.convert.amqp091 import decode_properties, encode_properties
from leveret.convert.amqp10 import FORMAT as AMQP10
from leveret.model.message import HINT_HEADERS, Message
from leveret.model.stream import OFFSET_HEADER, TIMESTAMP_HEADER

__all__ = ["stamp_amqp091", "stamp_stream", "stream_headers"]

_LONG = struct.Struct(">q")
_U32 = struct.Struct(">I")
_OFFSET_KEY = bytes([len(OFFSET_HEADER)]) + OFFSET_HEADER.encode() + b"l"
_TIMESTAMP_KEY = bytes([len(TIMESTAMP_HEADER)]) + TIMESTAMP_HEADER.encode() + b"l"


def _splice(raw: bytes, added: int) -> tuple[bytes, bytes]:
    """``raw`` cut where ``added`` bytes of header entries go (the table's size grown)."""
    if len(raw) < 2:
        raw = b"\x00\x00"
    flags = raw[0]
    pos = 2
    if flags & 0x80:  # content-type
        pos += 1 + raw[pos]
    if flags & 0x40:  # content-encoding
        pos += 1 + raw[pos]
    if flags & 0x20:  # headers: append to the table
        length = _U32.unpack_from(raw, pos)[0]
        end = pos + 4 + length
        return raw[:pos] + _U32.pack(length + added) + raw[pos + 4 : end], raw[end:]
    return bytes([flags | 0x20]) + raw[1:pos] + _U32.pack(added), raw[pos:]


_ENTRIES_SIZE = len(_OFFSET_KEY) + 8 + len(_TIMESTAMP_KEY) + 8


def stream_headers(raw: bytes, offset: int, timestamp: int) -> bytes:
    """``raw`` basic properties with the two stream headers added."""
    before, after = _splice(raw, _ENTRIES_SIZE)
    entries = _OFFSET_KEY + _LONG.pack(offset) + _TIMESTAMP_KEY + _LONG.pack(timestamp)
    return before + entries + after


class _Stamp:
    """``stream_headers`` of one property encoding as one ``struct`` pack: the bytes
    before the offset, between it and the timestamp, and after it are the same for every
    message with these properties."""

    __slots__ = ("after", "before", "pack")

    def __init__(self, raw: bytes) -> None:
        before, self.after = _splice(raw, _ENTRIES_SIZE)
        self.before = before + _OFFSET_KEY
        self.pack = struct.Struct(
            f">{len(self.before)}sq{len(_TIMESTAMP_KEY)}sq{len(self.after)}s"
        ).pack


_stamps: dict[bytes, _Stamp] = {}
# Distinct property encodings kept; past this the cache starts over (a publisher that varies
# its properties per message gains nothing from it). Longer encodings are spliced each time,
# so the cache holds under 1 MB.
_STAMPS_MAX = 256
_STAMP_BYTES_MAX = 1024


def stamp_stream(message: Message, offset: int, timestamp: int) -> Message:
    """``message`` with the two stream headers (the ``StreamBackend.stamp`` of the server)."""
    if message.format == AMQP10:
        headers = dict(message.headers or {})
        headers[OFFSET_HEADER] = offset
        headers[TIMESTAMP_HEADER] = timestamp
        return message.replace(headers=headers, hints=message.hints | HINT_HEADERS)
    return stamp_amqp091(message, offset, timestamp)


def stamp_amqp091(message: Message, offset: int, timestamp: int) -> Message:
    """A 0-9-1 ``message`` with the two stream headers spliced into its properties."""
    raw = message.raw_properties
    stamp = _stamps.get(raw)
    if stamp is not None:
        stamped = stamp.pack(stamp.before, offset, _TIMESTAMP_KEY, timestamp, stamp.after)
    elif message.hints & HINT_HEADERS and (_OFFSET_KEY[:-1] in raw or _TIMESTAMP_KEY[:-1] in raw):
        headers = dict(message.headers or {})
        headers.pop(OFFSET_HEADER, None)
        headers.pop(TIMESTAMP_HEADER, None)
        raw = encode_properties(message.properties, {"headers": headers})
        stamped = stream_headers(raw, offset, timestamp)
    elif len(raw) > _STAMP_BYTES_MAX:
        stamped = stream_headers(raw, offset, timestamp)
    else:
        if len(_stamps) >= _STAMPS_MAX:
            _stamps.clear()
        stamp = _stamps[raw] = _Stamp(raw)
        stamped = stamp.pack(stamp.before, offset, _TIMESTAMP_KEY, timestamp, stamp.after)
    return Message(
        message.exchange,
        message.routing_key,
        stamped,
        message.body,
        decode_properties,
        encode_properties,
        message.hints | HINT_HEADERS,
    )
