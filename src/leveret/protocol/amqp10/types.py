"""The AMQP 1.0 type system (spec part 1): every primitive type in every encoding.

Owns the value model, the generic encoder/decoder, the typed field readers and writers the
generated composite classes call, and the registry of described types. Any module of
``leveret.protocol.amqp10`` may import it; the broker reaches it through the package.

==============================  ===================================  =====================
AMQP type                       Python value (decoded)               encodings
==============================  ===================================  =====================
null                            ``None``                             0x40
boolean                         ``bool``                             0x56, 0x41, 0x42
ubyte / ushort                  :class:`UByte` / :class:`UShort`     0x50 / 0x60
uint                            :class:`UInt`                        0x70, 0x52, 0x43
ulong                           :class:`ULong`                       0x80, 0x53, 0x44
byte / short                    :class:`Byte` / :class:`Short`       0x51 / 0x61
int                             :class:`Int`                         0x71, 0x54
long                            ``int``                              0x81, 0x55
float / double                  :class:`Float32` / ``float``         0x72 / 0x82
decimal32/64/128                :class:`Decimal32` … (raw BID bytes) 0x74 / 0x84 / 0x94
char                            :class:`Char`                        0x73
timestamp                       :class:`Timestamp` (ms since epoch)  0x83
uuid                            ``uuid.UUID``                        0x98
binary                          ``bytes``                            0xa0, 0xb0
string                          ``str``                              0xa1, 0xb1
symbol                          :class:`Symbol`                      0xa3, 0xb3
list                            ``list``                             0x45, 0xc0, 0xd0
map                             ``dict``                             0xc1, 0xd1
array                           :class:`Array`                       0xe0, 0xf0
described (registered)          the generated class (``Composite``)  0x00 …
described (unknown)             :class:`Described`                   0x00 …
==============================  ===================================  =====================

The wrappers are ``int``/``str``/``float``/``bytes`` subclasses, so they compare and hash
as their base values; plain ``int``, ``float`` and ``str`` encode as long, double and
string. Encoders pick the smallest encoding; an array picks one constructor for all its
elements (8-bit sizes when every element fits). Bad input raises
:class:`~leveret.protocol.amqp10.errors.DecodeError` (``amqp:decode-error``) only; a value
that cannot be encoded is our caller's bug and raises ``ValueError``.

Decoders work on ``bytes`` (the frame decoder hands out ``bytes``; slicing and
``bytes.decode`` beat their memoryview counterparts, as in ``amqp091/fieldtable.py``).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeAlias, cast

from leveret.protocol.amqp10._generated import encodings as fc
from leveret.protocol.amqp10.errors import DecodeError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MAX_DEPTH",
    "Array",
    "Byte",
    "Char",
    "Composite",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "Described",
    "Float32",
    "Int",
    "Short",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "Value",
    "composite_for",
    "decode_value",
    "decode_whole",
    "encode_value",
    "register",
    "skip_value",
]

MAX_DEPTH = 64
"""Deepest nesting of compound and described values the decoder accepts."""

# ---------------------------------------------------------------------------------------------
# The value model
# ---------------------------------------------------------------------------------------------


class UByte(int):
    """An AMQP ubyte (0..255)."""

    __slots__ = ()


class UShort(int):
    """An AMQP ushort (0..65535)."""

    __slots__ = ()


class UInt(int):
    """An AMQP uint (0..2**32-1)."""

    __slots__ = ()


class ULong(int):
    """An AMQP ulong (0..2**64-1); also the type of numeric descriptors."""

    __slots__ = ()


class Byte(int):
    """An AMQP byte (-128..127)."""

    __slots__ = ()


class Short(int):
    """An AMQP short (-2**15..2**15-1)."""

    __slots__ = ()


class Int(int):
    """An AMQP int (-2**31..2**31-1); a plain ``int`` is an AMQP long."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP timestamp: milliseconds since the Unix epoch (signed 64 bits)."""

    __slots__ = ()


class Float32(float):
    """An AMQP float (IEEE 754 binary32); a plain ``float`` is an AMQP double."""

    __slots__ = ()


class Char(str):
    """An AMQP char: one Unicode code point (UTF-32BE on the wire)."""

    __slots__ = ()


class Symbol(str):
    """An AMQP symbol: ASCII from a constrained domain (descriptors, keys, capabilities)."""

    __slots__ = ()


class Decimal32(bytes):
    """An AMQP decimal32, kept as its 4 wire bytes (IEEE 754 BID; not converted)."""

    __slots__ = ()


class Decimal64(bytes):
    """An AMQP decimal64, kept as its 8 wire bytes."""

    __slots__ = ()


class Decimal128(bytes):
    """An AMQP decimal128, kept as its 16 wire bytes."""

    __slots__ = ()


