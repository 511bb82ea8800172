"""The head of a 0-9-1 publish's stream record, written straight from its property bytes.

A stream keeps a 0-9-1 publish as a 1.0 message (``stream_records.py``): the one table's
sections with the exchange, routing key and property bytes as message annotations.
``stream_records`` keeps that head per distinct property bytes, which a publisher whose
properties differ in every message never reuses: the Spark sink's ``message-id`` and its
``x-stream-sequence`` header do. Such a publish paid a decode of its properties into
Python values and the table on those values (``amqp10_sections.sections``), some 10 µs
in pure Python. :func:`stored_head` reads the property bytes once and writes the same
bytes, for the property sets publishers send: every basic property, and headers whose
values are strings, integers, booleans, byte strings or void. For anything else (a float,
decimal, timestamp, array or table value, a duplicate or non-UTF-8 name, malformed bytes,
and every case where ``sections`` itself gives up) it returns None and the caller takes
the decoding path, which gives the answer or the error. The two must agree byte for byte
(``tests/unit/convert/test_stream_head.py`` compares them over generated properties).

Compiled (``build_info.HOT_PATH_MODULES``).
"""

from __future__ import annotations

import struct
from typing import Final

from leveret.convert.amqp091_headers import i64, u32
from leveret.convert.amqp10_sections import (
    AMQP10_TYPE,
    NULL,
    RESERVED,
    binary,
    described_list,
    described_map,
    string,
    symbol,
    uint,
)

__all__ = ["stored_head"]

_HEADER: Final = b"\x00\x53\x70"
_MA_HEAD: Final = b"\x00\x53\x72\xd1"
_PROPERTIES: Final = b"\x00\x53\x73"
_APPLICATION_PROPERTIES: Final = b"\x00\x53\x74"
_TRUE: Final = b"\x41"
_FALSE: Final = b"\x42"
_EXCHANGE_KEY: Final = b"\xa3\x0ax-exchange"
_ROUTING_KEY_KEY: Final = b"\xa3\x0dx-routing-key"
_PROPERTIES_KEY: Final = b"\xa3\x14x-amqp091-properties"
_TYPE_KEY: Final = b"\xa3\x0cx-basic-type"
# message-id, user-id, reply-to, correlation-id, content-type and -encoding, timestamp,
# app-id: any of them makes a properties section.
_PROPERTIES_FLAGS: Final = 0xC6D8
_LONG_MAX: Final = (1 << 63) - 1
_UINT_MAX: Final = 0xFFFFFFFF
_BB = struct.Struct(">BB").pack
_Bb = struct.Struct(">Bb").pack
_Bq = struct.Struct(">Bq").pack
_II = struct.Struct(">II").pack

# Field-table value letters and the sizes of the fixed-width integer ones.
_S: Final = 0x53  # longstr
_LETTER_t: Final = 0x74  # boolean
_LETTER_x: Final = 0x78  # byte array
_LETTER_V: Final = 0x56  # void
_LETTER_l: Final = 0x6C  # long
_SIGNED: Final = {0x62: 1, 0x73: 2, 0x49: 4, 0x6C: 8, 0x4C: 8, 0x55: 2}  # b s I l L U
_UNSIGNED: Final = {0x42: 1, 0x75: 2, 0x69: 4}  # B u i

_RESERVED: Final = frozenset(name.encode() for name in RESERVED)
_DURABLE: Final = described_list(_HEADER, [_TRUE, NULL, NULL, NULL, NULL])
_NOT_DURABLE: Final = described_list(_HEADER, [_FALSE, NULL, NULL, NULL, NULL])

# The annotations' start by (exchange, routing key), and encoded names by name: a
# publisher sends the same few.
_routing: dict[tuple[str, str], bytes] = {}
_symbols: dict[bytes, bytes] = {}
_strings: dict[bytes, bytes] = {}


def _int(number: int) -> bytes:
    if -128 <= number <= 127:
        return _Bb(0x55, number)
    return _Bq(0x81, number)


def _short(raw: bytes, at: int) -> tuple[str, int]:
    """The shortstr at ``at`` (UTF-8, as the decoder reads it) and the offset after it."""
    end = at + 1 + raw[at]
    if end > len(raw):
        raise IndexError("shortstr runs past the end")
    return raw[at + 1 : end].decode(), end


def stored_head(exchange: str, routing_key: str, raw: bytes) -> bytes | None:
    """What ``stream_records`` stores before the data section of a 0-9-1 publish with
    these property bytes; None when the decoding path must make it (module docstring)."""
    try:
        return _head(exchange, routing_key, raw)
    except (IndexError, UnicodeDecodeError, UnicodeEncodeError, struct.error, OverflowError):
        return None


