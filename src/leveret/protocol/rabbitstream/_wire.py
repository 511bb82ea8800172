"""Primitive readers and writers of the stream protocol's types (private to the codec).

``string``: int16 length (-1 = null) + UTF-8; ``bytes``: int32 length (-1 = null);
arrays: int32 count, then the items. Integers big-endian.
"""

from __future__ import annotations

import struct

from leveret.protocol.rabbitstream.errors import UnknownFrame

U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
I16 = struct.Struct(">h")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")


class Reader:
    """A cursor over one frame's body; every read past the end is ``UnknownFrame``."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _take(self, fmt: struct.Struct) -> int:
        try:
            value: int = fmt.unpack_from(self.data, self.pos)[0]
        except struct.error as exc:
            raise UnknownFrame("frame body cut short") from exc
        self.pos += fmt.size
        return value

    def u8(self) -> int:
        return self._take(U8)

    def u16(self) -> int:
        return self._take(U16)

    def u32(self) -> int:
        return self._take(U32)

    def i32(self) -> int:
        return self._take(I32)

    def u64(self) -> int:
        return self._take(U64)

    def i64(self) -> int:
        return self._take(I64)

    def raw(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise UnknownFrame("frame body cut short")
        out = bytes(self.data[self.pos : end])
        self.pos = end
        return out

    def string(self) -> str | None:
        size = self._take(I16)
        if size < 0:
            return None
        try:
            return self.raw(size).decode()
        except UnicodeDecodeError as exc:
            raise UnknownFrame("string is not UTF-8") from exc

    def str_(self) -> str:
        """A string where null is read as ""."""
        return self.string() or ""

    def bytes_(self) -> bytes | None:
        size = self._take(I32)
        return None if size < 0 else self.raw(size)

    def count(self, item_size: int = 1) -> int:
        """An array's length, checked against what is left (a lying count is refused at
        once instead of looping)."""
        n = self._take(I32)
        if n < 0 or n * item_size > len(self.data) - self.pos:
            raise UnknownFrame(f"array of {n} items does not fit the frame")
        return n

    def strings(self) -> list[str]:
        return [self.str_() for _ in range(self.count(2))]

    def properties(self) -> dict[str, str]:
        return {self.str_(): self.str_() for _ in range(self.count(4))}

    def rest(self) -> bytes:
        out = bytes(self.data[self.pos :])
        self.pos = len(self.data)
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            raise UnknownFrame(f"{len(self.data) - self.pos} bytes left over in the frame")


def string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    raw = value.encode()
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes is too long for the stream protocol")
    return U16.pack(len(raw)) + raw


def bytes_(value: bytes | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    return U32.pack(len(value)) + value


def strings(values: list[str]) -> bytes:
    return I32.pack(len(values)) + b"".join(string(v) for v in values)


def properties(values: dict[str, str]) -> bytes:
    return I32.pack(len(values)) + b"".join(string(k) + string(v) for k, v in values.items())