class Composite:
    """Base of the generated described types (performatives, sections, outcomes, …).

    Each subclass knows its descriptor and has a specialised ``encode`` (the whole described
    value) and ``decode_body`` (the value after the descriptor).
    """

    __slots__ = ()

    NAME: ClassVar[str]
    DESCRIPTOR_NAME: ClassVar[str]
    DESCRIPTOR_CODE: ClassVar[int]
    FIELDS: ClassVar[tuple[str, ...]]  # the Python names of the fields, in list order
    TYPES: ClassVar[tuple[str, ...]]  # their AMQP types ("uint", "error", "*", "symbol[]")

    def encode(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def decode_body(cls, buf: bytes, off: int, depth: int) -> tuple[Self, int]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Described:
    """A described value whose descriptor is not a registered type: kept as it came."""

    descriptor: Value
    value: Value


@dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: ``items`` all of ``element_type`` (an AMQP type name, e.g. ``"symbol"``).

    ``descriptor`` (not ``None``) makes it an array of described values that share it; the
    items are then the undescribed values.
    """

    element_type: str
    items: tuple[Value, ...]
    descriptor: Value = None


Value: TypeAlias = (
    "bool | int | float | str | bytes | uuid.UUID | Described | Array | Composite"
    " | list[Value] | dict[Value, Value] | None"
)

# ---------------------------------------------------------------------------------------------
# Structs and small tables
# ---------------------------------------------------------------------------------------------

_B = struct.Struct(">B")
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_II = struct.Struct(">II")
_BB = struct.Struct(">BB")

_u8 = _B.unpack_from
_u16 = _H.unpack_from
_u32 = _I.unpack_from
_u64 = _Q.unpack_from
_i8 = _b.unpack_from
_i16 = _h.unpack_from
_i32 = _i.unpack_from
_i64 = _q.unpack_from
_u32x2 = _II.unpack_from

_pk_BB = struct.Struct(">BB").pack
_pk_Bb = struct.Struct(">Bb").pack
_pk_BH = struct.Struct(">BH").pack
_pk_Bh = struct.Struct(">Bh").pack
_pk_BI = struct.Struct(">BI").pack
_pk_Bi = struct.Struct(">Bi").pack
_pk_BQ = struct.Struct(">BQ").pack
_pk_Bq = struct.Struct(">Bq").pack
_pk_Bf = struct.Struct(">Bf").pack
_pk_Bd = struct.Struct(">Bd").pack
_pk_BII = struct.Struct(">BII").pack
_pk_BBB = struct.Struct(">BBB").pack

NULL_BYTES = bytes((fc.NULL,))
TRUE_BYTES = bytes((fc.TRUE,))
FALSE_BYTES = bytes((fc.FALSE,))
_LIST0_BYTES = bytes((fc.LIST0,))
_UINT0_BYTES = bytes((fc.UINT0,))
_ULONG0_BYTES = bytes((fc.ULONG0,))
# One-byte encodings that come up all the time: smalluint / smallulong / smalllong n.
_SMALLUINT = [bytes((fc.SMALLUINT, n)) for n in range(256)]
_SMALLULONG = [bytes((fc.SMALLULONG, n)) for n in range(256)]

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_MAX_ZERO_WIDTH_ITEMS = 1 << 16  # an array of width-0 elements costs no bytes: bound it


def _bad(what: str) -> DecodeError:
    return DecodeError(what)


# ---------------------------------------------------------------------------------------------
# Decoding. Each value decoder takes (buf, off, depth) with ``off`` just after the format code
# and returns (value, offset after it). Fixed-width values rely on struct raising on
# truncation; variable-width and compound values check their end against ``len(buf)``.
# Entry points turn struct/Index/Unicode/Value errors into DecodeError once.
# ---------------------------------------------------------------------------------------------

_Decoder: TypeAlias = "Callable[[bytes, int, int], tuple[Value, int]]"


def _dec_null(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return None, off


def _dec_true(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return True, off


def _dec_false(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return False, off


def _dec_boolean(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    octet = buf[off]
    if octet > 1:
        raise _bad(f"boolean octet 0x{octet:02x} is neither 0x00 nor 0x01")
    return octet == 1, off + 1


def _fixed(unpack: Callable[[bytes, int], tuple[Any, ...]], size: int, wrap: type) -> _Decoder:
    def dec(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
        return wrap(unpack(buf, off)[0]), off + size

    return dec


def _dec_ubyte(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return UByte(buf[off]), off + 1


def _dec_smalluint(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return UInt(buf[off]), off + 1


def _dec_uint0(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return UInt(0), off


def _dec_smallulong(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return ULong(buf[off]), off + 1


def _dec_ulong0(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return ULong(0), off


def _dec_smallint(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return Int(_i8(buf, off)[0]), off + 1


def _dec_smalllong(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return _i8(buf, off)[0], off + 1


def _dec_long(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return _i64(buf, off)[0], off + 8


def _dec_double(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return _d.unpack_from(buf, off)[0], off + 8


def _raw(size: int, wrap: type) -> _Decoder:
    def dec(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
        end = off + size
        if end > len(buf):
            raise _bad(f"{wrap.__name__} runs past the end of the data")
        return wrap(buf[off:end]), end

    return dec


def _dec_char(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    code = _u32(buf, off)[0]
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise _bad(f"char U+{code:X} is not a Unicode scalar value")
    return Char(chr(code)), off + 4


def _dec_uuid(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    end = off + 16
    if end > len(buf):
        raise _bad("uuid runs past the end of the data")
    return uuid.UUID(bytes=buf[off:end]), end


def _dec_vbin8(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    end = off + 1 + buf[off]
    if end > len(buf):
        raise _bad("binary runs past the end of the data")
    return buf[off + 1 : end], end


def _dec_vbin32(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    end = off + 4 + _u32(buf, off)[0]
    if end > len(buf):
        raise _bad("binary runs past the end of the data")
    return buf[off + 4 : end], end


def _dec_str8(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    end = off + 1 + buf[off]
    if end > len(buf):
        raise _bad("string runs past the end of the data")
    return buf[off + 1 : end].decode(), end


def _dec_str32(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    end = off + 4 + _u32(buf, off)[0]
    if end > len(buf):
        raise _bad("string runs past the end of the data")
    return buf[off + 4 : end].decode(), end


def _dec_sym8(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    end = off + 1 + buf[off]
    if end > len(buf):
        raise _bad("symbol runs past the end of the data")
    return Symbol(buf[off + 1 : end].decode("ascii")), end


def _dec_sym32(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    end = off + 4 + _u32(buf, off)[0]
    if end > len(buf):
        raise _bad("symbol runs past the end of the data")
    return Symbol(buf[off + 4 : end].decode("ascii")), end


def _items(buf: bytes, off: int, end: int, count: int, depth: int, what: str) -> list[Value]:
    if depth > MAX_DEPTH:
        raise _bad(f"values nested deeper than {MAX_DEPTH} levels")
    if end > len(buf):
        raise _bad(f"{what} runs past the end of the data")
    if count > end - off:
        raise _bad(f"{what} of {end - off} bytes cannot hold {count} values")
    out: list[Value] = []
    append = out.append
    dec = _DECODERS
    for _ in range(count):
        value, off = dec[buf[off]](buf, off + 1, depth)
        append(value)
    if off != end:
        raise _bad(f"{what} size does not match its {count} values")
    return out


def _dec_list0(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return [], off


def _dec_list8(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    size, count = _BB.unpack_from(buf, off)
    if size < 1:
        raise _bad("list8 size smaller than its count field")
    end = off + 1 + size
    return _items(buf, off + 2, end, count, depth + 1, "list"), end


def _dec_list32(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    size, count = _u32x2(buf, off)
    if size < 4:
        raise _bad("list32 size smaller than its count field")
    end = off + 4 + size
    return _items(buf, off + 8, end, count, depth + 1, "list"), end


def _to_map(items: list[Value]) -> dict[Value, Value]:
    if len(items) & 1:
        raise _bad("map has an odd number of items")
    it = iter(items)
    result = dict(zip(it, it, strict=True))
    if len(result) * 2 != len(items):
        raise _bad("map has a duplicate key")
    return result


def _dec_map8(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    size, count = _BB.unpack_from(buf, off)
    if size < 1:
        raise _bad("map8 size smaller than its count field")
    end = off + 1 + size
    return _to_map(_items(buf, off + 2, end, count, depth + 1, "map")), end


def _dec_map32(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    size, count = _u32x2(buf, off)
    if size < 4:
        raise _bad("map32 size smaller than its count field")
    end = off + 4 + size
    return _to_map(_items(buf, off + 8, end, count, depth + 1, "map")), end


def _array_body(buf: bytes, off: int, end: int, count: int, depth: int) -> tuple[Array, int]:
    if depth > MAX_DEPTH:
        raise _bad(f"values nested deeper than {MAX_DEPTH} levels")
    if end > len(buf):
        raise _bad("array runs past the end of the data")
    descriptor: Value = None
    code = buf[off]
    off += 1
    if code == fc.DESCRIBED:
        descriptor, off = _DECODERS[buf[off]](buf, off + 1, depth + 1)
        if descriptor is None:
            raise _bad("array element descriptor is null")
        code = buf[off]
        off += 1
    type_name = fc.TYPE_OF.get(code)
    if type_name is None:
        raise _bad(f"array element constructor 0x{code:02x} is not a primitive format code")
    if fc.FIXED_WIDTH.get(code) == 0:
        if count > _MAX_ZERO_WIDTH_ITEMS:
            raise _bad(f"array of {count} zero-width values")
    elif count > end - off:
        raise _bad(f"array of {end - off} bytes cannot hold {count} values")
    dec = _DECODERS[code]
    items: list[Value] = []
    append = items.append
    for _ in range(count):
        value, off = dec(buf, off, depth)
        append(value)
    if off != end:
        raise _bad(f"array size does not match its {count} values")
    return Array(type_name, tuple(items), descriptor), end


def _dec_array8(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    size, count = _BB.unpack_from(buf, off)
    if size < 2:
        raise _bad("array8 size smaller than its count and constructor")
    return _array_body(buf, off + 2, off + 1 + size, count, depth + 1)


def _dec_array32(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    size, count = _u32x2(buf, off)
    if size < 5:
        raise _bad("array32 size smaller than its count and constructor")
    return _array_body(buf, off + 8, off + 4 + size, count, depth + 1)


_BY_CODE: dict[int, type[Composite]] = {}
_BY_NAME: dict[str, type[Composite]] = {}


def _dec_described(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    if depth > MAX_DEPTH:
        raise _bad(f"values nested deeper than {MAX_DEPTH} levels")
    code = buf[off]
    # The numeric descriptors of the spec's own types all fit smallulong: try that first.
    if code == fc.SMALLULONG:
        cls = _BY_CODE.get(buf[off + 1])
        if cls is not None:
            return cls.decode_body(buf, off + 2, depth + 1)
    descriptor, off = _DECODERS[code](buf, off + 1, depth + 1)
    if descriptor is None:
        raise _bad("described value with a null descriptor")
    if type(descriptor) is ULong:
        cls = _BY_CODE.get(descriptor)
    elif type(descriptor) is Symbol:
        cls = _BY_NAME.get(descriptor)
    else:
        cls = None
    if cls is not None:
        return cls.decode_body(buf, off, depth + 1)
    value, off = _DECODERS[buf[off]](buf, off + 1, depth + 1)
    return Described(descriptor, value), off


def _dec_reserved(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    raise _bad(f"format code 0x{buf[off - 1]:02x} is not defined")


_DECODERS: list[_Decoder] = [_dec_reserved] * 256
for _code, _dec in {
    fc.DESCRIBED: _dec_described,
    fc.NULL: _dec_null,
    fc.TRUE: _dec_true,
    fc.FALSE: _dec_false,
    fc.BOOLEAN: _dec_boolean,
    fc.UBYTE: _dec_ubyte,
    fc.USHORT: _fixed(_u16, 2, UShort),
    fc.UINT: _fixed(_u32, 4, UInt),
    fc.SMALLUINT: _dec_smalluint,
    fc.UINT0: _dec_uint0,
    fc.ULONG: _fixed(_u64, 8, ULong),
    fc.SMALLULONG: _dec_smallulong,
    fc.ULONG0: _dec_ulong0,
    fc.BYTE: _fixed(_i8, 1, Byte),
    fc.SHORT: _fixed(_i16, 2, Short),
    fc.INT: _fixed(_i32, 4, Int),
    fc.SMALLINT: _dec_smallint,
    fc.LONG: _dec_long,
    fc.SMALLLONG: _dec_smalllong,
    fc.FLOAT: _fixed(_f.unpack_from, 4, Float32),
    fc.DOUBLE: _dec_double,
    fc.DECIMAL32: _raw(4, Decimal32),
    fc.DECIMAL64: _raw(8, Decimal64),
    fc.DECIMAL128: _raw(16, Decimal128),
    fc.CHAR: _dec_char,
    fc.TIMESTAMP: _fixed(_i64, 8, Timestamp),
    fc.UUID: _dec_uuid,
    fc.VBIN8: _dec_vbin8,
    fc.VBIN32: _dec_vbin32,
    fc.STR8_UTF8: _dec_str8,
    fc.STR32_UTF8: _dec_str32,
    fc.SYM8: _dec_sym8,
    fc.SYM32: _dec_sym32,
    fc.LIST0: _dec_list0,
    fc.LIST8: _dec_list8,
    fc.LIST32: _dec_list32,
    fc.MAP8: _dec_map8,
    fc.MAP32: _dec_map32,
    fc.ARRAY8: _dec_array8,
    fc.ARRAY32: _dec_array32,
}.items():
    _DECODERS[_code] = _dec
if set(fc.TYPE_OF) | {fc.DESCRIBED} != {c for c in range(256) if _DECODERS[c] is not _dec_reserved}:
    raise ImportError("types.py does not decode exactly the format codes of the spec")

DECODE_ERRORS = (struct.error, IndexError, UnicodeDecodeError, ValueError, TypeError, OverflowError)
"""What the internal decoders may raise on bad input; entry points map them to DecodeError."""


def decode_error(what: str, exc: Exception) -> DecodeError:
    """The DecodeError for an internal exception ``exc`` raised while decoding ``what``."""
    if isinstance(exc, struct.error | IndexError):
        return DecodeError(f"{what}: truncated data")
    if isinstance(exc, UnicodeDecodeError):
        return DecodeError(f"{what}: invalid {exc.encoding} text")
    if isinstance(exc, TypeError):
        return DecodeError(f"{what}: map key of an unhashable type")
    return DecodeError(f"{what}: {exc}")


def decode_value(buf: bytes | bytearray | memoryview, off: int = 0) -> tuple[Value, int]:
    """Decode the value at ``off``; return (value, offset after it)."""
    data = buf if type(buf) is bytes else bytes(buf)
    try:
        return _DECODERS[data[off]](data, off + 1, 0)
    except DecodeError:
        raise
    except DECODE_ERRORS as exc:
        raise decode_error("value", exc) from exc


def decode_whole(buf: bytes | bytearray | memoryview) -> Value:
    """Decode ``buf`` as exactly one value (trailing bytes are an error)."""
    value, end = decode_value(buf, 0)
    if end != len(buf):
        raise DecodeError(f"{len(buf) - end} bytes after the value")
    return value


def composite_for(descriptor: int | str) -> type[Composite] | None:
    """The registered class for a numeric or symbolic descriptor, if any."""
    if isinstance(descriptor, int):
        return _BY_CODE.get(descriptor)
    return _BY_NAME.get(descriptor)


def register(cls: type[Composite]) -> type[Composite]:
    """Make the generic decoder build ``cls`` for its descriptors (generated modules call it)."""
    _BY_CODE[cls.DESCRIPTOR_CODE] = cls
    _BY_NAME[cls.DESCRIPTOR_NAME] = cls
    _ENCODERS[cls] = _enc_composite
    return cls


# ---------------------------------------------------------------------------------------------
# Skipping: the end of the value at ``off`` without building it (message section scanning,
# composite fields beyond the ones the spec defines).
# ---------------------------------------------------------------------------------------------


_SIZED = {**fc.VARIABLE_WIDTH, **fc.COMPOUND_WIDTH, **fc.ARRAY_WIDTH}
_ONE_OCTET_SIZE = frozenset(code for code, width in _SIZED.items() if width == 1)
_FOUR_OCTET_SIZE = frozenset(code for code, width in _SIZED.items() if width == 4)


def _skip(buf: bytes, off: int, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise _bad(f"values nested deeper than {MAX_DEPTH} levels")
    code = buf[off]
    off += 1
    if code == fc.DESCRIBED:
        return _skip(buf, _skip(buf, off, depth + 1), depth + 1)
    width = fc.FIXED_WIDTH.get(code)
    if width is not None:
        end = off + width
    elif code in _ONE_OCTET_SIZE:
        end = off + 1 + buf[off]
    elif code in _FOUR_OCTET_SIZE:
        end = off + 4 + _u32(buf, off)[0]
    else:
        raise _bad(f"format code 0x{code:02x} is not defined")
    if end > len(buf):
        raise _bad("value runs past the end of the data")
    return end


def skip_value(buf: bytes, off: int) -> int:
    """Return the offset just after the (possibly described) value at ``off``."""
    try:
        return _skip(buf, off, 0)
    except DecodeError:
        raise
    except DECODE_ERRORS as exc:
        raise decode_error("value", exc) from exc


# ---------------------------------------------------------------------------------------------
# Encoding: one function per Python type, each returning the whole encoded value.
# ---------------------------------------------------------------------------------------------

_Encoder: TypeAlias = "Callable[[Any], bytes]"


def _enc_bool(v: bool) -> bytes:
    return TRUE_BYTES if v else FALSE_BYTES


def _enc_long(v: int) -> bytes:
    if -128 <= v <= 127:
        return _pk_Bb(fc.SMALLLONG, v)
    return _pk_Bq(fc.LONG, v)


def _enc_int(v: int) -> bytes:
    if -128 <= v <= 127:
        return _pk_Bb(fc.SMALLINT, v)
    return _pk_Bi(fc.INT, v)


def _enc_uint(v: int) -> bytes:
    if v == 0:
        return _UINT0_BYTES
    if 0 < v < 256:
        return _SMALLUINT[v]
    return _pk_BI(fc.UINT, v)


def _enc_ulong(v: int) -> bytes:
    if v == 0:
        return _ULONG0_BYTES
    if 0 < v < 256:
        return _SMALLULONG[v]
    return _pk_BQ(fc.ULONG, v)


def _enc_str(v: str) -> bytes:
    data = v.encode()
    n = len(data)
    if n < 256:
        return _pk_BB(fc.STR8_UTF8, n) + data
    return _pk_BI(fc.STR32_UTF8, n) + data


def _enc_symbol(v: str) -> bytes:
    data = v.encode("ascii")
    n = len(data)
    if n < 256:
        return _pk_BB(fc.SYM8, n) + data
    return _pk_BI(fc.SYM32, n) + data


def _enc_binary(v: bytes | bytearray | memoryview) -> bytes:
    n = len(v)
    if n < 256:
        return _pk_BB(fc.VBIN8, n) + v
    return _pk_BI(fc.VBIN32, n) + v


def _enc_char(v: str) -> bytes:
    if len(v) != 1:
        raise ValueError(f"a char is one code point, not {len(v)}")
    return _pk_BI(fc.CHAR, ord(v))


def _enc_decimal(code: int, size: int) -> _Encoder:
    def enc(v: bytes) -> bytes:
        if len(v) != size:
            raise ValueError(f"a {size}-byte decimal given {len(v)} bytes")
        return bytes((code,)) + v

    return enc


def _enc_uuid(v: uuid.UUID) -> bytes:
    return bytes((fc.UUID,)) + v.bytes


def compound(code8: int, code32: int, count: int, body: bytes) -> bytes:
    """A list or map: the 8-bit form when size and count fit an octet."""
    if count < 256 and len(body) < 255:
        return _pk_BBB(code8, len(body) + 1, count) + body
    return _pk_BII(code32, len(body) + 4, count) + body


def _enc_list(v: list[Value] | tuple[Value, ...]) -> bytes:
    if not v:
        return _LIST0_BYTES
    return compound(fc.LIST8, fc.LIST32, len(v), b"".join([encode_value(x) for x in v]))


def _enc_map(v: dict[Value, Value]) -> bytes:
    parts: list[bytes] = []
    for key, value in v.items():
        parts.append(encode_value(key))
        parts.append(encode_value(value))
    return compound(fc.MAP8, fc.MAP32, len(parts), b"".join(parts))


def _enc_described(v: Described) -> bytes:
    return b"\x00" + encode_value(v.descriptor) + encode_value(v.value)


def _enc_composite(v: Composite) -> bytes:
    return v.encode()


# Array elements: each element type has one constructor (and, for the sized types, an 8-bit
# and a 32-bit one); an element is encoded without it.


def _fixed_items(pack: Callable[[Any], bytes]) -> Callable[[tuple[Value, ...]], list[bytes]]:
    def enc(items: tuple[Value, ...]) -> list[bytes]:
        return [pack(x) for x in items]

    return enc


def _sized_items(
    items: list[bytes], code8: int, code32: int, extra: int = 0
) -> tuple[int, list[bytes]]:
    """Prefix each raw element with its size (1 or 4 octets, the same for all)."""
    if all(len(x) + extra < 256 for x in items):
        return code8, [bytes((len(x) + extra,)) + x for x in items]
    return code32, [_I.pack(len(x) + extra) + x for x in items]


def _array_elements(array: Array) -> tuple[bytes, list[bytes]]:
    """(element constructor, encoded elements) of ``array``."""
    t = array.element_type
    # Each element type's branch knows its items' Python type; Value is too wide to say so.
    items: tuple[Any, ...] = array.items
    narrow = _ARRAY_SMALL.get(t)
    if narrow is not None and items:
        code, low, high, pack = narrow
        if all(type(x) is not bool and low <= x <= high for x in items):
            return bytes((code,)), [pack(x) for x in items]
    fixed = _ARRAY_FIXED.get(t)
    if fixed is not None:
        code, enc = fixed
        return bytes((code,)), enc(items)
    if t in ("binary", "string", "symbol"):
        if t == "binary":
            raw = [bytes(x) for x in items]
            code8, code32 = fc.VBIN8, fc.VBIN32
        elif t == "string":
            raw = [x.encode() for x in items]
            code8, code32 = fc.STR8_UTF8, fc.STR32_UTF8
        else:
            raw = [x.encode("ascii") for x in items]
            code8, code32 = fc.SYM8, fc.SYM32
        code, elems = _sized_items(raw, code8, code32)
        return bytes((code,)), elems
    if t in ("list", "map"):
        bodies: list[tuple[int, bytes]] = []
        for x in items:
            if t == "list":
                seq = list(x)
                bodies.append((len(seq), b"".join([encode_value(y) for y in seq])))
            else:
                parts: list[bytes] = []
                for key, value in x.items():
                    parts.append(encode_value(key))
                    parts.append(encode_value(value))
                bodies.append((len(parts), b"".join(parts)))
        small = all(n < 256 and len(b) < 255 for n, b in bodies)
        code8, code32 = (fc.LIST8, fc.LIST32) if t == "list" else (fc.MAP8, fc.MAP32)
        code = code8 if small else code32
        if small:
            elems = [_pk_BB(len(b) + 1, n) + b for n, b in bodies]
        else:
            elems = [_II.pack(len(b) + 4, n) + b for n, b in bodies]
        return bytes((code,)), elems
    if t == "array":
        inner = []
        for x in items:
            if not isinstance(x, Array):
                raise ValueError(f"array of arrays holds a {type(x).__name__}")
            ctor, elems = _array_elements(x)
            if x.descriptor is not None:
                ctor = b"\x00" + encode_value(x.descriptor) + ctor
            inner.append((len(elems), ctor + b"".join(elems)))
        small = all(n < 256 and len(b) < 255 for n, b in inner)
        if small:
            return bytes((fc.ARRAY8,)), [_pk_BB(len(b) + 1, n) + b for n, b in inner]
        return bytes((fc.ARRAY32,)), [_II.pack(len(b) + 4, n) + b for n, b in inner]
    raise ValueError(f"unknown array element type {t!r}")


def _char_item(x: Any) -> bytes:
    if len(x) != 1:
        raise ValueError(f"a char is one code point, not {len(x)}")
    return _I.pack(ord(x))


def _decimal_item(size: int) -> Callable[[Any], bytes]:
    def enc(x: Any) -> bytes:
        if len(x) != size:
            raise ValueError(f"a {size}-byte decimal given {len(x)} bytes")
        return bytes(x)

    return enc


def _bool_item(x: Any) -> bytes:
    if type(x) is not bool:
        raise ValueError(f"a boolean array holds a {type(x).__name__}")
    return b"\x01" if x else b"\x00"


def _null_item(x: Any) -> bytes:
    if x is not None:
        raise ValueError("a null array holds a value")
    return b""


_ARRAY_FIXED: dict[str, tuple[int, Callable[[tuple[Value, ...]], list[bytes]]]] = {
    "null": (fc.NULL, _fixed_items(_null_item)),
    "boolean": (fc.BOOLEAN, _fixed_items(_bool_item)),
    "ubyte": (fc.UBYTE, _fixed_items(_B.pack)),
    "ushort": (fc.USHORT, _fixed_items(_H.pack)),
    "uint": (fc.UINT, _fixed_items(_I.pack)),
    "ulong": (fc.ULONG, _fixed_items(_Q.pack)),
    "byte": (fc.BYTE, _fixed_items(_b.pack)),
    "short": (fc.SHORT, _fixed_items(_h.pack)),
    "int": (fc.INT, _fixed_items(_i.pack)),
    "long": (fc.LONG, _fixed_items(_q.pack)),
    "float": (fc.FLOAT, _fixed_items(_f.pack)),
    "double": (fc.DOUBLE, _fixed_items(_d.pack)),
    "decimal32": (fc.DECIMAL32, _fixed_items(_decimal_item(4))),
    "decimal64": (fc.DECIMAL64, _fixed_items(_decimal_item(8))),
    "decimal128": (fc.DECIMAL128, _fixed_items(_decimal_item(16))),
    "char": (fc.CHAR, _fixed_items(_char_item)),
    "timestamp": (fc.TIMESTAMP, _fixed_items(_q.pack)),
    "uuid": (fc.UUID, _fixed_items(lambda x: x.bytes)),
}


# The one-octet constructor an integer array takes when every element fits it (the
# zero-width uint0/ulong0 are never used in arrays: a width-0 element is easy to mishandle).
_ARRAY_SMALL: dict[str, tuple[int, int, int, Callable[[Any], bytes]]] = {
    "uint": (fc.SMALLUINT, 0, 255, _B.pack),
    "ulong": (fc.SMALLULONG, 0, 255, _B.pack),
    "int": (fc.SMALLINT, -128, 127, _b.pack),
    "long": (fc.SMALLLONG, -128, 127, _b.pack),
}


def _enc_array(v: Array) -> bytes:
    ctor, elems = _array_elements(v)
    if v.descriptor is not None:
        ctor = b"\x00" + encode_value(v.descriptor) + ctor
    body = ctor + b"".join(elems)
    count = len(elems)
    if count < 256 and len(body) < 255:
        return _pk_BBB(fc.ARRAY8, len(body) + 1, count) + body
    return _pk_BII(fc.ARRAY32, len(body) + 4, count) + body


_ENCODERS: dict[type, _Encoder] = {
    type(None): lambda v: NULL_BYTES,
    bool: _enc_bool,
    int: _enc_long,
    float: lambda v: _pk_Bd(fc.DOUBLE, v),
    str: _enc_str,
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_binary,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    UByte: lambda v: _pk_BB(fc.UBYTE, v),
    UShort: lambda v: _pk_BH(fc.USHORT, v),
    UInt: _enc_uint,
    ULong: _enc_ulong,
    Byte: lambda v: _pk_Bb(fc.BYTE, v),
    Short: lambda v: _pk_Bh(fc.SHORT, v),
    Int: _enc_int,
    Timestamp: lambda v: _pk_Bq(fc.TIMESTAMP, v),
    Float32: lambda v: _pk_Bf(fc.FLOAT, v),
    Char: _enc_char,
    Symbol: _enc_symbol,
    Decimal32: _enc_decimal(fc.DECIMAL32, 4),
    Decimal64: _enc_decimal(fc.DECIMAL64, 8),
    Decimal128: _enc_decimal(fc.DECIMAL128, 16),
    uuid.UUID: _enc_uuid,
    Described: _enc_described,
    Array: _enc_array,
}

_ENCODE_ERRORS = (struct.error, UnicodeEncodeError, OverflowError, AttributeError, TypeError)


def _encoder_for(v: object) -> _Encoder:
    """Subclasses (IntEnum, StrEnum, …) encode as their nearest base type."""
    for base, enc in _FALLBACK:
        if isinstance(v, base):
            return enc
    raise ValueError(f"no AMQP 1.0 encoding for a {type(v).__name__}")


_FALLBACK: list[tuple[type, _Encoder]] = [
    (bool, _enc_bool),
    (ULong, _enc_ulong),
    (UInt, _enc_uint),
    (int, _enc_long),
    (float, _ENCODERS[float]),
    (Symbol, _enc_symbol),
    (str, _enc_str),
    (bytes, _enc_binary),
    (list, _enc_list),
    (tuple, _enc_list),
    (dict, _enc_map),
    (Composite, _enc_composite),
]


def encode_value(v: Value) -> bytes:
    """Encode ``v`` in its smallest encoding; ``ValueError`` when it has none."""
    enc = _ENCODERS.get(type(v))
    if enc is None:
        enc = _encoder_for(v)
    try:
        return enc(v)
    except _ENCODE_ERRORS as exc:
        raise ValueError(f"cannot encode {v!r} as AMQP 1.0: {exc}") from exc


# ---------------------------------------------------------------------------------------------
# Typed field readers and writers for the generated composite classes. A reader accepts only
# the encodings of its field's type (or null, returned as None); a writer returns the smallest
# encoding (null for None).
# ---------------------------------------------------------------------------------------------


def _wrong(expected: str, buf: bytes, off: int) -> DecodeError:
    return DecodeError(f"expected {expected}, got format code 0x{buf[off]:02x}")


def read_boolean(buf: bytes, off: int) -> tuple[bool | None, int]:
    code = buf[off]
    if code == fc.TRUE:
        return True, off + 1
    if code == fc.FALSE:
        return False, off + 1
    if code == fc.NULL:
        return None, off + 1
    if code == fc.BOOLEAN:
        octet = buf[off + 1]
        if octet > 1:
            raise _bad(f"boolean octet 0x{octet:02x} is neither 0x00 nor 0x01")
        return octet == 1, off + 2
    raise _wrong("boolean", buf, off)


def read_ubyte(buf: bytes, off: int) -> tuple[int | None, int]:
    code = buf[off]
    if code == fc.UBYTE:
        return buf[off + 1], off + 2
    if code == fc.NULL:
        return None, off + 1
    raise _wrong("ubyte", buf, off)


def read_ushort(buf: bytes, off: int) -> tuple[int | None, int]:
    code = buf[off]
    if code == fc.USHORT:
        return _u16(buf, off + 1)[0], off + 3
    if code == fc.NULL:
        return None, off + 1
    raise _wrong("ushort", buf, off)


def read_uint(buf: bytes, off: int) -> tuple[int | None, int]:
    code = buf[off]
    if code == fc.SMALLUINT:
        return buf[off + 1], off + 2
    if code == fc.UINT:
        return _u32(buf, off + 1)[0], off + 5
    if code == fc.UINT0:
        return 0, off + 1
    if code == fc.NULL:
        return None, off + 1
    raise _wrong("uint", buf, off)


def read_ulong(buf: bytes, off: int) -> tuple[int | None, int]:
    code = buf[off]
    if code == fc.SMALLULONG:
        return buf[off + 1], off + 2
    if code == fc.ULONG:
        return _u64(buf, off + 1)[0], off + 9
    if code == fc.ULONG0:
        return 0, off + 1
    if code == fc.NULL:
        return None, off + 1
    raise _wrong("ulong", buf, off)


def read_timestamp(buf: bytes, off: int) -> tuple[int | None, int]:
    code = buf[off]
    if code == fc.TIMESTAMP:
        return _i64(buf, off + 1)[0], off + 9
    if code == fc.NULL:
        return None, off + 1
    raise _wrong("timestamp", buf, off)


def read_binary(buf: bytes, off: int) -> tuple[bytes | None, int]:
    code = buf[off]
    if code == fc.VBIN8:
        end = off + 2 + buf[off + 1]
        start = off + 2
    elif code == fc.VBIN32:
        end = off + 5 + _u32(buf, off + 1)[0]
        start = off + 5
    elif code == fc.NULL:
        return None, off + 1
    else:
        raise _wrong("binary", buf, off)
    if end > len(buf):
        raise _bad("binary runs past the end of the data")
    return buf[start:end], end


def read_string(buf: bytes, off: int) -> tuple[str | None, int]:
    code = buf[off]
    if code == fc.STR8_UTF8:
        end = off + 2 + buf[off + 1]
        start = off + 2
    elif code == fc.STR32_UTF8:
        end = off + 5 + _u32(buf, off + 1)[0]
        start = off + 5
    elif code == fc.NULL:
        return None, off + 1
    else:
        raise _wrong("string", buf, off)
    if end > len(buf):
        raise _bad("string runs past the end of the data")
    return buf[start:end].decode(), end


def read_symbol(buf: bytes, off: int) -> tuple[str | None, int]:
    code = buf[off]
    if code == fc.SYM8:
        end = off + 2 + buf[off + 1]
        start = off + 2
    elif code == fc.SYM32:
        end = off + 5 + _u32(buf, off + 1)[0]
        start = off + 5
    elif code == fc.NULL:
        return None, off + 1
    else:
        raise _wrong("symbol", buf, off)
    if end > len(buf):
        raise _bad("symbol runs past the end of the data")
    return Symbol(buf[start:end].decode("ascii")), end


def read_symbols(buf: bytes, off: int, depth: int) -> tuple[tuple[str, ...] | None, int]:
    """A ``multiple="true"`` symbol field: one symbol or an array of them (null: None)."""
    code = buf[off]
    if code == fc.ARRAY8 or code == fc.ARRAY32:
        array, end = _DECODERS[code](buf, off + 1, depth)
        assert isinstance(array, Array)
        if array.element_type != "symbol" or array.descriptor is not None:
            raise _bad(f"expected an array of symbols, got an array of {array.element_type}")
        return cast("tuple[str, ...]", array.items), end
    value, end = read_symbol(buf, off)
    return (None if value is None else (value,)), end


def read_map(buf: bytes, off: int, depth: int) -> tuple[dict[Value, Value] | None, int]:
    code = buf[off]
    if code == fc.MAP8 or code == fc.MAP32:
        value, end = _DECODERS[code](buf, off + 1, depth)
        assert isinstance(value, dict)
        return value, end
    if code == fc.NULL:
        return None, off + 1
    raise _wrong("map", buf, off)


def read_list(buf: bytes, off: int, depth: int) -> tuple[list[Value] | None, int]:
    code = buf[off]
    if code == fc.LIST8 or code == fc.LIST32 or code == fc.LIST0:
        value, end = _DECODERS[code](buf, off + 1, depth)
        assert isinstance(value, list)
        return value, end
    if code == fc.NULL:
        return None, off + 1
    raise _wrong("list", buf, off)


def read_any(buf: bytes, off: int, depth: int) -> tuple[Value, int]:
    return _DECODERS[buf[off]](buf, off + 1, depth)


def list_header(buf: bytes, off: int) -> tuple[int, int, int]:
    """(count, offset of the first item, end) of the list at ``off`` (a composite's body)."""
    code = buf[off]
    if code == fc.LIST8:
        size, count = _BB.unpack_from(buf, off + 1)
        start = off + 3
        end = off + 2 + size
        if size < 1:
            raise _bad("list8 size smaller than its count field")
    elif code == fc.LIST32:
        size, count = _u32x2(buf, off + 1)
        start = off + 9
        end = off + 5 + size
        if size < 4:
            raise _bad("list32 size smaller than its count field")
    elif code == fc.LIST0:
        return 0, off + 1, off + 1
    else:
        raise _wrong("a described list", buf, off)
    if end > len(buf):
        raise _bad("list runs past the end of the data")
    if count > end - start:
        raise _bad(f"list of {end - start} bytes cannot hold {count} values")
    return count, start, end


def skip_fields(buf: bytes, off: int, n: int, depth: int) -> int:
    """Skip ``n`` list items a newer peer sent beyond the fields this spec defines."""
    for _ in range(n):
        off = _skip(buf, off, depth)
    return off


def write_boolean(v: bool | None) -> bytes:
    if v is None:
        return NULL_BYTES
    return TRUE_BYTES if v else FALSE_BYTES


def write_ubyte(v: int | None) -> bytes:
    return NULL_BYTES if v is None else _pk_BB(fc.UBYTE, v)


def write_ushort(v: int | None) -> bytes:
    return NULL_BYTES if v is None else _pk_BH(fc.USHORT, v)


def write_uint(v: int | None) -> bytes:
    return NULL_BYTES if v is None else _enc_uint(v)


def write_ulong(v: int | None) -> bytes:
    return NULL_BYTES if v is None else _enc_ulong(v)


def write_timestamp(v: int | None) -> bytes:
    return NULL_BYTES if v is None else _pk_Bq(fc.TIMESTAMP, v)


def write_binary(v: bytes | None) -> bytes:
    return NULL_BYTES if v is None else _enc_binary(v)


def write_string(v: str | None) -> bytes:
    return NULL_BYTES if v is None else _enc_str(v)


def write_symbol(v: str | None) -> bytes:
    return NULL_BYTES if v is None else _enc_symbol(v)


def write_symbols(v: tuple[str, ...] | list[str] | None) -> bytes:
    if v is None:
        return NULL_BYTES
    return _enc_array(Array("symbol", tuple(v)))


def write_map(v: dict[Value, Value] | None) -> bytes:
    return NULL_BYTES if v is None else _enc_map(v)


def write_fields(v: dict[Value, Value] | None) -> bytes:
    """A ``fields``/``annotations`` map: plain ``str`` keys go out as symbols, as the spec wants."""
    if v is None:
        return NULL_BYTES
    parts: list[bytes] = []
    for key, value in v.items():
        parts.append(_enc_symbol(key) if type(key) is str else encode_value(key))
        parts.append(encode_value(value))
    return compound(fc.MAP8, fc.MAP32, len(parts), b"".join(parts))


def write_list(v: list[Value] | None) -> bytes:
    return NULL_BYTES if v is None else _enc_list(v)


def write_any(v: Value) -> bytes:
    return encode_value(v)


def described_list(descriptor: bytes, parts: list[bytes]) -> bytes:
    """A composite: ``descriptor`` (with its 0x00) + the smallest list, trailing nulls dropped."""
    n = len(parts)
    while n and parts[n - 1] == NULL_BYTES:
        n -= 1
    if n == 0:
        return descriptor + _LIST0_BYTES
    body = b"".join(parts[:n]) if n < len(parts) else b"".join(parts)
    if len(body) < 255:
        return descriptor + _pk_BBB(fc.LIST8, len(body) + 1, n) + body
    return descriptor + _pk_BII(fc.LIST32, len(body) + 4, n) + body
