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

from leveret.convert import amqp10
from leveret.convert.amqp091 import decode_properties, encode_properties
from leveret.convert.amqp10 import FORMAT as AMQP10
from leveret.model.message import HINT_HEADERS, Message
from leveret.model.queues.stream_log import OFFSET_HEADER, TIMESTAMP_HEADER

__all__ = [
    "Restamp",
    "stamp_amqp091",
    "stamp_amqp10",
    "stamp_stream",
    "stamp_values",
    "stream_headers",
]

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
        return stamp_amqp10(message, offset, timestamp)
    return stamp_amqp091(message, offset, timestamp)


# -- 1.0 form: two message annotations -------------------------------------------------------

_MA = b"\x00\x53\x72"
_HEADER_SECTION = 0x70
_MA_SECTION = 0x72
_MAP8 = 0xC1
_MAP32 = 0xD1
_II = struct.Struct(">II")
# A symbol key, then a long (0x81) value.
_OFFSET_ENTRY = bytes([0xA3, len(OFFSET_HEADER)]) + OFFSET_HEADER.encode() + b"\x81"
_TIMESTAMP_ENTRY = bytes([0xA3, len(TIMESTAMP_HEADER)]) + TIMESTAMP_HEADER.encode() + b"\x81"
_ENTRIES_SIZE_10 = len(_OFFSET_ENTRY) + 8 + len(_TIMESTAMP_ENTRY) + 8


class _Stamp10:
    """Where the two annotations go in one 1.0 message's sections before the body: its
    message-annotations map rewritten as a map32 with four more items, or a new map after
    the header. ValueError when the annotations are not a map (the general path then says
    what is wrong)."""

    __slots__ = ("after", "before")

    def __init__(self, raw: bytes) -> None:
        sections = amqp10.first_sections(raw)
        where = sections.get(_MA_SECTION)
        if where is None:
            header = sections.get(_HEADER_SECTION)
            cut = 0 if header is None else header[1]
            head = raw[:cut] + _MA + bytes((_MAP8, _ENTRIES_SIZE_10 + 1, 4))
            self.after = raw[cut:]
        else:
            start, end = where
            code = raw[start + 3]
            if code == _MAP8:
                count = raw[start + 5]
                content = raw[start + 6 : end]
            elif code == _MAP32:
                count = int.from_bytes(raw[start + 8 : start + 12], "big")
                content = raw[start + 12 : end]
            else:
                raise ValueError("message annotations are not a map")
            size = len(content) + _ENTRIES_SIZE_10 + 4
            head = raw[:start] + _MA + bytes((_MAP32,)) + _II.pack(size, count + 4) + content
            self.after = raw[end:]
        self.before = head + _OFFSET_ENTRY

    def stamped(self, offset: int, timestamp: int) -> bytes:
        # A join, not a struct compiled per head: most heads of a stream whose messages
        # each have their own id are seen once.
        return b"".join(
            (self.before, _LONG.pack(offset), _TIMESTAMP_ENTRY, _LONG.pack(timestamp), self.after)
        )


_stamps10: dict[bytes, _Stamp10] = {}


def _stamp10(raw: bytes) -> _Stamp10 | None:
    stamp = _stamps10.get(raw)
    if stamp is None:
        if OFFSET_HEADER.encode() in raw or TIMESTAMP_HEADER.encode() in raw:
            return None  # set by the publisher: the general path replaces them
        try:
            stamp = _Stamp10(raw)
        except (ValueError, IndexError):
            return None
        if len(raw) <= _STAMP_BYTES_MAX:
            if len(_stamps10) >= _STAMPS_MAX:
                _stamps10.clear()
            _stamps10[raw] = stamp
    return stamp


_ZERO8 = bytes(8)


def stamp_values(raw: bytes) -> tuple[bytes, int, int, int] | None:
    """(``raw`` with the two stamp values zeroed, the offset, the timestamp, where the
    offset's entry starts) when ``raw`` holds the two annotations as ``stamp_amqp10``
    writes them, side by side; None otherwise. Whether they are keys of the message
    annotations (not bytes inside a value) is the caller's to check, once per zeroed form:
    those differ only in the values' 16 octets."""
    at = raw.find(_OFFSET_ENTRY)
    if at < 0:
        return None
    value = at + len(_OFFSET_ENTRY)
    second = value + 8
    end = second + len(_TIMESTAMP_ENTRY) + 8
    if end > len(raw) or not raw.startswith(_TIMESTAMP_ENTRY, second):
        return None
    offset: int = _LONG.unpack_from(raw, value)[0]
    timestamp: int = _LONG.unpack_from(raw, end - 8)[0]
    zeroed = b"".join((raw[:value], _ZERO8, _TIMESTAMP_ENTRY, _ZERO8, raw[end:]))
    return zeroed, offset, timestamp, at


class Restamp:
    """Encoded 0-9-1 properties whose ``x-stream-offset`` and ``x-stream-timestamp`` headers
    (``l``, zero) are filled in by one ``struct`` pack: the 0-9-1 form of a stamped 1.0
    message, made once per zeroed form (``stamp_values``)."""

    __slots__ = ("after", "before", "middle", "pack", "swapped")

    def __init__(self, encoded: bytes) -> None:
        a = encoded.find(_OFFSET_KEY)
        b = encoded.find(_TIMESTAMP_KEY)
        if (
            a < 0
            or b < 0
            or encoded.find(_OFFSET_KEY, a + 1) >= 0
            or encoded.find(_TIMESTAMP_KEY, b + 1) >= 0
        ):
            raise ValueError("not the two stream headers once each")
        a += len(_OFFSET_KEY)
        b += len(_TIMESTAMP_KEY)
        self.swapped = b < a
        first, second = (b, a) if self.swapped else (a, b)
        if second < first + 8 or encoded[first : first + 8] != _ZERO8:
            raise ValueError("the stream headers' values are not where they were written")
        self.before = encoded[:first]
        self.middle = encoded[first + 8 : second]
        self.after = encoded[second + 8 :]
        self.pack = struct.Struct(
            f">{len(self.before)}sq{len(self.middle)}sq{len(self.after)}s"
        ).pack

    def fill(self, offset: int, timestamp: int) -> bytes:
        if self.swapped:
            return self.pack(self.before, timestamp, self.middle, offset, self.after)
        return self.pack(self.before, offset, self.middle, timestamp, self.after)


def stamp_amqp10(message: Message, offset: int, timestamp: int) -> Message:
    """A 1.0 ``message`` with the two stream headers as message annotations (long values),
    as RabbitMQ 4 gives them."""
    stamp = _stamp10(message.raw_properties)
    if stamp is None:
        headers = dict(message.headers or {})
        headers[OFFSET_HEADER] = offset
        headers[TIMESTAMP_HEADER] = timestamp
        return message.replace(headers=headers, hints=message.hints | HINT_HEADERS)
    return Message(
        message.exchange,
        message.routing_key,
        stamp.stamped(offset, timestamp),
        message.body,
        amqp10.decode_properties,
        amqp10.encode_properties,
        message.hints | HINT_HEADERS,
        AMQP10,
    )


# -- 0-9-1 form: two header fields -----------------------------------------------------------


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
