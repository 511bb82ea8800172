"""What the broker reads of a published 0-9-1 message's headers, from the property bytes.

The router looks for ``CC`` / ``BCC`` in every message that has headers, and a stream looks
for its de-duplication headers (``x-stream-producer``, ``x-stream-sequence``) in every
message it appends; both used to decode the whole property set into Python values for it,
a third of a 0-9-1 append's cost for a writer that sends new headers with every message
(the Spark sink). :func:`scan` walks the bytes instead: it checks them as the decoder
would (every length, every name UTF-8, every short string UTF-8) and returns whether a
``CC`` or ``BCC`` header is there and the de-duplication key as the stream would take it
from the decoded headers. It returns None (the caller decodes, and gets the decoder's
answer or error) for a nested array or table and for bytes it does not take.

Compiled (``build_info.HOT_PATH_MODULES``).
"""

from __future__ import annotations

from typing import Final

from leveret.model.message import HINT_PLAIN_HEADERS
from leveret.model.queues.stream import MAX_PRODUCER_LENGTH

__all__ = ["dedup_key", "headers_hint", "i64", "scan", "u32"]

_PRODUCER: Final = b"x-stream-producer"
_SEQUENCE: Final = b"x-stream-sequence"
_S: Final = 0x53
_L: Final = 0x6C  # l: a long, what clients send for an int beyond 32 bits (and pika's)
_V: Final = 0x56
# Value widths of the fixed-size letters; the integer ones decode to an int.
_INTS: Final = {0x62: 1, 0x42: 1, 0x73: 2, 0x75: 2, 0x55: 2, 0x49: 4, 0x69: 4, 0x6C: 8, 0x4C: 8}
_SIGNED: Final = frozenset((0x62, 0x73, 0x55, 0x49, 0x6C, 0x4C))
_OTHER_FIXED: Final = {0x74: 1, 0x66: 4, 0x64: 8, 0x44: 5}  # t f d D
_SHORTSTR_FLAGS: Final = (0x0400, 0x0200, 0x0100, 0x0080)  # correlation-id .. message-id
_LATER_SHORTSTR_FLAGS: Final = (0x0020, 0x0010, 0x0008, 0x0004)  # type .. cluster-id


def u32(raw: bytes, at: int) -> int:
    """The big-endian unsigned 32-bit integer at ``at`` (IndexError past the end)."""
    return (raw[at] << 24) | (raw[at + 1] << 16) | (raw[at + 2] << 8) | raw[at + 3]


def i64(raw: bytes, at: int) -> int:
    """The big-endian signed 64-bit integer at ``at`` (IndexError past the end)."""
    number = (u32(raw, at) << 32) | u32(raw, at + 4)
    return number - (1 << 64) if number >> 63 else number


def _shortstr(raw: bytes, at: int) -> int:
    """The offset after the short string at ``at``, which must be UTF-8."""
    end = at + 1 + raw[at]
    if end > len(raw):
        raise IndexError("shortstr runs past the end")
    raw[at + 1 : end].decode()
    return end


def scan(raw: bytes) -> tuple[bool, str, int] | None:
    """(a ``CC`` or ``BCC`` header is there, the de-duplication producer and sequence or
    ("", -1)) for property bytes the decoder takes; None when the caller must decode."""
    try:
        return _scan(raw)
    except (IndexError, UnicodeDecodeError):
        return None


def _scan(raw: bytes) -> tuple[bool, str, int] | None:
    if len(raw) < 2:
        return None
    flags = (raw[0] << 8) | raw[1]
    if flags & 0x0003:
        return None
    at = 2
    if flags & 0x8000:
        at = _shortstr(raw, at)
    if flags & 0x4000:
        at = _shortstr(raw, at)
    routes = False
    producer = ""
    sequence = -1
    producer_ok = sequence_ok = False
    if flags & 0x2000:
        end = at + 4 + u32(raw, at)
        at += 4
        if end > len(raw):
            return None
        while at < end:
            key_end = at + 1 + raw[at]
            if key_end >= end:
                return None
            key = raw[at + 1 : key_end]
            if not key.isascii():
                key.decode()
            letter = raw[key_end]
            at = key_end + 1
            number = -1
            is_int = False
            text: bytes | None = None
            if letter == _S:
                start = at + 4
                at = start + u32(raw, at)
                text = raw[start:at]
            elif letter == _L:
                number = i64(raw, at)
                is_int = True
                at += 8
            elif letter in _INTS:
                width = _INTS[letter]
                number = int.from_bytes(raw[at : at + width], "big", signed=letter in _SIGNED)
                is_int = True
                at += width
            elif letter in _OTHER_FIXED:
                at += _OTHER_FIXED[letter]
            elif letter == 0x78:  # x: byte array (bytes, as a non-UTF-8 longstr)
                start = at + 4
                at = start + u32(raw, at)
                text = raw[start:at]
            elif letter != _V:
                return None  # a timestamp (the decoder's range check), array or table
            if at > end:
                return None
            if key == b"CC" or key == b"BCC":
                routes = True
            elif key == _PRODUCER:  # the last of duplicates counts, as in the decoded dict
                producer_ok = False
                if text is not None:
                    try:
                        producer = text.decode()
                    except UnicodeDecodeError:
                        producer = text.decode(errors="replace")
                    producer_ok = 0 < len(producer) <= MAX_PRODUCER_LENGTH
            elif key == _SEQUENCE:
                sequence = number
                sequence_ok = is_int and number >= 0
        if at != end:
            return None
    if flags & 0x1000:
        at += 1
    if flags & 0x0800:
        at += 1
    if at > len(raw):
        return None
    for bit in _SHORTSTR_FLAGS:
        if flags & bit:
            at = _shortstr(raw, at)
    if flags & 0x0040:
        at += 8
        if at > len(raw):
            return None
    for bit in _LATER_SHORTSTR_FLAGS:
        if flags & bit:
            at = _shortstr(raw, at)
    if producer_ok and sequence_ok:
        return routes, producer, sequence
    return routes, "", -1


# The last scan: a publish is scanned by the front end, then asked for its de-duplication
# key when a stream appends it (the same bytes object, on the loop thread).
_last: list[tuple[bytes, tuple[bool, str, int] | None]] = [(b"", None)]


def headers_hint(raw: bytes) -> int:
    """``HINT_PLAIN_HEADERS`` when the bytes decode and hold no ``CC`` or ``BCC``, else 0."""
    found = scan(raw)
    _last[0] = (raw, found)
    return HINT_PLAIN_HEADERS if found is not None and not found[0] else 0


def dedup_key(raw: bytes) -> tuple[str, int] | None:
    """A stream's de-duplication key from these property bytes (("", -1): none); None when
    the caller must read it from the decoded headers."""
    last_raw, found = _last[0]
    if last_raw is not raw:
        found = scan(raw)
    return None if found is None else (found[1], found[2])
