"""Field tables of the 0-9 working draft: numeric type codes instead of 0-9-1's letters.

The draft's XML defines the type codes as constants (``FIELD_TABLE_TYPES``, generated): each
code has a fixed width in octets, or the width of a length prefix, and the code's high nibble
gives that width class even for codes the draft leaves unassigned (``0x0_`` 1 octet,
``0x1_`` 2, ``0x2_`` 4, ``0x3_`` 8, ``0x4_`` 16, ``0x5_`` 32, ``0x6_`` 64, ``0x7_`` 128,
``0x8_``/``0x9_``/``0xa_`` a 1/2/4-octet length then that many octets, ``0xc_`` 5, ``0xd_`` 9,
``0xf_`` none; ``0xb_`` and ``0xe_`` are reserved). So a value of an unknown code is skipped
(returned as its bytes) rather than refused.

What the draft leaves open, and the reading taken (also in docs/compatibility.md):

- the table's own framing is not given: it is 0-9's (a long byte length, then
  ``shortstr name, type octet, value`` entries) with the draft's codes in the type octet;
- an array (``0xaa``, and the ``array`` domain of result structs) is, as its constant says,
  an element type octet, a long element count, then the values without their type octets,
  all behind the 4-octet length prefix of its width class.

========================  ==================================  ============================
codes                      wire value                          Python value
========================  ==================================  ============================
0x08                       octet 0/1                           ``bool``
0x01 0x11 0x21 0x31        signed 8/16/32/64-bit               ``int``
0x02 0x12 0x22 0x32        unsigned 8/16/32/64-bit             ``int``
0x23 0x33                  IEEE float 32/64                    ``float``
0xc8 0xd8                  scale octet + int32 / int64         ``decimal.Decimal``
0x04 0x27                  one iso-8859-15 / UTF-32 character  ``str``
0x84 0x94 0xa4             iso-8859-15 string                  ``str``
0x85/6/7 0x95/6/7 0xa5/6/7 UTF-8/16/32 string                  ``str``
0x38                       64-bit POSIX seconds                ``datetime`` (UTC)
0xa8                       table                               ``dict``
0xa9 0xaa                  sequence / array                    ``list``
0xf0                       nothing                             ``None``
others                     their octets                        ``bytes``
========================  ==================================  ============================

Encoding picks: bool→0x08, int→0x21 or 0x31, float→0x33, Decimal→0xc8 or 0xd8,
str→0x95 (0xa5 beyond 65535 octets), bytes→0xa0, datetime→0x38, list→0xa9 (sequence),
dict→0xa8, None→0xf0. Every malformed input raises :class:`leveret.errors.SyntaxError_`.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from leveret.errors import SyntaxError_
from leveret.protocol.amqp09.draft._generated.constants import FIELD_TABLE_TYPES
from leveret.protocol.amqp091.fieldtable import MAX_DEPTH, FieldTable, FieldValue

__all__ = [
    "FieldTable",
    "FieldValue",
    "decode_array",
    "decode_table",
    "decode_value",
    "encode_array",
    "encode_table",
    "encode_value",
]

_UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_MAX_TIMESTAMP = 253402300799  # 9999-12-31T23:59:59Z

# Width class of each high nibble: (fixed width, length-prefix width); None = reserved.
_NIBBLE: dict[int, tuple[int, int]] = {
    0x0: (1, 0),
    0x1: (2, 0),
    0x2: (4, 0),
    0x3: (8, 0),
    0x4: (16, 0),
    0x5: (32, 0),
    0x6: (64, 0),
    0x7: (128, 0),
    0x8: (0, 1),
    0x9: (0, 2),
    0xA: (0, 4),
    0xC: (5, 0),
    0xD: (9, 0),
    0xF: (0, 0),
}
_PREFIX = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">L")}
_INTS = {
    (1, True): struct.Struct(">b"),
    (2, True): struct.Struct(">h"),
    (4, True): struct.Struct(">i"),
    (8, True): struct.Struct(">q"),
    (1, False): struct.Struct(">B"),
    (2, False): struct.Struct(">H"),
    (4, False): struct.Struct(">I"),
    (8, False): struct.Struct(">Q"),
}
_FLOATS = {4: struct.Struct(">f"), 8: struct.Struct(">d")}
_DECIMALS = {5: struct.Struct(">Bi"), 9: struct.Struct(">Bq")}
_TEXT = {0x4: "iso8859_15", 0x5: "utf-8", 0x6: "utf-16-be", 0x7: "utf-32-be"}
_L = struct.Struct(">L")
_BL = struct.Struct(">BL")

BOOLEAN, INT32, INT64, DOUBLE, DECIMAL, LONG_DECIMAL = 0x08, 0x21, 0x31, 0x33, 0xC8, 0xD8
UTF8_STRING, LONG_UTF8_STRING, LONG_BINARY, DATETIME = 0x95, 0xA5, 0xA0, 0x38
TABLE, SEQUENCE, ARRAY, VOID = 0xA8, 0xA9, 0xAA, 0xF0


def _widths(code: int) -> tuple[str, int, int]:
    known = FIELD_TABLE_TYPES.get(code)
    if known is not None:
        return known
    cls = _NIBBLE.get(code >> 4)
    if cls is None:
        raise SyntaxError_(f"field table: type code 0x{code:02x} is in a reserved range")
    return "binary", cls[0], cls[1]


# -- decoding --------------------------------------------------------------------------------


def _value(code: int, buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    """Decode the value of type ``code`` at ``off`` (after its type octet)."""
    datatype, width, lfwidth = _widths(code)
    if lfwidth:
        size = _PREFIX[lfwidth].unpack_from(buf, off)[0]
        start = off + lfwidth
        end = start + size
        if end > len(buf):
            raise SyntaxError_("field table: a value runs past the end of the data")
        if datatype == "field-table":
            table, stop = _table_body(buf, start, end, depth + 1)
            return table, stop
        if datatype == "sequence":
            return _sequence_body(buf, start, end, depth + 1), end
        if datatype == "array":
            return _array_body(buf, start, end, depth + 1), end
        raw = buf[start:end]
        if datatype == "string":
            return raw.decode(_TEXT.get(code & 0xF, "iso8859_15")), end
        return raw, end
    end = off + width
    if end > len(buf):
        raise SyntaxError_("field table: a value runs past the end of the data")
    if datatype == "boolean":
        return buf[off] != 0, end
    if datatype in ("signed-integer", "unsigned-integer"):
        return _INTS[width, datatype == "signed-integer"].unpack_from(buf, off)[0], end
    if datatype == "ieee-float":
        return _FLOATS[width].unpack_from(buf, off)[0], end
    if datatype == "decimal":
        scale, value = _DECIMALS[width].unpack_from(buf, off)
        return decimal.Decimal(value).scaleb(-scale), end
    if datatype == "char":
        return buf[off:end].decode("iso8859_15" if width == 1 else "utf-32-be"), end
    if datatype == "void":
        return None, end
    if code == DATETIME:
        secs = _INTS[8, False].unpack_from(buf, off)[0]
        if secs > _MAX_TIMESTAMP:
            raise SyntaxError_(f"field table: timestamp {secs} is beyond year 9999")
        return _EPOCH + datetime.timedelta(seconds=secs), end
    return buf[off:end], end


def _table_body(buf: bytes, off: int, end: int, depth: int) -> tuple[FieldTable, int]:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    result: FieldTable = {}
    while off < end:
        kend = off + 1 + buf[off]
        if kend >= end:
            raise SyntaxError_("field table: entry runs past the end of the table")
        key = buf[off + 1 : kend].decode()
        value, off = _value(buf[kend], buf, kend + 1, depth)
        result[key] = value
    if off != end:
        raise SyntaxError_("field table: a value runs past the end of the table")
    return result, end


def _sequence_body(buf: bytes, off: int, end: int, depth: int) -> list[FieldValue]:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    items: list[FieldValue] = []
    while off < end:
        value, off = _value(buf[off], buf, off + 1, depth)
        items.append(value)
    if off != end:
        raise SyntaxError_("field table: a value runs past the end of its sequence")
    return items


def _array_body(buf: bytes, off: int, end: int, depth: int) -> list[FieldValue]:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    code, count = _BL.unpack_from(buf, off)
    off += 5
    if count > end - off and _widths(code)[1:] != (0, 0):
        # Every element but void takes at least one octet: a bigger count is a lie.
        raise SyntaxError_(f"field table: array of {count} elements in {end - off} octets")
    items: list[FieldValue] = []
    for _ in range(count):
        value, off = _value(code, buf, off, depth)
        items.append(value)
    if off != end:
        raise SyntaxError_("field table: the elements of an array do not fill it")
    return items


_DECODE_ERRORS = (struct.error, IndexError, UnicodeDecodeError, RecursionError, ValueError)


def _bytes(buf: bytes | bytearray | memoryview) -> bytes:
    return buf if type(buf) is bytes else bytes(buf)


def decode_table(buf: bytes | bytearray | memoryview, offset: int) -> tuple[FieldTable, int]:
    """Decode the length-prefixed field table at ``offset``; return (table, offset after)."""
    data = _bytes(buf)
    try:
        size = _L.unpack_from(data, offset)[0]
        end = offset + 4 + size
        if end > len(data):
            raise SyntaxError_("field table: length runs past the end of the data")
        return _table_body(data, offset + 4, end, 0)
    except SyntaxError_:
        raise
    except _DECODE_ERRORS as exc:
        raise SyntaxError_(f"field table: malformed data ({exc})") from exc


def decode_array(buf: bytes | bytearray | memoryview, offset: int) -> tuple[list[FieldValue], int]:
    """Decode the length-prefixed array at ``offset``; return (items, offset after it)."""
    data = _bytes(buf)
    try:
        value, end = _value(ARRAY, data, offset, 0)
    except SyntaxError_:
        raise
    except _DECODE_ERRORS as exc:
        raise SyntaxError_(f"field array: malformed data ({exc})") from exc
    assert isinstance(value, list)
    return value, end


def decode_value(buf: bytes | bytearray | memoryview, offset: int) -> tuple[FieldValue, int]:
    """Decode one ``type octet + value`` at ``offset``; return (value, offset after it)."""
    data = _bytes(buf)
    try:
        return _value(data[offset], data, offset + 1, 0)
    except SyntaxError_:
        raise
    except _DECODE_ERRORS as exc:
        raise SyntaxError_(f"field value: malformed data ({exc})") from exc


# -- encoding --------------------------------------------------------------------------------

_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_WIDER = ((INT32, INT64), (DECIMAL, LONG_DECIMAL), (UTF8_STRING, LONG_UTF8_STRING))


def _code_for(value: object) -> int:
    if value is None:
        return VOID
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        if _I32[0] <= value <= _I32[1]:
            return INT32
        if _I64[0] <= value <= _I64[1]:
            return INT64
        raise SyntaxError_(f"field table: integer {value} does not fit in 64 bits")
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, decimal.Decimal):
        mantissa = _decimal_parts(value)[1]
        if _I32[0] <= mantissa <= _I32[1]:
            return DECIMAL
        if _I64[0] <= mantissa <= _I64[1]:
            return LONG_DECIMAL
        raise SyntaxError_(f"field table: decimal {value} does not fit in 64 bits")
    if isinstance(value, str):
        return UTF8_STRING if len(value.encode()) <= 0xFFFF else LONG_UTF8_STRING
    if isinstance(value, bytes | bytearray | memoryview):
        return LONG_BINARY
    if isinstance(value, datetime.datetime):
        return DATETIME
    if isinstance(value, Mapping):
        return TABLE
    if isinstance(value, list | tuple):
        return SEQUENCE
    raise SyntaxError_(f"field table: cannot encode a value of type {type(value).__name__}")


def _decimal_parts(value: decimal.Decimal) -> tuple[int, int]:
    if not value.is_finite():
        raise SyntaxError_(f"field table: decimal {value} is not finite")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        mantissa *= 10**exponent
        exponent = 0
    if not 0 <= -exponent <= 255:
        raise SyntaxError_(f"field table: decimal {value} has more than 255 places")
    return -exponent, -mantissa if sign else mantissa


def _encode(code: int, value: Any, out: list[bytes], depth: int) -> None:
    """Append the wire form of ``value`` as type ``code`` (without the type octet)."""
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    if code == VOID:
        return
    if code == BOOLEAN:
        out.append(b"\x01" if value else b"\x00")
    elif code in (INT32, INT64):
        out.append(_INTS[4 if code == INT32 else 8, True].pack(value))
    elif code == DOUBLE:
        out.append(_FLOATS[8].pack(value))
    elif code in (DECIMAL, LONG_DECIMAL):
        scale, mantissa = _decimal_parts(value)
        out.append(_DECIMALS[5 if code == DECIMAL else 9].pack(scale, mantissa))
    elif code in (UTF8_STRING, LONG_UTF8_STRING):
        data = value.encode()
        out.append(_PREFIX[2 if code == UTF8_STRING else 4].pack(len(data)) + data)
    elif code == LONG_BINARY:
        data = bytes(value)
        out.append(_L.pack(len(data)) + data)
    elif code == DATETIME:
        secs = calendar.timegm(value.utctimetuple())
        if secs < 0:
            raise SyntaxError_(f"field table: timestamp {value} is before 1970")
        out.append(_INTS[8, False].pack(secs))
    elif code == TABLE:
        out.append(_table_bytes(value, depth + 1))
    elif code == SEQUENCE:
        body = b"".join(_value_bytes(item, depth + 1) for item in value)
        out.append(_L.pack(len(body)) + body)
    else:  # pragma: no cover - _code_for returns only the codes above
        raise AssertionError(code)


def _value_bytes(value: object, depth: int) -> bytes:
    """``type octet + value``."""
    code = _code_for(value)
    out = [bytes((code,))]
    _encode(code, value, out, depth)
    return b"".join(out)


def _table_bytes(table: Mapping[str, Any], depth: int) -> bytes:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    parts: list[bytes] = []
    for key, value in table.items():
        if not isinstance(key, str):
            raise SyntaxError_(f"field table: field name {key!r} is not a string")
        name = key.encode()
        if len(name) > 255:
            raise SyntaxError_(f"field table: field name {key[:40]!r}... longer than 255 bytes")
        parts.append(bytes((len(name),)) + name + _value_bytes(value, depth))
    body = b"".join(parts)
    return _L.pack(len(body)) + body


_ENCODE_ERRORS = (struct.error, RecursionError, UnicodeEncodeError, OverflowError, ValueError)


def encode_table(table: Mapping[str, FieldValue] | None) -> bytes:
    """Encode ``table`` as a length-prefixed field table (``None`` → empty table)."""
    try:
        return _table_bytes(table or {}, 0)
    except _ENCODE_ERRORS as exc:
        raise SyntaxError_(f"field table: cannot encode ({exc})") from exc


def encode_array(items: Sequence[FieldValue]) -> bytes:
    """Encode ``items`` (all of one type) as a length-prefixed array; ``[]`` has type void."""
    codes = {_code_for(item) for item in items}
    # Narrow and wide forms of one kind share the wide element type.
    for narrow, wide in _WIDER:
        if codes == {narrow, wide}:
            codes = {wide}
    if len(codes) > 1:
        raise SyntaxError_(f"field array: elements of {len(codes)} types, arrays hold one")
    code = codes.pop() if codes else VOID
    out: list[bytes] = []
    try:
        for item in items:
            _encode(code, item, out, 1)
    except _ENCODE_ERRORS as exc:
        raise SyntaxError_(f"field array: cannot encode ({exc})") from exc
    body = _BL.pack(code, len(items)) + b"".join(out)
    return _L.pack(len(body)) + body


def encode_value(value: FieldValue) -> bytes:
    """Encode one value as ``type octet + value`` (the form it takes inside a table)."""
    try:
        return _value_bytes(value, 0)
    except _ENCODE_ERRORS as exc:
        raise SyntaxError_(f"field value: cannot encode ({exc})") from exc
