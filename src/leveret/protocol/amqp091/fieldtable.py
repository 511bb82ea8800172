"""AMQP 0-9-1 field tables and arrays, with RabbitMQ's type letters.

Wire format (spec 4.2.5.5, RabbitMQ errata "field types"): a table is a 4-byte big-endian
byte length followed by ``shortstr name, type octet, value`` entries; an array is a 4-byte
byte length followed by ``type octet, value`` entries.

============  =======================  ==============================
type letter   wire value               Python value (decoded)
============  =======================  ==============================
``t``         octet 0/1                ``bool``
``b`` ``B``   int8 / uint8             ``int``
``s`` ``u``   int16 / uint16           ``int``
``I`` ``i``   int32 / uint32           ``int``
``l``         int64                    ``int``
``f`` ``d``   float32 / float64        ``float``
``D``         scale octet + int32      ``decimal.Decimal``
``S``         longstr                  ``str`` (``bytes`` if not UTF-8)
``x``         longstr-shaped bytes     ``bytes``
``A``         array                    ``list``
``T``         uint64 POSIX seconds     ``datetime`` (UTC, tz-aware)
``F``         nested table             ``dict``
``V``         nothing                  ``None``
``L`` ``U``   int64 / int16            ``int`` (decode only: py-amqp, spec)
============  =======================  ==============================

Encoding picks the letter from the Python type: bool→t, int→I (int32) or l (int64),
float→d, Decimal→D, str→S, bytes-like→x, datetime→T, list/tuple→A, dict→F, None→V.

Every malformed input raises :class:`leveret.errors.SyntaxError_` (502), never a raw
``struct.error``/``IndexError``/``UnicodeDecodeError``/``RecursionError``.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import struct
from collections.abc import Callable, Mapping
from typing import TypeAlias

from leveret.errors import SyntaxError_

__all__ = [
    "MAX_DEPTH",
    "FieldTable",
    "FieldValue",
    "decode_array",
    "decode_table",
    "decode_value",
    "encode_array",
    "encode_table",
    "encode_value",
    "field_values_equal",
]

FieldValue: TypeAlias = (
    "bool | int | float | decimal.Decimal | str | bytes | datetime.datetime"
    " | list[FieldValue] | dict[str, FieldValue] | None"
)
FieldTable: TypeAlias = "dict[str, FieldValue]"

Buffer: TypeAlias = "bytes | bytearray | memoryview"

MAX_DEPTH = 100
"""Deepest nesting of tables/arrays accepted by the decoder (and produced by the encoder)."""

_UTC = datetime.UTC
_MAX_TIMESTAMP = 253402300799  # 9999-12-31T23:59:59Z, the largest datetime can hold

_U8 = struct.Struct(">B")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_DEC = struct.Struct(">Bi")

_u32_unpack = _U32.unpack_from

# ---------------------------------------------------------------------------------------------
# Decoding
#
# Each decoder takes (buf, offset, depth) with ``offset`` just after the type octet and returns
# (value, new offset).  Fixed-width values rely on ``struct.unpack_from`` raising on truncation
# (converted to SyntaxError_ once, at the entry points); variable-length values check their end
# against ``len(buf)`` explicitly because slicing never raises.  A value that runs past the end
# of its enclosing table/array is caught by the ``offset != end`` check of that container.
# ---------------------------------------------------------------------------------------------

_Decoder: TypeAlias = "Callable[[Buffer, int, int], tuple[FieldValue, int]]"


def _fixed(st: struct.Struct) -> _Decoder:
    unpack = st.unpack_from
    size = st.size

    def dec(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
        return unpack(buf, off)[0], off + size

    return dec


def _dec_bool(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    return buf[off] != 0, off + 1


def _dec_decimal(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    scale, value = _DEC.unpack_from(buf, off)
    return decimal.Decimal(value).scaleb(-scale), off + 5


def _dec_longstr(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    start = off + 4
    end = start + _u32_unpack(buf, off)[0]
    if end > len(buf):
        raise SyntaxError_("field table: longstr runs past the end of the data")
    try:
        return str(buf[start:end], "utf-8"), end
    except UnicodeDecodeError:
        return bytes(buf[start:end]), end


def _dec_bytes(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    start = off + 4
    end = start + _u32_unpack(buf, off)[0]
    if end > len(buf):
        raise SyntaxError_("field table: byte array runs past the end of the data")
    return bytes(buf[start:end]), end


def _dec_timestamp(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    secs = _U64.unpack_from(buf, off)[0]
    if secs > _MAX_TIMESTAMP:
        raise SyntaxError_(f"field table: timestamp {secs} is beyond year 9999")
    return datetime.datetime.fromtimestamp(secs, _UTC), off + 8


def _dec_void(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    return None, off


def _dec_table(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    return _table(buf, off, depth + 1)


def _dec_array(buf: Buffer, off: int, depth: int) -> tuple[FieldValue, int]:
    return _array(buf, off, depth + 1)


_DECODERS: dict[int, _Decoder] = {
    ord("t"): _dec_bool,
    ord("b"): _fixed(_I8),
    ord("B"): _fixed(_U8),
    ord("s"): _fixed(_I16),
    ord("u"): _fixed(_U16),
    ord("I"): _fixed(_I32),
    ord("i"): _fixed(_U32),
    ord("l"): _fixed(_I64),
    # Not RabbitMQ letters, but sent by other stacks: py-amqp (kombu, celery) writes int64 as
    # 'L', and 'U' is the 0-9-1 spec's own letter for int16.  Accepting them costs nothing.
    ord("L"): _fixed(_I64),
    ord("U"): _fixed(_I16),
    ord("f"): _fixed(_F32),
    ord("d"): _fixed(_F64),
    ord("D"): _dec_decimal,
    ord("S"): _dec_longstr,
    ord("x"): _dec_bytes,
    ord("A"): _dec_array,
    ord("T"): _dec_timestamp,
    ord("F"): _dec_table,
    ord("V"): _dec_void,
}


def _unknown(letter: int) -> SyntaxError_:
    shown = chr(letter) if 0x20 < letter < 0x7F else f"0x{letter:02x}"
    return SyntaxError_(f"field table: unknown field type {shown!r}")


def _table(buf: Buffer, off: int, depth: int) -> tuple[FieldTable, int]:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    off += 4
    end = off + _u32_unpack(buf, off - 4)[0]
    if end > len(buf):
        raise SyntaxError_("field table: length runs past the end of the data")
    result: FieldTable = {}
    decoders = _DECODERS
    while off < end:
        n = buf[off]
        kend = off + 1 + n
        if kend >= end:
            raise SyntaxError_("field table: entry runs past the end of the table")
        key = str(buf[off + 1 : kend], "utf-8")
        letter = buf[kend]
        dec = decoders.get(letter)
        if dec is None:
            raise _unknown(letter)
        result[key], off = dec(buf, kend + 1, depth)
    if off != end:
        raise SyntaxError_("field table: a value runs past the end of the table")
    return result, off


def _array(buf: Buffer, off: int, depth: int) -> tuple[list[FieldValue], int]:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field array: nested deeper than {MAX_DEPTH} levels")
    off += 4
    end = off + _u32_unpack(buf, off - 4)[0]
    if end > len(buf):
        raise SyntaxError_("field array: length runs past the end of the data")
    result: list[FieldValue] = []
    append = result.append
    decoders = _DECODERS
    while off < end:
        letter = buf[off]
        dec = decoders.get(letter)
        if dec is None:
            raise _unknown(letter)
        value, off = dec(buf, off + 1, depth)
        append(value)
    if off != end:
        raise SyntaxError_("field array: a value runs past the end of the array")
    return result, off


def decode_table(buf: Buffer, offset: int) -> tuple[FieldTable, int]:
    """Decode the length-prefixed field table at ``offset``; return (table, offset after it)."""
    try:
        return _table(buf, offset, 0)
    except SyntaxError_:
        raise
    except (struct.error, IndexError) as exc:
        raise SyntaxError_("field table: truncated data") from exc
    except UnicodeDecodeError as exc:
        raise SyntaxError_("field table: field name is not valid UTF-8") from exc
    except (RecursionError, ValueError, OverflowError, OSError) as exc:
        raise SyntaxError_(f"field table: malformed data ({exc})") from exc


def decode_array(buf: Buffer, offset: int) -> tuple[list[FieldValue], int]:
    """Decode the length-prefixed field array at ``offset``; return (list, offset after it)."""
    try:
        return _array(buf, offset, 0)
    except SyntaxError_:
        raise
    except (struct.error, IndexError) as exc:
        raise SyntaxError_("field array: truncated data") from exc
    except UnicodeDecodeError as exc:
        raise SyntaxError_("field array: field name is not valid UTF-8") from exc
    except (RecursionError, ValueError, OverflowError, OSError) as exc:
        raise SyntaxError_(f"field array: malformed data ({exc})") from exc


def decode_value(buf: Buffer, offset: int) -> tuple[FieldValue, int]:
    """Decode one ``type octet + value`` at ``offset``; return (value, offset after it)."""
    try:
        letter = buf[offset]
        dec = _DECODERS.get(letter)
        if dec is None:
            raise _unknown(letter)
        return dec(buf, offset + 1, 0)
    except SyntaxError_:
        raise
    except (struct.error, IndexError) as exc:
        raise SyntaxError_("field value: truncated data") from exc
    except UnicodeDecodeError as exc:
        raise SyntaxError_("field value: field name is not valid UTF-8") from exc
    except (RecursionError, ValueError, OverflowError, OSError) as exc:
        raise SyntaxError_(f"field value: malformed data ({exc})") from exc


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_ZERO_LEN = b"\x00\x00\x00\x00"

_pack_I = struct.Struct(">cI").pack
_pack_bool_t = b"t\x01"
_pack_bool_f = b"t\x00"
_pack_int32 = struct.Struct(">ci").pack
_pack_int64 = struct.Struct(">cq").pack
_pack_f64 = struct.Struct(">cd").pack
_pack_dec = struct.Struct(">cBi").pack
_pack_ts = struct.Struct(">cQ").pack
_pack_u32 = _U32.pack

_Encoder: TypeAlias = "Callable[[list[bytes], object, int], None]"


def _enc_bool(out: list[bytes], v: object, depth: int) -> None:
    out.append(_pack_bool_t if v else _pack_bool_f)


def _enc_int(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, int)
    if _I32_MIN <= v <= _I32_MAX:
        out.append(_pack_int32(b"I", v))
    elif _I64_MIN <= v <= _I64_MAX:
        out.append(_pack_int64(b"l", v))
    else:
        raise SyntaxError_(f"field table: integer {v} does not fit in 64 bits")


def _enc_float(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, float)
    out.append(_pack_f64(b"d", v))


def _enc_decimal(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, decimal.Decimal)
    if not v.is_finite():
        raise SyntaxError_(f"field table: decimal {v} is not finite")
    sign, digits, exponent = v.as_tuple()
    assert isinstance(exponent, int)
    value = 0
    for digit in digits:
        value = value * 10 + digit
    if exponent > 0:
        value *= 10**exponent
        exponent = 0
    scale = -exponent
    # Drop trailing zeros when that is what it takes to fit the scale octet.
    while scale > 255 and value % 10 == 0 and value:
        value //= 10
        scale -= 1
    if value == 0 and scale > 255:
        scale = 255
    if sign:
        value = -value
    if scale > 255 or not _I32_MIN <= value <= _I32_MAX:
        raise SyntaxError_(f"field table: decimal {v} does not fit scale octet + int32")
    out.append(_pack_dec(b"D", scale, value))


def _enc_str(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, str)
    data = v.encode()
    out.append(_pack_I(b"S", len(data)))
    out.append(data)


def _enc_bytes(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, bytes | bytearray | memoryview)
    data = bytes(v)
    out.append(_pack_I(b"x", len(data)))
    out.append(data)


def _enc_datetime(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, datetime.datetime)
    # Naive datetimes are taken as UTC (as pika and py-amqp do); fractions are truncated.
    secs = calendar.timegm(v.utctimetuple())
    if secs < 0:
        raise SyntaxError_(f"field table: timestamp {v} is before 1970")
    out.append(_pack_ts(b"T", secs))


def _enc_none(out: list[bytes], v: object, depth: int) -> None:
    out.append(b"V")


def _enc_list(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, list | tuple)
    out.append(b"A")
    _encode_array_into(out, v, depth + 1)


def _enc_dict(out: list[bytes], v: object, depth: int) -> None:
    assert isinstance(v, Mapping)
    out.append(b"F")
    _encode_table_into(out, v, depth + 1)


_ENCODERS: dict[type, _Encoder] = {
    bool: _enc_bool,
    int: _enc_int,
    float: _enc_float,
    decimal.Decimal: _enc_decimal,
    str: _enc_str,
    bytes: _enc_bytes,
    bytearray: _enc_bytes,
    memoryview: _enc_bytes,
    datetime.datetime: _enc_datetime,
    type(None): _enc_none,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_dict,
}

# Order matters for subclasses: bool before int.
_FALLBACK: tuple[tuple[type | tuple[type, ...], _Encoder], ...] = (
    (bool, _enc_bool),
    (int, _enc_int),
    (float, _enc_float),
    (decimal.Decimal, _enc_decimal),
    (str, _enc_str),
    ((bytes, bytearray, memoryview), _enc_bytes),
    (datetime.datetime, _enc_datetime),
    ((list, tuple), _enc_list),
    (Mapping, _enc_dict),
)


def _encoder_for(v: object) -> _Encoder:
    enc = _ENCODERS.get(type(v))
    if enc is not None:
        return enc
    for types, enc in _FALLBACK:
        if isinstance(v, types):
            return enc
    raise SyntaxError_(f"field table: cannot encode a value of type {type(v).__name__}")


def _encode_table_into(out: list[bytes], table: Mapping[str, object], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    index = len(out)
    out.append(_ZERO_LEN)  # placeholder for the length
    encoders = _ENCODERS
    for key, value in table.items():
        if not isinstance(key, str):
            raise SyntaxError_(f"field table: field name {key!r} is not a string")
        kb = key.encode()
        if len(kb) > 255:
            raise SyntaxError_(f"field table: field name {key[:40]!r}... longer than 255 bytes")
        out.append(bytes((len(kb),)))
        out.append(kb)
        enc = encoders.get(type(value))
        if enc is None:
            enc = _encoder_for(value)
        enc(out, value, depth)
    size = 0
    for i in range(index + 1, len(out)):
        size += len(out[i])
    out[index] = _pack_u32(size)


def _encode_array_into(
    out: list[bytes], items: list[object] | tuple[object, ...], depth: int
) -> None:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field array: nested deeper than {MAX_DEPTH} levels")
    index = len(out)
    out.append(_ZERO_LEN)
    encoders = _ENCODERS
    for value in items:
        enc = encoders.get(type(value))
        if enc is None:
            enc = _encoder_for(value)
        enc(out, value, depth)
    size = 0
    for i in range(index + 1, len(out)):
        size += len(out[i])
    out[index] = _pack_u32(size)


def _check_size(data: bytes) -> bytes:
    if len(data) - 4 > 0xFFFFFFFF:
        raise SyntaxError_("field table: longer than 4 GiB")
    return data


def encode_table(table: Mapping[str, FieldValue] | None) -> bytes:
    """Encode ``table`` as a length-prefixed field table (``None`` → empty table)."""
    if not table:
        return _ZERO_LEN
    out: list[bytes] = []
    try:
        _encode_table_into(out, table, 0)
    except (struct.error, RecursionError) as exc:
        raise SyntaxError_(f"field table: cannot encode ({exc})") from exc
    return b"".join(out)


def encode_array(items: list[FieldValue] | tuple[FieldValue, ...]) -> bytes:
    """Encode ``items`` as a length-prefixed field array."""
    out: list[bytes] = []
    try:
        _encode_array_into(out, items, 0)  # type: ignore[arg-type]
    except (struct.error, RecursionError) as exc:
        raise SyntaxError_(f"field array: cannot encode ({exc})") from exc
    return b"".join(out)


def encode_value(value: FieldValue) -> bytes:
    """Encode one value as ``type octet + value`` (the form it takes inside a table)."""
    out: list[bytes] = []
    try:
        _encoder_for(value)(out, value, 0)
    except (struct.error, RecursionError) as exc:
        raise SyntaxError_(f"field value: cannot encode ({exc})") from exc
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# Comparison (headers exchange)
# ---------------------------------------------------------------------------------------------

_NUMBER = (int, float, decimal.Decimal)


def _as_binary(v: object) -> bytes | None:
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    return None


def field_values_equal(a: FieldValue, b: FieldValue) -> bool:
    """Compare two field values the way RabbitMQ's headers exchange does (Erlang ``==``).

    * numbers (int, float, Decimal) compare numerically: ``1 == 1.0 == Decimal("1")``;
    * a bool equals only the same bool, never a number (Erlang atoms vs integers);
    * str and bytes compare as the same binary (str as its UTF-8 bytes);
    * a timestamp is an integer in RabbitMQ, so a datetime equals a number of the same
      POSIX seconds, and another datetime at the same instant;
    * lists compare elementwise, dicts key by key, with these same rules;
    * ``None`` (void) equals only ``None``.  (The headers exchange's rule that a void binding
      argument matches any value is the exchange's business, not this function's.)
    """
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, datetime.datetime):
        a = _timestamp(a)
    if isinstance(b, datetime.datetime):
        b = _timestamp(b)
    if isinstance(a, _NUMBER):
        if isinstance(b, _NUMBER):
            if isinstance(a, float) and isinstance(b, decimal.Decimal):
                return decimal.Decimal(a) == b
            if isinstance(b, float) and isinstance(a, decimal.Decimal):
                return decimal.Decimal(b) == a
            return a == b
        return False
    if isinstance(a, str | bytes | bytearray | memoryview):
        ab = _as_binary(a)
        bb = _as_binary(b)
        return bb is not None and ab == bb
    if isinstance(a, list | tuple):
        if not isinstance(b, list | tuple) or len(a) != len(b):
            return False
        return all(field_values_equal(x, y) for x, y in zip(a, b, strict=True))
    if not isinstance(a, Mapping) or not isinstance(b, Mapping) or len(a) != len(b):
        return False
    for key, value in a.items():
        if key not in b or not field_values_equal(value, b[key]):
            return False
    return True


def _timestamp(v: datetime.datetime) -> int:
    return calendar.timegm(v.utctimetuple())
