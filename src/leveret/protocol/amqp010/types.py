"""The AMQP 0-10 type system (spec section 3): values, their encodings, and compound bases.

Imported by the generated code in ``_generated/`` and by the rest of the amqp010 package.
Two layers:

* Field codecs used by the generated structs, controls and commands: ``enc_<type>(out,
  value)`` appends to a ``bytearray``; ``dec_<type>(buf, offset)`` returns ``(value, new
  offset)``.  Fixed-width fields are packed by the generated code itself with precompiled
  ``struct`` formats; these helpers cover the variable-width types.
* Self-describing values (the entries of a ``map``, the items of a ``list`` and ``array``,
  every value of a ``struct32``), each carried with a one-octet type code.

Decoded values are plain Python where one exists:

==================================  ==================================================
type (code)                         Python value
==================================  ==================================================
boolean                             ``bool``
int8..int64, uint8..uint64          ``int``
char, char-utf32                    ``str`` of one character
float, double                       ``float``
dec32, dec64                        ``decimal.Decimal``
datetime                            ``datetime.datetime`` (UTC) in maps; ``int`` seconds in
                                    struct fields
uuid                                ``uuid.UUID``
bin8..bin1024, bin40, bin72         ``bytes`` of the fixed width
vbin8/16/32                         ``bytes``
str8/str16 (utf8, latin, utf16)     ``str``
map / list / array                  ``dict[str, Value]`` / ``list`` / ``list``
struct32                            a generated :class:`Struct` (or :class:`OpaqueStruct`)
void                                ``None``
==================================  ==================================================

Encoding picks a type code from the Python type (the same choices as Qpid's Python codec,
so the two produce the same bytes): ``bool``→boolean, ``int``→int64 (uint64 above its
range), ``float``→double, ``str``→str16, bytes-like→vbin16 (vbin32 past 64 KiB),
``None``→void, ``dict``→map, ``list``/``tuple``→list, ``UUID``→uuid, ``datetime``→datetime,
``Decimal``→dec64, :class:`Array`→array, :class:`Struct`→struct32.  :class:`Typed` picks the
code explicitly.
``decode_map(..., exact=True)`` wraps every value whose code is not the one its Python type
would get in :class:`Typed`, so re-encoding gives the same bytes.  Type codes the spec does
not define decode, by the width their high nibble gives (spec 3.2), to ``Typed(code,
bytes)`` and re-encode unchanged.

Every malformed input raises :class:`DecodeError`; the entry points wrap ``struct.error``,
``IndexError``, ``ValueError`` and ``UnicodeDecodeError`` once.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Self, TypeAlias, TypeVar

from leveret.protocol.amqp010._generated.constants import TypeCode
from leveret.protocol.amqp010.errors import DecodeError, EncodeError
from leveret.protocol.amqp010.sequence import SequenceSet

__all__ = [
    "DECODE_ERRORS",
    "ENCODE_ERRORS",
    "MAX_DEPTH",
    "Array",
    "Buffer",
    "Command",
    "Control",
    "OpaqueStruct",
    "Struct",
    "Typed",
    "Value",
    "code_of",
    "dec_array",
    "dec_byte_ranges",
    "dec_list",
    "dec_map",
    "dec_sequence_set",
    "dec_str8",
    "dec_str16",
    "dec_str16_array",
    "dec_struct32",
    "dec_vbin8",
    "dec_vbin16",
    "dec_vbin32",
    "decode_map",
    "decode_struct32",
    "decode_value",
    "enc_array",
    "enc_byte_ranges",
    "enc_list",
    "enc_map",
    "enc_sequence_set",
    "enc_str8",
    "enc_str16",
    "enc_str16_array",
    "enc_struct32",
    "enc_vbin8",
    "enc_vbin16",
    "enc_vbin32",
    "encode_map",
    "encode_value",
    "fixed_width",
    "register_structs",
]

Buffer: TypeAlias = "bytes | bytearray | memoryview"

MAX_DEPTH = 100
"""Deepest nesting of maps, lists, arrays and structs the decoder accepts."""

# Errors a decoder may raise on malformed input before the entry point wraps them.
DECODE_ERRORS = (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError)
ENCODE_ERRORS = (struct.error, OverflowError, ValueError, TypeError, UnicodeEncodeError)


@dataclass(frozen=True, slots=True)
class Typed:
    """A value with an explicit type code (``TypeCode`` or any code the spec's widths allow)."""

    code: int
    value: Value


@dataclass(frozen=True, slots=True)
class Array:
    """An ``array``: items that all have the type ``code`` (decoded arrays are plain lists
    unless ``exact=True``)."""

    code: int
    items: tuple[Value, ...]


class Struct:
    """Base of every generated struct, control and command (spec 3.6 "compound types").

    ``CODE`` is ``class-code << 8 | struct-code`` (``None`` for structs without a code),
    ``SIZE`` the width of the size prefix when the struct is a field (0, 1, 2 or 4) and
    ``PACK`` the width of the packing flags.  A field whose packing flag is clear is ``None``
    (``False`` for ``bit`` fields, whose value is the flag itself).
    """

    __slots__ = ()

    NAME: ClassVar[str]
    CODE: ClassVar[int | None]
    SIZE: ClassVar[int]
    PACK: ClassVar[int]
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(field name, spec type) pairs in wire order; struct-typed fields as ``struct:Class``."""

    def encode_fields(self, out: bytearray) -> None:
        """Append the packing flags and the present fields."""
        raise NotImplementedError

    @classmethod
    def decode_fields(cls, buf: bytes, off: int) -> tuple[Self, int]:
        """Decode packing flags and fields at ``off``; return the struct and the new offset."""
        raise NotImplementedError

    def encode_sized(self, out: bytearray) -> None:
        """Append the struct as a field: size prefix (``SIZE`` octets), code, fields."""
        at = len(out)
        width = self.SIZE
        out += bytes(width)
        if self.CODE is not None:
            out += _U16.pack(self.CODE)
        self.encode_fields(out)
        if width:
            size = len(out) - at - width
            out[at : at + width] = size.to_bytes(width, "big")

    @classmethod
    def decode_sized(cls, buf: bytes, off: int) -> tuple[Self, int]:
        """Decode the struct as a field (size prefix, code, fields)."""
        width = cls.SIZE
        if width == 0:
            if cls.CODE is not None:
                _expect_code(cls, buf, off)
                off += 2
            return cls.decode_fields(buf, off)
        size = int.from_bytes(buf[off : off + width], "big")
        off += width
        end = off + size
        if len(buf) < end or off > len(buf):
            raise DecodeError(f"{cls.NAME}: struct runs past the end of the data")
        if cls.CODE is not None:
            _expect_code(cls, buf, off)
            off += 2
        value, off = cls.decode_fields(buf, off)
        if off != end:
            raise DecodeError(f"{cls.NAME}: struct size {size} does not match its fields")
        return value, off

    def encode(self) -> bytes:
        """The struct as a field, on its own (convenience for tests and headers)."""
        out = bytearray()
        try:
            self.encode_sized(out)
        except ENCODE_ERRORS as exc:
            raise EncodeError(f"cannot encode {self.NAME}: {exc}") from exc
        return bytes(out)

    @classmethod
    def decode(cls, data: Buffer) -> Self:
        """Decode one whole struct encoded as by :meth:`encode`."""
        buf = bytes(data)
        try:
            value, off = cls.decode_sized(buf, 0)
        except DECODE_ERRORS as exc:
            raise DecodeError(f"malformed {cls.NAME}: {exc}") from exc
        if off != len(buf):
            raise DecodeError(f"{cls.NAME}: {len(buf) - off} octets after the struct")
        return value

    def missing_required(self) -> list[str]:
        """Names of required fields (spec ``required="true"``) that are not set."""
        return [name for name in self.REQUIRED if getattr(self, name) is None]


def _expect_code(cls: type[Struct], buf: bytes, off: int) -> None:
    code = _U16.unpack_from(buf, off)[0]
    if code != cls.CODE:
        raise DecodeError(f"{cls.NAME}: struct code {code:#06x}, expected {cls.CODE:#06x}")


class Control(Struct):
    """Base of the generated controls (spec 4.3: segment type control, track 0).

    A control segment is the control's code followed by its packing flags and fields, which
    is :meth:`Struct.encode` of a coded struct with no size prefix.
    """

    __slots__ = ()

    SIZE: ClassVar[int] = 0
    PACK: ClassVar[int] = 2
    RESPONSES: ClassVar[tuple[str, ...]] = ()


class Command(Struct):
    """Base of the generated commands (segment type command, track 1).

    A command segment is the command's code, the session header (``sync`` bit), then its
    packing flags and fields; a command may be followed by a header segment (a sequence of
    struct32s, ``HEADER_ENTRIES``) and a body segment (``HAS_BODY``).
    """

    __slots__ = ()

    SIZE: ClassVar[int] = 0
    PACK: ClassVar[int] = 2
    RESPONSES: ClassVar[tuple[str, ...]] = ()
    RESULT: ClassVar[type[Struct] | None] = None
    HEADER_ENTRIES: ClassVar[tuple[type[Struct], ...]] = ()
    HEADER_REQUIRED: ClassVar[bool] = False
    HAS_BODY: ClassVar[bool] = False

    def encode(self, sync: bool = False) -> bytes:
        """The command segment: code, session header (with ``sync``), packing flags, fields."""
        assert self.CODE is not None
        out = bytearray(_U16.pack(self.CODE))
        out += SESSION_HEADER_SYNC if sync else SESSION_HEADER_NO_SYNC
        try:
            self.encode_fields(out)
        except ENCODE_ERRORS as exc:
            raise EncodeError(f"cannot encode {self.NAME}: {exc}") from exc
        return bytes(out)

    @classmethod
    def decode(cls, data: Buffer) -> Self:
        """Decode a whole command segment of this command (its ``sync`` bit is dropped)."""
        buf = bytes(data)
        if buf[:2] != _U16.pack(cls.CODE or 0):
            raise DecodeError(f"not a {cls.NAME} segment")
        command, _sync, off = decode_command_at(cls, buf)
        if off != len(buf):
            raise DecodeError(f"{cls.NAME}: {len(buf) - off} octets after the fields")
        return command


# The session header (struct session.header: size 1, pack 1, one bit ``sync``) as it precedes
# every command's fields; the two values are spelled out because they are on the hot path.
SESSION_HEADER_NO_SYNC = b"\x01\x00"
SESSION_HEADER_SYNC = b"\x01\x01"


_C = TypeVar("_C", bound=Command)


def decode_command_at(cls: type[_C], buf: bytes) -> tuple[_C, bool, int]:
    """Decode the command segment ``buf`` (code already checked) as ``cls``.

    Returns the command, its ``sync`` bit and the offset after its fields.
    """
    try:
        size = buf[2]
        flags = buf[3]
        if size != 1 or flags & 0xFE:
            raise DecodeError(f"{cls.NAME}: malformed session header")
        command, off = cls.decode_fields(buf, 4)
    except DECODE_ERRORS as exc:
        raise DecodeError(f"malformed {cls.NAME}: {exc}") from exc
    return command, bool(flags), off


@dataclass(slots=True)
class OpaqueStruct(Struct):
    """A ``struct32`` whose code this spec does not define: kept as its raw field octets."""

    NAME: ClassVar[str] = "opaque-struct"
    SIZE: ClassVar[int] = 4
    PACK: ClassVar[int] = 0

    code: int = 0
    data: bytes = b""

    def encode_fields(self, out: bytearray) -> None:
        out += self.data


Value: TypeAlias = (
    "bool | int | float | decimal.Decimal | str | bytes | datetime.datetime | uuid.UUID"
    " | list[Value] | tuple[Value, ...] | dict[str, Value] | Array | Typed | Struct | None"
)

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SEQ_PAIR = struct.Struct(">II")
_BYTE_RANGE = struct.Struct(">QQ")
_DEC32 = struct.Struct(">Bi")
_DEC64 = struct.Struct(">Bq")
_UTC = datetime.UTC
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_MAX_DATETIME = 253402300799  # 9999-12-31T23:59:59Z, the largest datetime can hold
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1

# --------------------------------------------------------------------------------------------
# Variable-width field codecs (used by the generated code)
# --------------------------------------------------------------------------------------------


def _take(buf: bytes, off: int, n: int, what: str) -> bytes:
    end = off + n
    if end > len(buf):
        raise DecodeError(f"{what} of {n} octets runs past the end of the data")
    return buf[off:end]


def dec_vbin8(buf: bytes, off: int) -> tuple[bytes, int]:
    n = buf[off]
    return _take(buf, off + 1, n, "vbin8"), off + 1 + n


def dec_vbin16(buf: bytes, off: int) -> tuple[bytes, int]:
    n = _U16.unpack_from(buf, off)[0]
    return _take(buf, off + 2, n, "vbin16"), off + 2 + n


def dec_vbin32(buf: bytes, off: int) -> tuple[bytes, int]:
    n = _U32.unpack_from(buf, off)[0]
    return _take(buf, off + 4, n, "vbin32"), off + 4 + n


def dec_str8(buf: bytes, off: int) -> tuple[str, int]:
    n = buf[off]
    return _take(buf, off + 1, n, "str8").decode(), off + 1 + n


def dec_str16(buf: bytes, off: int) -> tuple[str, int]:
    n = _U16.unpack_from(buf, off)[0]
    return _take(buf, off + 2, n, "str16").decode(), off + 2 + n


def enc_vbin8(out: bytearray, value: Buffer) -> None:
    out.append(len(value))
    out += value


def enc_vbin16(out: bytearray, value: Buffer) -> None:
    out += _U16.pack(len(value))
    out += value


def enc_vbin32(out: bytearray, value: Buffer) -> None:
    out += _U32.pack(len(value))
    out += value


def enc_str8(out: bytearray, value: str) -> None:
    enc_vbin8(out, value.encode())


def enc_str16(out: bytearray, value: str) -> None:
    enc_vbin16(out, value.encode())


def dec_sequence_set(buf: bytes, off: int) -> tuple[SequenceSet, int]:
    size = _U16.unpack_from(buf, off)[0]
    off += 2
    end = off + size
    if size % 8 or end > len(buf):
        raise DecodeError(f"sequence-set of {size} octets is malformed")
    result = SequenceSet()
    for pos in range(off, end, 8):
        lower, upper = _SEQ_PAIR.unpack_from(buf, pos)
        result.add_range(lower, upper)
    return result, end


def enc_sequence_set(out: bytearray, value: SequenceSet) -> None:
    out += _U16.pack(8 * len(value))
    for lower, upper in value:
        out += _SEQ_PAIR.pack(lower, upper)


def dec_byte_ranges(buf: bytes, off: int) -> tuple[tuple[tuple[int, int], ...], int]:
    size = _U16.unpack_from(buf, off)[0]
    off += 2
    end = off + size
    if size % 16 or end > len(buf):
        raise DecodeError(f"byte-ranges of {size} octets is malformed")
    return tuple(_BYTE_RANGE.unpack_from(buf, pos) for pos in range(off, end, 16)), end


def enc_byte_ranges(out: bytearray, value: Sequence[tuple[int, int]]) -> None:
    out += _U16.pack(16 * len(value))
    for lower, upper in value:
        out += _BYTE_RANGE.pack(lower, upper)


def dec_map(buf: bytes, off: int) -> tuple[dict[str, Value], int]:
    return _dec_map(buf, off, 0, False)


def enc_map(out: bytearray, value: Mapping[str, Value]) -> None:
    _enc_map(out, value, 0)


def dec_list(buf: bytes, off: int) -> tuple[list[Value], int]:
    return _dec_list(buf, off, 0, False)


def enc_list(out: bytearray, value: Sequence[Value]) -> None:
    _enc_list(out, value, 0)


def dec_array(buf: bytes, off: int) -> tuple[list[Value], int]:
    items, _code, off = _dec_array_items(buf, off, 0, False)
    return items, off


def enc_array(out: bytearray, value: Sequence[Value] | Array, code: int | None = None) -> None:
    """Append an array; its item code is ``code``, else the Array's, else the first item's."""
    _enc_array(out, value, 0, code)


def dec_str16_array(buf: bytes, off: int) -> tuple[list[str], int]:
    """An array of str16 (``str16-array``, ``amqp-host-array``)."""
    items, _code, off = _dec_array_items(buf, off, 0, False)
    strings = [item for item in items if isinstance(item, str)]
    if len(strings) != len(items):
        raise DecodeError("a str16-array holds values that are not strings")
    return strings, off


def enc_str16_array(out: bytearray, value: Sequence[str]) -> None:
    _enc_array(out, list(value), 0, TypeCode.STR16)


def dec_struct32(buf: bytes, off: int) -> tuple[Struct, int]:
    return _dec_struct32(buf, off, 0, False)


def enc_struct32(out: bytearray, value: Struct) -> None:
    _enc_struct32(out, value)


# --------------------------------------------------------------------------------------------
# Self-describing values
# --------------------------------------------------------------------------------------------

_FIXED_WIDTH_BY_NIBBLE = {0: 1, 1: 2, 2: 4, 3: 8, 4: 16, 5: 32, 6: 64, 7: 128, 0xC: 5, 0xD: 9}
_FIXED_WIDTH_BY_NIBBLE[0xF] = 0
_VARIABLE_WIDTH_BY_NIBBLE = {8: 1, 9: 2, 0xA: 4}


def fixed_width(code: int) -> int | None:
    """The width in octets of a fixed-width type code, ``None`` if it is variable-width.

    Raises:
        DecodeError: the code lies in a range the spec reserves (0xb0-0xbf, 0xe0-0xef).
    """
    nibble = code >> 4
    if nibble in _FIXED_WIDTH_BY_NIBBLE:
        return _FIXED_WIDTH_BY_NIBBLE[nibble]
    if nibble in _VARIABLE_WIDTH_BY_NIBBLE:
        return None
    raise DecodeError(f"type code {code:#04x} is reserved")


_Dec: TypeAlias = "Callable[[bytes, int, int, bool], tuple[Value, int]]"
_Enc: TypeAlias = "Callable[[bytearray, Value, int], None]"


def _fixed_dec(fmt: str) -> _Dec:
    st = struct.Struct(fmt)
    unpack = st.unpack_from
    size = st.size

    def dec(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
        v: Value = unpack(buf, off)[0]
        return v, off + size

    return dec


def _fixed_enc(fmt: str) -> _Enc:
    pack = struct.Struct(fmt).pack

    def enc(out: bytearray, value: Value, depth: int) -> None:
        out += pack(value)

    return enc


def _bin_dec(width: int) -> _Dec:
    def dec(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
        return _take(buf, off, width, "fixed-width value"), off + width

    return dec


def _bin_enc(width: int) -> _Enc:
    def enc(out: bytearray, value: Value, depth: int) -> None:
        if not isinstance(value, bytes | bytearray | memoryview) or len(value) != width:
            raise EncodeError(f"a {width}-octet value needs {width} bytes, not {value!r}")
        out += value

    return enc


def _text_dec(prefix: struct.Struct, encoding: str) -> _Dec:
    unpack = prefix.unpack_from
    width = prefix.size

    def dec(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
        n = unpack(buf, off)[0]
        raw = _take(buf, off + width, n, "string")
        try:
            return raw.decode(encoding), off + width + n
        except UnicodeDecodeError:
            # Text that is not in its declared encoding is kept, as bytes, rather than lost:
            # application headers are the sender's business.
            return raw, off + width + n

    return dec


def _text_enc(prefix: struct.Struct, encoding: str) -> _Enc:
    pack = prefix.pack

    def enc(out: bytearray, value: Value, depth: int) -> None:
        raw = value.encode(encoding) if isinstance(value, str) else _as_bytes(value)
        out += pack(len(raw))
        out += raw

    return enc


def _vbin_dec(prefix: struct.Struct) -> _Dec:
    unpack = prefix.unpack_from
    width = prefix.size

    def dec(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
        n = unpack(buf, off)[0]
        return _take(buf, off + width, n, "vbin"), off + width + n

    return dec


def _vbin_enc(prefix: struct.Struct) -> _Enc:
    pack = prefix.pack

    def enc(out: bytearray, value: Value, depth: int) -> None:
        raw = _as_bytes(value)
        out += pack(len(raw))
        out += raw

    return enc


def _as_bytes(value: Value) -> bytes | bytearray | memoryview:
    if isinstance(value, bytes | bytearray | memoryview):
        return value
    raise EncodeError(f"expected bytes, not {type(value).__name__}")


def _dec_bool(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return buf[off] != 0, off + 1


def _enc_bool(out: bytearray, value: Value, depth: int) -> None:
    out.append(1 if value else 0)


def _dec_char(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return _take(buf, off, 1, "char").decode("iso-8859-15"), off + 1


def _enc_char(out: bytearray, value: Value, depth: int) -> None:
    raw = value.encode("iso-8859-15") if isinstance(value, str) else _as_bytes(value)
    if len(raw) != 1:
        raise EncodeError(f"char needs one character, not {value!r}")
    out += raw


def _dec_char32(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return _take(buf, off, 4, "char-utf32").decode("utf-32-be"), off + 4


def _enc_char32(out: bytearray, value: Value, depth: int) -> None:
    if not isinstance(value, str) or len(value) != 1:
        raise EncodeError(f"char-utf32 needs one character, not {value!r}")
    out += value.encode("utf-32-be")


def _dec_datetime(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    seconds = _U64.unpack_from(buf, off)[0]
    if seconds > _MAX_DATETIME:
        return Typed(TypeCode.DATETIME, seconds), off + 8
    return _EPOCH + datetime.timedelta(seconds=seconds), off + 8


def _enc_datetime(out: bytearray, value: Value, depth: int) -> None:
    if isinstance(value, datetime.datetime):
        seconds = calendar.timegm(value.utctimetuple())
    elif isinstance(value, int):
        seconds = value
    else:
        raise EncodeError(f"datetime needs a datetime or int, not {type(value).__name__}")
    out += _U64.pack(seconds)


def _dec_uuid(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return uuid.UUID(bytes=_take(buf, off, 16, "uuid")), off + 16


def _enc_uuid(out: bytearray, value: Value, depth: int) -> None:
    if isinstance(value, uuid.UUID):
        out += value.bytes
    else:
        raw = _as_bytes(value)
        if len(raw) != 16:
            raise EncodeError("uuid needs 16 octets")
        out += raw


def _dec_decimal(st: struct.Struct) -> _Dec:
    unpack = st.unpack_from
    size = st.size

    def dec(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
        exponent, mantissa = unpack(buf, off)
        return decimal.Decimal(mantissa).scaleb(-exponent), off + size

    return dec


def _enc_decimal(st: struct.Struct) -> _Enc:
    pack = st.pack

    def enc(out: bytearray, value: Value, depth: int) -> None:
        if not isinstance(value, decimal.Decimal) or not value.is_finite():
            raise EncodeError(f"decimal needs a finite Decimal, not {value!r}")
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        mantissa = int("".join(map(str, digits)) or "0")
        if exponent > 0:
            mantissa *= 10**exponent
            exponent = 0
        out += pack(-exponent, -mantissa if sign else mantissa)

    return enc


def _dec_void(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return None, off


def _enc_void(out: bytearray, value: Value, depth: int) -> None:
    if value is not None:
        raise EncodeError(f"void carries no value, not {value!r}")


def _dec_map_value(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return _dec_map(buf, off, depth, exact)


def _enc_map_value(out: bytearray, value: Value, depth: int) -> None:
    if not isinstance(value, Mapping):
        raise EncodeError(f"map needs a mapping, not {type(value).__name__}")
    _enc_map(out, value, depth)


def _dec_list_value(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return _dec_list(buf, off, depth, exact)


def _enc_list_value(out: bytearray, value: Value, depth: int) -> None:
    if not isinstance(value, list | tuple):
        raise EncodeError(f"list needs a list, not {type(value).__name__}")
    _enc_list(out, value, depth)


def _dec_array_value(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    items, code, off = _dec_array_items(buf, off, depth, exact)
    if exact:
        return Array(code, tuple(items)), off
    return items, off


def _enc_array_value(out: bytearray, value: Value, depth: int) -> None:
    if not isinstance(value, list | tuple | Array):
        raise EncodeError(f"array needs a list or Array, not {type(value).__name__}")
    _enc_array(out, value, depth, None)


def _dec_struct32_value(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Value, int]:
    return _dec_struct32(buf, off, depth, exact)


def _enc_struct32_value(out: bytearray, value: Value, depth: int) -> None:
    if not isinstance(value, Struct):
        raise EncodeError(f"struct32 needs a Struct, not {type(value).__name__}")
    _enc_struct32(out, value)


_S8 = struct.Struct(">B")
_S16 = struct.Struct(">H")
_S32 = struct.Struct(">I")

_DECODERS: dict[int, _Dec] = {
    TypeCode.BIN8: _bin_dec(1),
    TypeCode.INT8: _fixed_dec(">b"),
    TypeCode.UINT8: _fixed_dec(">B"),
    TypeCode.CHAR: _dec_char,
    TypeCode.BOOLEAN: _dec_bool,
    TypeCode.BIN16: _bin_dec(2),
    TypeCode.INT16: _fixed_dec(">h"),
    TypeCode.UINT16: _fixed_dec(">H"),
    TypeCode.BIN32: _bin_dec(4),
    TypeCode.INT32: _fixed_dec(">i"),
    TypeCode.UINT32: _fixed_dec(">I"),
    TypeCode.FLOAT: _fixed_dec(">f"),
    TypeCode.CHAR_UTF32: _dec_char32,
    TypeCode.BIN64: _bin_dec(8),
    TypeCode.INT64: _fixed_dec(">q"),
    TypeCode.UINT64: _fixed_dec(">Q"),
    TypeCode.DOUBLE: _fixed_dec(">d"),
    TypeCode.DATETIME: _dec_datetime,
    TypeCode.BIN128: _bin_dec(16),
    TypeCode.UUID: _dec_uuid,
    TypeCode.BIN256: _bin_dec(32),
    TypeCode.BIN512: _bin_dec(64),
    TypeCode.BIN1024: _bin_dec(128),
    TypeCode.VBIN8: _vbin_dec(_S8),
    TypeCode.STR8_LATIN: _text_dec(_S8, "iso-8859-15"),
    TypeCode.STR8: _text_dec(_S8, "utf-8"),
    TypeCode.STR8_UTF16: _text_dec(_S8, "utf-16-be"),
    TypeCode.VBIN16: _vbin_dec(_S16),
    TypeCode.STR16_LATIN: _text_dec(_S16, "iso-8859-15"),
    TypeCode.STR16: _text_dec(_S16, "utf-8"),
    TypeCode.STR16_UTF16: _text_dec(_S16, "utf-16-be"),
    TypeCode.VBIN32: _vbin_dec(_S32),
    TypeCode.MAP: _dec_map_value,
    TypeCode.LIST: _dec_list_value,
    TypeCode.ARRAY: _dec_array_value,
    TypeCode.STRUCT32: _dec_struct32_value,
    TypeCode.BIN40: _bin_dec(5),
    TypeCode.DEC32: _dec_decimal(_DEC32),
    TypeCode.BIN72: _bin_dec(9),
    TypeCode.DEC64: _dec_decimal(_DEC64),
    TypeCode.VOID: _dec_void,
    TypeCode.BIT: _dec_void,
}

_ENCODERS: dict[int, _Enc] = {
    TypeCode.BIN8: _bin_enc(1),
    TypeCode.INT8: _fixed_enc(">b"),
    TypeCode.UINT8: _fixed_enc(">B"),
    TypeCode.CHAR: _enc_char,
    TypeCode.BOOLEAN: _enc_bool,
    TypeCode.BIN16: _bin_enc(2),
    TypeCode.INT16: _fixed_enc(">h"),
    TypeCode.UINT16: _fixed_enc(">H"),
    TypeCode.BIN32: _bin_enc(4),
    TypeCode.INT32: _fixed_enc(">i"),
    TypeCode.UINT32: _fixed_enc(">I"),
    TypeCode.FLOAT: _fixed_enc(">f"),
    TypeCode.CHAR_UTF32: _enc_char32,
    TypeCode.BIN64: _bin_enc(8),
    TypeCode.INT64: _fixed_enc(">q"),
    TypeCode.UINT64: _fixed_enc(">Q"),
    TypeCode.DOUBLE: _fixed_enc(">d"),
    TypeCode.DATETIME: _enc_datetime,
    TypeCode.BIN128: _bin_enc(16),
    TypeCode.UUID: _enc_uuid,
    TypeCode.BIN256: _bin_enc(32),
    TypeCode.BIN512: _bin_enc(64),
    TypeCode.BIN1024: _bin_enc(128),
    TypeCode.VBIN8: _vbin_enc(_S8),
    TypeCode.STR8_LATIN: _text_enc(_S8, "iso-8859-15"),
    TypeCode.STR8: _text_enc(_S8, "utf-8"),
    TypeCode.STR8_UTF16: _text_enc(_S8, "utf-16-be"),
    TypeCode.VBIN16: _vbin_enc(_S16),
    TypeCode.STR16_LATIN: _text_enc(_S16, "iso-8859-15"),
    TypeCode.STR16: _text_enc(_S16, "utf-8"),
    TypeCode.STR16_UTF16: _text_enc(_S16, "utf-16-be"),
    TypeCode.VBIN32: _vbin_enc(_S32),
    TypeCode.MAP: _enc_map_value,
    TypeCode.LIST: _enc_list_value,
    TypeCode.ARRAY: _enc_array_value,
    TypeCode.STRUCT32: _enc_struct32_value,
    TypeCode.BIN40: _bin_enc(5),
    TypeCode.DEC32: _enc_decimal(_DEC32),
    TypeCode.BIN72: _bin_enc(9),
    TypeCode.DEC64: _enc_decimal(_DEC64),
    TypeCode.VOID: _enc_void,
    TypeCode.BIT: _enc_void,
}


def code_of(value: Value) -> int:
    """The type code a value is encoded with when none is given (see the module doc)."""
    if isinstance(value, Typed):
        return value.code
    if value is None:
        return TypeCode.VOID
    if isinstance(value, bool):
        return TypeCode.BOOLEAN
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return TypeCode.INT64
        if 0 <= value <= _UINT64_MAX:
            return TypeCode.UINT64
        raise EncodeError(f"integer {value} does not fit in 64 bits")
    if isinstance(value, float):
        return TypeCode.DOUBLE
    if isinstance(value, str):
        return TypeCode.STR16
    if isinstance(value, bytes | bytearray | memoryview):
        # Qpid's codec sends binary as vbin16 (vbin32 only for what does not fit).
        return TypeCode.VBIN16 if len(value) <= 0xFFFF else TypeCode.VBIN32
    if isinstance(value, dict):
        return TypeCode.MAP
    if isinstance(value, list | tuple):
        return TypeCode.LIST
    if isinstance(value, Array):
        return TypeCode.ARRAY
    if isinstance(value, Struct):
        return TypeCode.STRUCT32
    if isinstance(value, uuid.UUID):
        return TypeCode.UUID
    if isinstance(value, datetime.datetime):
        return TypeCode.DATETIME
    if isinstance(value, decimal.Decimal):
        return TypeCode.DEC64
    raise EncodeError(f"no AMQP 0-10 type for {type(value).__name__}")


def _decode_typed(buf: bytes, off: int, code: int, depth: int, exact: bool) -> tuple[Value, int]:
    dec = _DECODERS.get(code)
    if dec is None:
        width = fixed_width(code)
        if width is None:
            prefix = _VARIABLE_WIDTH_BY_NIBBLE[code >> 4]
            n = int.from_bytes(_take(buf, off, prefix, "size"), "big")
            raw = _take(buf, off + prefix, n, "value")
            return Typed(code, raw), off + prefix + n
        return Typed(code, _take(buf, off, width, "value")), off + width
    value, off = dec(buf, off, depth, exact)
    if exact and not isinstance(value, Typed | Array) and code_of(value) != code:
        value = Typed(code, value)
    return value, off


def _encode_typed(out: bytearray, code: int, value: Value, depth: int) -> None:
    if isinstance(value, Typed):
        value = value.value
    enc = _ENCODERS.get(code)
    if enc is not None:
        enc(out, value, depth)
        return
    width = fixed_width(code)
    raw = _as_bytes(value)
    if width is None:
        prefix = _VARIABLE_WIDTH_BY_NIBBLE[code >> 4]
        out += len(raw).to_bytes(prefix, "big")
    elif len(raw) != width:
        raise EncodeError(f"type code {code:#04x} needs {width} octets, not {len(raw)}")
    out += raw


def _enter(depth: int) -> int:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"values nested deeper than {MAX_DEPTH}")
    return depth + 1


def _container(buf: bytes, off: int, header: int) -> tuple[int, int]:
    """Size-prefixed container at ``off``: return (offset after size, end); check bounds."""
    size = _U32.unpack_from(buf, off)[0]
    off += 4
    end = off + size
    if end > len(buf):
        raise DecodeError(f"container of {size} octets runs past the end of the data")
    if size < header:
        raise DecodeError(f"container of {size} octets is too small for its header")
    return off, end


def _dec_map(buf: bytes, off: int, depth: int, exact: bool) -> tuple[dict[str, Value], int]:
    depth = _enter(depth)
    if _U32.unpack_from(buf, off)[0] == 0:
        # Qpid encodes an absent map as size 0 with no count; read it as empty.
        return {}, off + 4
    off, end = _container(buf, off, 4)
    count = _U32.unpack_from(buf, off)[0]
    off += 4
    result: dict[str, Value] = {}
    for _ in range(count):
        n = buf[off]
        key = _take(buf, off + 1, n, "map key").decode()
        off += 1 + n
        code = buf[off]
        value, off = _decode_typed(buf, off + 1, code, depth, exact)
        if off > end:
            raise DecodeError("map entry runs past the end of the map")
        result[key] = value
    if off != end:
        raise DecodeError(f"map size and count disagree ({end - off} octets left)")
    return result, off


def _enc_map(out: bytearray, value: Mapping[str, Value], depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise EncodeError(f"values nested deeper than {MAX_DEPTH}")
    at = len(out)
    out += _U32.pack(0)
    out += _U32.pack(len(value))
    for key, item in value.items():
        enc_str8(out, key)
        code = code_of(item)
        out.append(code)
        _encode_typed(out, code, item, depth + 1)
    out[at : at + 4] = _U32.pack(len(out) - at - 4)


def _dec_list(buf: bytes, off: int, depth: int, exact: bool) -> tuple[list[Value], int]:
    depth = _enter(depth)
    if _U32.unpack_from(buf, off)[0] == 0:
        return [], off + 4
    off, end = _container(buf, off, 4)
    count = _U32.unpack_from(buf, off)[0]
    off += 4
    result: list[Value] = []
    for _ in range(count):
        code = buf[off]
        value, off = _decode_typed(buf, off + 1, code, depth, exact)
        if off > end:
            raise DecodeError("list item runs past the end of the list")
        result.append(value)
    if off != end:
        raise DecodeError(f"list size and count disagree ({end - off} octets left)")
    return result, off


def _enc_list(out: bytearray, value: Sequence[Value], depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise EncodeError(f"values nested deeper than {MAX_DEPTH}")
    at = len(out)
    out += _U32.pack(0)
    out += _U32.pack(len(value))
    for item in value:
        code = code_of(item)
        out.append(code)
        _encode_typed(out, code, item, depth + 1)
    out[at : at + 4] = _U32.pack(len(out) - at - 4)


def _dec_array_items(buf: bytes, off: int, depth: int, exact: bool) -> tuple[list[Value], int, int]:
    depth = _enter(depth)
    if _U32.unpack_from(buf, off)[0] == 0:
        return [], TypeCode.VOID, off + 4
    off, end = _container(buf, off, 5)
    code = buf[off]
    count = _U32.unpack_from(buf, off + 1)[0]
    off += 5
    if code in (TypeCode.VOID, TypeCode.BIT) and count > end - off:
        # Zero-width items take no octets; cap the count so it cannot cost memory.
        raise DecodeError(f"array of {count} zero-width items is not accepted")
    result: list[Value] = []
    for _ in range(count):
        # Items share the array's code, so each decodes plain (exactness is on the Array).
        value, off = _decode_typed(buf, off, code, depth, False)
        if off > end:
            raise DecodeError("array item runs past the end of the array")
        result.append(value)
    if off != end:
        raise DecodeError(f"array size and count disagree ({end - off} octets left)")
    return result, code, off


def _enc_array(
    out: bytearray, value: Sequence[Value] | Array, depth: int, code: int | None
) -> None:
    if depth >= MAX_DEPTH:
        raise EncodeError(f"values nested deeper than {MAX_DEPTH}")
    items: Sequence[Value]
    if isinstance(value, Array):
        items = value.items
        code = value.code if code is None else code
    else:
        items = value
    if code is None:
        code = code_of(items[0]) if items else TypeCode.VOID
    at = len(out)
    out += _U32.pack(0)
    out.append(code)
    out += _U32.pack(len(items))
    for item in items:
        _encode_typed(out, code, item, depth + 1)
    out[at : at + 4] = _U32.pack(len(out) - at - 4)


# The coded structs a struct32 decodes to, by ``class-code << 8 | struct-code``: the
# generated ``_generated/structs.py`` (which stands above this module: its field codecs are
# the ones here) registers its table when it is imported; the package imports it.
_STRUCTS: dict[int, type[Struct]] = {}


def register_structs(table: Mapping[int, type[Struct]]) -> None:
    """Make the structs of ``table`` known to the value codec: a struct32 of one of their
    codes (a field, or a value in a map, list or array) decodes to its class."""
    _STRUCTS.update(table)


def _dec_struct32(buf: bytes, off: int, depth: int, exact: bool) -> tuple[Struct, int]:
    _enter(depth)
    size = _U32.unpack_from(buf, off)[0]
    off += 4
    end = off + size
    if end > len(buf) or size < 2:
        raise DecodeError(f"struct32 of {size} octets is malformed")
    code = _U16.unpack_from(buf, off)[0]
    cls = _STRUCTS.get(code)
    if cls is None:
        return OpaqueStruct(code, buf[off + 2 : end]), end
    value, off = cls.decode_fields(buf, off + 2)
    if off != end:
        raise DecodeError(f"{cls.NAME}: struct32 size {size} does not match its fields")
    return value, off


def _enc_struct32(out: bytearray, value: Struct) -> None:
    at = len(out)
    out += _U32.pack(0)
    if isinstance(value, OpaqueStruct):
        out += _U16.pack(value.code)
    elif value.CODE is None:
        raise EncodeError(f"{value.NAME} has no struct code and cannot be a struct32")
    else:
        out += _U16.pack(value.CODE)
    value.encode_fields(out)
    out[at : at + 4] = _U32.pack(len(out) - at - 4)


# --------------------------------------------------------------------------------------------
# Public entry points (wrap every low-level error)
# --------------------------------------------------------------------------------------------


def decode_map(data: Buffer, *, exact: bool = False) -> dict[str, Value]:
    """Decode one whole encoded ``map`` (size, count, entries)."""
    buf = bytes(data)
    try:
        value, off = _dec_map(buf, 0, 0, exact)
    except DECODE_ERRORS as exc:
        raise DecodeError(f"malformed map: {exc}") from exc
    if off != len(buf):
        raise DecodeError(f"{len(buf) - off} octets after the map")
    return value


def encode_map(value: Mapping[str, Value]) -> bytes:
    """Encode a ``map``."""
    out = bytearray()
    try:
        _enc_map(out, value, 0)
    except ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode map: {exc}") from exc
    return bytes(out)


def decode_value(data: Buffer, *, exact: bool = False) -> Value:
    """Decode one type code followed by its value (a list item, say)."""
    buf = bytes(data)
    try:
        value, off = _decode_typed(buf, 1, buf[0], 0, exact)
    except DECODE_ERRORS as exc:
        raise DecodeError(f"malformed value: {exc}") from exc
    if off != len(buf):
        raise DecodeError(f"{len(buf) - off} octets after the value")
    return value


def encode_value(value: Value) -> bytes:
    """Encode a type code (chosen as :func:`code_of` does) followed by the value."""
    out = bytearray()
    try:
        code = code_of(value)
        out.append(code)
        _encode_typed(out, code, value, 0)
    except ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {value!r}: {exc}") from exc
    return bytes(out)


def decode_struct32(data: Buffer) -> Struct:
    """Decode one whole ``struct32`` (size, class and struct code, packing flags, fields)."""
    buf = bytes(data)
    try:
        value, off = _dec_struct32(buf, 0, 0, False)
    except DECODE_ERRORS as exc:
        raise DecodeError(f"malformed struct32: {exc}") from exc
    if off != len(buf):
        raise DecodeError(f"{len(buf) - off} octets after the struct32")
    return value
