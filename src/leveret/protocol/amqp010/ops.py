"""Controls and commands as segment payloads, and header segments; the amqp010 package uses it.

A control segment is ``code, packing flags, fields``; a command segment is ``code, session
header, packing flags, fields``; a header segment is a run of struct32 values (spec 4.3,
"Segments").  These functions dispatch on the code through the generated registries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.protocol.amqp010._generated.commands import COMMANDS
from leveret.protocol.amqp010._generated.controls import CONTROLS
from leveret.protocol.amqp010.errors import DecodeError, EncodeError
from leveret.protocol.amqp010.types import (
    DECODE_ERRORS,
    ENCODE_ERRORS,
    Buffer,
    Command,
    Control,
    Struct,
    dec_struct32,
    decode_command_at,
    enc_struct32,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "decode_command",
    "decode_control",
    "decode_header",
    "encode_header",
    "peek_code",
]


def peek_code(payload: Buffer) -> int | None:
    """The 16-bit code at the start of a control or command segment, if there is one."""
    return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None


def decode_control(payload: Buffer) -> Control:
    """Decode a control segment.

    Raises:
        DecodeError: the code is unknown or the fields do not decode.
    """
    buf = bytes(payload)
    code = peek_code(buf)
    cls = CONTROLS.get(code) if code is not None else None
    if cls is None:
        raise DecodeError(f"unknown control code {code!r}")
    try:
        control, off = cls.decode_fields(buf, 2)
    except DECODE_ERRORS as exc:
        raise DecodeError(f"malformed {cls.NAME}: {exc}") from exc
    if off != len(buf):
        raise DecodeError(f"{cls.NAME}: {len(buf) - off} octets after the fields")
    return control


def decode_command(payload: Buffer) -> tuple[Command, bool]:
    """Decode a command segment; return the command and its session header's ``sync`` bit.

    Raises:
        DecodeError: the code is unknown or the header or fields do not decode.
    """
    buf = bytes(payload)
    code = peek_code(buf)
    cls = COMMANDS.get(code) if code is not None else None
    if cls is None:
        raise DecodeError(f"unknown command code {code!r}")
    command, sync, off = decode_command_at(cls, buf)
    if off != len(buf):
        raise DecodeError(f"{cls.NAME}: {len(buf) - off} octets after the fields")
    return command, sync


def encode_header(entries: Iterable[Struct]) -> bytes:
    """A header segment: each struct as a struct32 (message.transfer's properties, say)."""
    out = bytearray()
    try:
        for entry in entries:
            enc_struct32(out, entry)
    except ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode header: {exc}") from exc
    return bytes(out)


def decode_header(payload: Buffer) -> list[Struct]:
    """Decode a header segment into its structs (unknown codes as OpaqueStruct)."""
    buf = bytes(payload)
    result: list[Struct] = []
    off = 0
    try:
        while off < len(buf):
            entry, off = dec_struct32(buf, off)
            result.append(entry)
    except DECODE_ERRORS as exc:
        raise DecodeError(f"malformed header segment: {exc}") from exc
    return result