def _head(exchange: str, routing_key: str, raw: bytes) -> bytes | None:
    if len(raw) < 2:
        return None
    flags = (raw[0] << 8) | raw[1]
    if flags & 0x0003:
        return None  # a continuation or unknown flag: the decoder's error
    at = 2
    content_type = content_encoding = b""
    if flags & 0x8000:
        end = at + 1 + raw[at]
        if end > len(raw):
            return None
        content_type = raw[at + 1 : end]
        at = end
        if not content_type.isascii():
            return None
    if flags & 0x4000:
        end = at + 1 + raw[at]
        if end > len(raw):
            return None
        content_encoding = raw[at + 1 : end]
        at = end
        if not content_encoding.isascii():
            return None
    annotations: list[bytes] = []
    count = 0
    app: list[bytes] = []
    if flags & 0x2000:
        size = u32(raw, at)
        at += 4
        table_end = at + size
        if table_end > len(raw):
            return None
        seen: set[bytes] = set()
        while at < table_end:
            key_end = at + 1 + raw[at]
            if key_end >= table_end:
                return None
            key = raw[at + 1 : key_end]
            if key in seen:
                return None  # the decoder keeps the first place and the last value
            seen.add(key)
            key.decode()  # a name that is not UTF-8 is the decoder's error
            letter = raw[key_end]
            at = key_end + 1
            if letter == _S:
                start = at + 4
                at = start + u32(raw, at)
                if at > table_end:
                    return None
                data = raw[start:at]
                try:
                    data.decode()
                    value = string_bytes(data)
                except UnicodeDecodeError:
                    value = binary(data)  # the decoder gives bytes for it
            elif letter == _LETTER_l:
                value = _int(i64(raw, at))
                at += 8
            elif letter in _SIGNED:
                width = _SIGNED[letter]
                value = _int(int.from_bytes(raw[at : at + width], "big", signed=True))
                at += width
            elif letter in _UNSIGNED:
                width = _UNSIGNED[letter]
                value = _int(int.from_bytes(raw[at : at + width], "big"))
                at += width
            elif letter == _LETTER_t:
                value = _TRUE if raw[at] else _FALSE
                at += 1
            elif letter == _LETTER_x:
                start = at + 4
                at = start + u32(raw, at)
                if at > table_end:
                    return None
                value = binary(raw[start:at])
            elif letter == _LETTER_V:
                value = NULL
            else:
                return None  # floats, decimals, timestamps, arrays, tables, unknown letters
            if at > table_end:
                return None
            if key.startswith(b"x-"):
                if key in _RESERVED:
                    continue
                if key.startswith(b"x-basic-") or key == b"x-cc" or not key.isascii():
                    return None  # the table's own annotations, or not a symbol
                name = _symbols.get(key)
                if name is None:
                    if len(_symbols) >= 256:
                        _symbols.clear()
                    name = _symbols[key] = symbol(key.decode())
                annotations.append(name)
                annotations.append(value)
                count += 2
            else:
                name = _strings.get(key)
                if name is None:
                    if len(_strings) >= 256:
                        _strings.clear()
                    name = _strings[key] = string_bytes(key)
                app.append(name)
                app.append(value)
        if at != table_end:
            return None
    durable = False
    if flags & 0x1000:
        durable = raw[at] == 2
        at += 1
    priority = NULL
    if flags & 0x0800:
        priority = _BB(0x50, raw[at])
        at += 1
    correlation_id = reply_to = expiration = message_id = ""
    if flags & 0x0400:
        correlation_id, at = _short(raw, at)
        if correlation_id.startswith("urn:uuid:"):
            return None
    if flags & 0x0200:
        reply_to, at = _short(raw, at)
    if flags & 0x0100:
        expiration, at = _short(raw, at)
    if flags & 0x0080:
        message_id, at = _short(raw, at)
        if message_id.startswith("urn:uuid:"):
            return None
    creation = NULL
    if flags & 0x0040:
        if at + 8 > len(raw):
            return None
        timestamp = (u32(raw, at) << 32) | u32(raw, at + 4)
        at += 8
        if timestamp * 1000 > _LONG_MAX:
            return None
        creation = _Bq(0x83, timestamp * 1000)
    kind = ""
    if flags & 0x0020:
        kind, at = _short(raw, at)
        if kind != AMQP10_TYPE:
            annotations.append(_TYPE_KEY)
            annotations.append(string(kind))
            count += 2
    user_id = app_id = ""
    if flags & 0x0010:
        user_id, at = _short(raw, at)
    if flags & 0x0008:
        app_id, at = _short(raw, at)
    if flags & 0x0004:
        _short(raw, at)  # cluster-id: read for its errors, not kept
    ttl = NULL
    if expiration and expiration.isascii() and expiration.isdigit():
        ttl = uint(min(int(expiration), _UINT_MAX))
    rest = b""
    if flags & _PROPERTIES_FLAGS:
        rest = described_list(
            _PROPERTIES,
            [
                string(message_id) if flags & 0x0080 else NULL,
                binary(user_id.encode()) if flags & 0x0010 else NULL,
                NULL,
                NULL,
                string(reply_to) if flags & 0x0200 else NULL,
                string(correlation_id) if flags & 0x0400 else NULL,
                symbol(content_type.decode()) if flags & 0x8000 else NULL,
                symbol(content_encoding.decode()) if flags & 0x4000 else NULL,
                NULL,
                creation,
                string(app_id) if flags & 0x0008 else NULL,
            ],
        )
    if app:
        rest += described_map(_APPLICATION_PROPERTIES, b"".join(app), len(app))
    routing = _routing.get((exchange, routing_key))
    if routing is None:
        if len(_routing) >= 256:
            _routing.clear()
        routing = _routing[(exchange, routing_key)] = b"".join(
            (
                _EXCHANGE_KEY,
                string(exchange),
                _ROUTING_KEY_KEY,
                string(routing_key),
                _PROPERTIES_KEY,
            )
        )
    items = b"".join((routing, binary(raw), *annotations))
    if priority == NULL and ttl == NULL:
        header = _DURABLE if durable else _NOT_DURABLE
    else:
        header = described_list(_HEADER, [_TRUE if durable else _FALSE, priority, ttl, NULL, NULL])
    return b"".join((header, _MA_HEAD, _II(len(items) + 4, count + 6), items, rest))


def string_bytes(data: bytes) -> bytes:
    """UTF-8 ``data`` as a 1.0 string (``string`` without the encode)."""
    if len(data) < 256:
        return _BB(0xA1, len(data)) + data
    return b"\xb1" + len(data).to_bytes(4, "big") + data
