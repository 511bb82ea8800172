"""AMQP/Fast 0.8a2 field tables (AMQ RFC 006, 3.2.3.1); the Fast codec imports it.

Not the 0-9-1 format: every length is two octets and there are four value types.

::

    field-table      = short-integer *field-value-pair     (octets that follow)
    field-value-pair = field-name field-value
    field-name       = short-string
    field-value      = 'S' long-string                     (2-octet length + octets)
                     / 'I' long-integer                    (signed 32-bit)
                     / 'D' decimals long-integer           (unsigned scale octet, signed 32-bit)
                     / 'T' long-integer                    (POSIX time_t, 32 bits, seconds)

Python values: ``S`` decodes to ``str`` when the octets are UTF-8, else ``bytes``; ``I`` to
``int``; ``D`` to ``decimal.Decimal``; ``T`` to a UTC ``datetime``. "If a field occurs more
than once in the field table only the first instance should be used": the decoder keeps the
first. The RFC's rule for names (a letter, ``$`` or ``#``, then letters, digits, ``$``, ``#``
or ``_``, at most 128) is enforced when encoding; decoding accepts any short string, as a
server should be lenient in what it reads. ``T`` is read as unsigned (time_t values before
1970 are not meaningful for expirations). Every error is :class:`leveret.errors.SyntaxError_`.
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import re
import struct
from typing import TYPE_CHECKING, TypeAlias

from leveret.errors import SyntaxError_

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["FastTable", "FastValue", "decode_table", "encode_table"]

FastValue: TypeAlias = "str | bytes | int | decimal.Decimal | datetime.datetime"
FastTable: TypeAlias = "dict[str, FastValue]"

_H = struct.Struct(">H")
_I = struct.Struct(">i")
_L = struct.Struct(">L")
_DEC = struct.Struct(">Bi")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_NAME = re.compile(r"[A-Za-z$#][A-Za-z0-9$#_]{0,127}")
_I32 = (-(2**31), 2**31 - 1)


def decode_table(buf: bytes | memoryview, offset: int) -> tuple[FastTable, int]:
    """Decode the field table at ``offset``; return (table, offset after it)."""
    try:
        size = _H.unpack_from(buf, offset)[0]
        off = offset + 2
        end = off + size
        if end > len(buf):
            raise SyntaxError_("field table: length runs past the end of the command")
        table: FastTable = {}
        while off < end:
            kend = off + 1 + buf[off]
            if kend >= end:
                raise SyntaxError_("field table: entry runs past the end of the table")
            name = str(buf[off + 1 : kend], "utf-8")
            letter = buf[kend]
            off = kend + 1
            value: FastValue
            if letter == 0x53:  # 'S'
                n = _H.unpack_from(buf, off)[0]
                raw = bytes(buf[off + 2 : off + 2 + n])
                if len(raw) != n:
                    raise SyntaxError_("field table: string runs past the end of the table")
                off += 2 + n
                try:
                    value = raw.decode()
                except UnicodeDecodeError:
                    value = raw
            elif letter == 0x49:  # 'I'
                value = _I.unpack_from(buf, off)[0]
                off += 4
            elif letter == 0x44:  # 'D'
                scale, mantissa = _DEC.unpack_from(buf, off)
                value = decimal.Decimal(mantissa).scaleb(-scale)
                off += 5
            elif letter == 0x54:  # 'T'
                value = _EPOCH + datetime.timedelta(seconds=_L.unpack_from(buf, off)[0])
                off += 4
            else:
                shown = chr(letter) if 0x20 < letter < 0x7F else f"0x{letter:02x}"
                raise SyntaxError_(f"field table: unknown field type {shown!r}")
            table.setdefault(name, value)
        if off != end:
            raise SyntaxError_("field table: a value runs past the end of the table")
        return table, end
    except SyntaxError_:
        raise
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise SyntaxError_(f"field table: malformed ({exc})") from exc


def _value(value: object) -> bytes:
    if isinstance(value, bool):
        raise SyntaxError_("field table: AMQP/Fast has no boolean field type")
    if isinstance(value, int):
        if not _I32[0] <= value <= _I32[1]:
            raise SyntaxError_(f"field table: integer {value} is not 32-bit")
        return b"I" + _I.pack(value)
    if isinstance(value, str | bytes):
        data = value.encode() if isinstance(value, str) else value
        if len(data) > 0xFFFF:
            raise SyntaxError_("field table: string longer than 65535 octets")
        return b"S" + _H.pack(len(data)) + data
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise SyntaxError_(f"field table: decimal {value} is not finite")
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        mantissa = int("".join(map(str, digits)) or "0") * 10 ** max(exponent, 0)
        scale = max(-exponent, 0)
        mantissa = -mantissa if sign else mantissa
        if scale > 255 or not _I32[0] <= mantissa <= _I32[1]:
            raise SyntaxError_(f"field table: decimal {value} does not fit scale + int32")
        return b"D" + _DEC.pack(scale, mantissa)
    if isinstance(value, datetime.datetime):
        secs = calendar.timegm(value.utctimetuple())
        if not 0 <= secs <= 0xFFFFFFFF:
            raise SyntaxError_(f"field table: time {value} does not fit a 32-bit time_t")
        return b"T" + _L.pack(secs)
    raise SyntaxError_(f"field table: no AMQP/Fast field type for a {type(value).__name__}")


def encode_table(table: Mapping[str, FastValue] | None) -> bytes:
    """Encode ``table`` (``None`` → empty table)."""
    parts: list[bytes] = []
    for name, value in (table or {}).items():
        if not _NAME.fullmatch(name):
            raise SyntaxError_(f"field table: {name[:40]!r} is not a valid AMQP/Fast field name")
        raw = name.encode()
        parts.append(bytes((len(raw),)) + raw + _value(value))
    body = b"".join(parts)
    if len(body) > 0xFFFF:
        raise SyntaxError_("field table: longer than 65535 octets")
    return _H.pack(len(body)) + body
