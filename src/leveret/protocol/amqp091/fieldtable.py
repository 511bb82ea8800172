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

Encoding picks the letter from the Python type: bool→t, int→I (int32) or l (int64), ``Long``→l,
float→d, Decimal→D, str→S, bytes-like→x, datetime→T, list/tuple→A, dict→F, None→V.

Every malformed input raises :class:`leveret.errors.SyntaxError_` (502), never a raw
``struct.error``/``IndexError``/``UnicodeDecodeError``/``RecursionError``.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from leveret.errors import SyntaxError_

__all__ = [
    "MAX_DEPTH",
    "FieldTable",
    "FieldValue",
    "Long",
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
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
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
# The internal decoders work on ``bytes`` only (the entry points copy a memoryview/bytearray
# table region to bytes once: bytes slicing and ``bytes.decode`` are markedly faster than their
# memoryview counterparts).  Each value decoder takes (buf, offset, depth) with ``offset`` just
# after the type octet and returns (value, new offset).  Fixed-width values rely on
# ``struct.unpack_from`` raising on truncation (converted to SyntaxError_ once, at the entry
# points); variable-length values check their end against ``len(buf)`` because slicing never
# raises.  A value that runs past the end of its enclosing table/array is caught by the
# ``offset != end`` check of that container.  The commonest letters (S, I, t) are decoded
# inline in the table loop to save a call per value.
# ---------------------------------------------------------------------------------------------

_Decoder: TypeAlias = "Callable[[bytes, int, int], tuple[FieldValue, int]]"


def _fixed(st: struct.Struct) -> _Decoder:
    unpack = st.unpack_from
    size = st.size

    def dec(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
        return unpack(buf, off)[0], off + size

    return dec


def _dec_bool(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    return buf[off] != 0, off + 1


def _dec_decimal(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    scale, value = _DEC.unpack_from(buf, off)
    return decimal.Decimal(value).scaleb(-scale), off + 5


def _dec_longstr(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    start = off + 4
    end = start + _u32_unpack(buf, off)[0]
    if end > len(buf):
        raise SyntaxError_("field table: longstr runs past the end of the data")
    raw = buf[start:end]
    try:
        return raw.decode(), end
    except UnicodeDecodeError:
        return raw, end


def _dec_bytes(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    start = off + 4
    end = start + _u32_unpack(buf, off)[0]
    if end > len(buf):
        raise SyntaxError_("field table: byte array runs past the end of the data")
    return buf[start:end], end


def _dec_timestamp(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    secs = _U64.unpack_from(buf, off)[0]
    if secs > _MAX_TIMESTAMP:
        raise SyntaxError_(f"field table: timestamp {secs} is beyond year 9999")
    return _EPOCH + datetime.timedelta(seconds=secs), off + 8


def _dec_void(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    return None, off


def _dec_table(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
    return _table(buf, off, depth + 1)


def _dec_array(buf: bytes, off: int, depth: int) -> tuple[FieldValue, int]:
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

_S = ord("S")
_I = ord("I")
_T = ord("t")
_i32_unpack = _I32.unpack_from


def _unknown(letter: int) -> SyntaxError_:
    shown = chr(letter) if 0x20 < letter < 0x7F else f"0x{letter:02x}"
    return SyntaxError_(f"field table: unknown field type {shown!r}")


def _table(buf: bytes, off: int, depth: int) -> tuple[FieldTable, int]:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    off += 4
    end = off + _u32_unpack(buf, off - 4)[0]
    if end > len(buf):
        raise SyntaxError_("field table: length runs past the end of the data")
    result: FieldTable = {}
    decoders = _DECODERS
    u32 = _u32_unpack
    value: FieldValue
    while off < end:
        kend = off + 1 + buf[off]
        if kend >= end:
            raise SyntaxError_("field table: entry runs past the end of the table")
        key = buf[off + 1 : kend].decode()
        letter = buf[kend]
        off = kend + 1
        if letter == _S:
            start = off + 4
            off = start + u32(buf, kend + 1)[0]
            if off > end:
                raise SyntaxError_("field table: longstr runs past the end of the table")
            raw = buf[start:off]
            try:
                value = raw.decode()
            except UnicodeDecodeError:
                value = raw
        elif letter == _I:
            value = _i32_unpack(buf, off)[0]
            off += 4
        elif letter == _T:
            value = buf[off] != 0
            off += 1
        else:
            dec = decoders.get(letter)
            if dec is None:
                raise _unknown(letter)
            value, off = dec(buf, off, depth)
        result[key] = value
    if off != end:
        raise SyntaxError_("field table: a value runs past the end of the table")
    return result, off


def _array(buf: bytes, off: int, depth: int) -> tuple[list[FieldValue], int]:
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


def _region(buf: Buffer, offset: int) -> bytes:
    """The length-prefixed region at ``offset`` of a non-bytes buffer, copied to bytes."""
    size = _u32_unpack(buf, offset)[0]
    return bytes(buf[offset : offset + 4 + size])


def _syntax_error(what: str, exc: Exception) -> SyntaxError_:
    if isinstance(exc, struct.error | IndexError):
        return SyntaxError_(f"{what}: truncated data")
    if isinstance(exc, UnicodeDecodeError):
        return SyntaxError_(f"{what}: field name is not valid UTF-8")
    return SyntaxError_(f"{what}: malformed data ({exc})")


_DECODE_ERRORS = (
    struct.error,
    IndexError,
    UnicodeDecodeError,
    RecursionError,
    ValueError,
    OverflowError,
    OSError,
)


def decode_table(buf: Buffer, offset: int) -> tuple[FieldTable, int]:
    """Decode the length-prefixed field table at ``offset``; return (table, offset after it)."""
    try:
        if type(buf) is bytes:
            return _table(buf, offset, 0)
        table, end = _table(_region(buf, offset), 0, 0)
        return table, offset + end
    except SyntaxError_:
        raise
    except _DECODE_ERRORS as exc:
        raise _syntax_error("field table", exc) from exc


def decode_array(buf: Buffer, offset: int) -> tuple[list[FieldValue], int]:
    """Decode the length-prefixed field array at ``offset``; return (list, offset after it)."""
    try:
        if type(buf) is bytes:
            return _array(buf, offset, 0)
        items, end = _array(_region(buf, offset), 0, 0)
        return items, offset + end
    except SyntaxError_:
        raise
    except _DECODE_ERRORS as exc:
        raise _syntax_error("field array", exc) from exc


def decode_value(buf: Buffer, offset: int) -> tuple[FieldValue, int]:
    """Decode one ``type octet + value`` at ``offset``; return (value, offset after it)."""
    try:
        data = buf if type(buf) is bytes else bytes(buf)
        letter = data[offset]
        dec = _DECODERS.get(letter)
        if dec is None:
            raise _unknown(letter)
        return dec(data, offset + 1, 0)
    except SyntaxError_:
        raise
    except _DECODE_ERRORS as exc:
        raise _syntax_error("field value", exc) from exc


# ---------------------------------------------------------------------------------------------
# Encoding
#
# Each value encoder appends ``type octet + value`` pieces to a list; a table or array is
# encoded into its own list and joined once, then prefixed with its length.  The commonest
# types (str, int32, bool) are encoded inline in the table loop.
# ---------------------------------------------------------------------------------------------

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_ZERO_LEN = b"\x00\x00\x00\x00"
_KEY_LEN = [bytes((n,)) for n in range(256)]

_pack_S = struct.Struct(">cI").pack
_pack_int32 = struct.Struct(">ci").pack
_pack_int64 = struct.Struct(">cq").pack
_pack_f64 = struct.Struct(">cd").pack
_pack_dec = struct.Struct(">cBi").pack
_pack_ts = struct.Struct(">cQ").pack
_pack_u32 = _U32.pack
_TRUE = b"t\x01"
_FALSE = b"t\x00"

_Encoder: TypeAlias = "Callable[[list[bytes], Any, int], None]"


def _enc_bool(out: list[bytes], v: Any, depth: int) -> None:
    out.append(_TRUE if v else _FALSE)


class Long(int):
    """An integer that is always encoded as ``l`` (int64), as RabbitMQ types some header
    values whatever their size (``x-death``'s ``count``)."""

    __slots__ = ()


def _enc_long(out: list[bytes], v: Any, depth: int) -> None:
    if not _I64_MIN <= v <= _I64_MAX:
        raise SyntaxError_(f"field table: integer {v} does not fit in 64 bits")
    out.append(_pack_int64(b"l", v))


def _enc_int(out: list[bytes], v: Any, depth: int) -> None:
    if _I32_MIN <= v <= _I32_MAX:
        out.append(_pack_int32(b"I", v))
    elif _I64_MIN <= v <= _I64_MAX:
        out.append(_pack_int64(b"l", v))
    else:
        raise SyntaxError_(f"field table: integer {v} does not fit in 64 bits")


def _enc_float(out: list[bytes], v: Any, depth: int) -> None:
    out.append(_pack_f64(b"d", v))


def _enc_decimal(out: list[bytes], v: Any, depth: int) -> None:
    if not v.is_finite():
        raise SyntaxError_(f"field table: decimal {v} is not finite")
    sign, digits, exponent = v.as_tuple()
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


def _enc_str(out: list[bytes], v: Any, depth: int) -> None:
    data = v.encode()
    out.append(_pack_S(b"S", len(data)))
    out.append(data)


def _enc_bytes(out: list[bytes], v: Any, depth: int) -> None:
    data = bytes(v)
    out.append(_pack_S(b"x", len(data)))
    out.append(data)


def _enc_datetime(out: list[bytes], v: Any, depth: int) -> None:
    # Naive datetimes are taken as UTC (as pika and py-amqp do); fractions are truncated.
    secs = calendar.timegm(v.utctimetuple())
    if secs < 0:
        raise SyntaxError_(f"field table: timestamp {v} is before 1970")
    out.append(_pack_ts(b"T", secs))


def _enc_none(out: list[bytes], v: Any, depth: int) -> None:
    out.append(b"V")


def _enc_list(out: list[bytes], v: Any, depth: int) -> None:
    out.append(b"A")
    out.append(_array_bytes(v, depth + 1))


def _enc_dict(out: list[bytes], v: Any, depth: int) -> None:
    out.append(b"F")
    out.append(_table_bytes(v, depth + 1))


_ENCODERS: dict[type, _Encoder] = {
    bool: _enc_bool,
    int: _enc_int,
    Long: _enc_long,
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

# For subclasses; order matters: bool before int.
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


def _table_bytes(table: Mapping[str, Any], depth: int) -> bytes:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field table: nested deeper than {MAX_DEPTH} levels")
    out: list[bytes] = []
    append = out.append
    encoders = _ENCODERS
    key_len = _KEY_LEN
    for key, value in table.items():
        if type(key) is not str and not isinstance(key, str):
            raise SyntaxError_(f"field table: field name {key!r} is not a string")
        kb = key.encode()
        n = len(kb)
        if n > 255:
            raise SyntaxError_(f"field table: field name {key[:40]!r}... longer than 255 bytes")
        append(key_len[n])
        append(kb)
        t = type(value)
        if t is str:
            data = value.encode()
            append(_pack_S(b"S", len(data)))
            append(data)
        elif t is int and _I32_MIN <= value <= _I32_MAX:
            append(_pack_int32(b"I", value))
        elif t is bool:
            append(_TRUE if value else _FALSE)
        else:
            enc = encoders.get(t)
            if enc is None:
                enc = _encoder_for(value)
            enc(out, value, depth)
    body = b"".join(out)
    if len(body) > 0xFFFFFFFF:
        raise SyntaxError_("field table: longer than 4 GiB")
    return _pack_u32(len(body)) + body


def _array_bytes(items: Iterable[Any], depth: int) -> bytes:
    if depth > MAX_DEPTH:
        raise SyntaxError_(f"field array: nested deeper than {MAX_DEPTH} levels")
    out: list[bytes] = []
    encoders = _ENCODERS
    for value in items:
        enc = encoders.get(type(value))
        if enc is None:
            enc = _encoder_for(value)
        enc(out, value, depth)
    body = b"".join(out)
    if len(body) > 0xFFFFFFFF:
        raise SyntaxError_("field array: longer than 4 GiB")
    return _pack_u32(len(body)) + body


_ENCODE_ERRORS = (struct.error, RecursionError, UnicodeEncodeError, OverflowError, ValueError)


def encode_table(table: Mapping[str, FieldValue] | None) -> bytes:
    """Encode ``table`` as a length-prefixed field table (``None`` → empty table)."""
    if not table:
        return _ZERO_LEN
    try:
        return _table_bytes(table, 0)
    except _ENCODE_ERRORS as exc:
        raise SyntaxError_(f"field table: cannot encode ({exc})") from exc


def encode_array(items: list[FieldValue] | tuple[FieldValue, ...]) -> bytes:
    """Encode ``items`` as a length-prefixed field array."""
    try:
        return _array_bytes(items, 0)
    except _ENCODE_ERRORS as exc:
        raise SyntaxError_(f"field array: cannot encode ({exc})") from exc


def encode_value(value: FieldValue) -> bytes:
    """Encode one value as ``type octet + value`` (the form it takes inside a table)."""
    out: list[bytes] = []
    try:
        _encoder_for(value)(out, value, 0)
    except _ENCODE_ERRORS as exc:
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
