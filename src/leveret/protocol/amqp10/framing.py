"""AMQP 1.0 framing (spec part 2.3): protocol headers, the sans-IO frame decoder, encoders.

A frame is ``size uint32, doff uint8, type uint8, channel uint16``, an extended header of
``doff * 4 - 8`` bytes (skipped: the spec defines none), then the body; a frame of exactly 8
bytes has no body (an empty frame: a heartbeat). Type 0 is an AMQP frame, 1 a SASL frame.
Each connection (and the SASL layer before it) starts with an 8-byte protocol header
``"AMQP" id major minor revision``.

:class:`FrameDecoder` parses every complete frame of its buffer in one pass, as
``amqp091/framing.py`` does; bad frames raise :class:`~leveret.protocol.amqp10.errors.AMQP10Error`
with ``amqp:connection:framing-error``. Only ``leveret.protocol.amqp10`` imports it.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from leveret.protocol.amqp10._generated.definitions import MIN_MAX_FRAME_SIZE
from leveret.protocol.amqp10.errors import AMQP10Error, Scope

__all__ = [
    "AMQP_HEADER",
    "EMPTY_FRAME",
    "FRAME_AMQP",
    "FRAME_HEADER_SIZE",
    "FRAME_SASL",
    "FRAMING_ERROR",
    "SASL_HEADER",
    "TLS_HEADER",
    "Frame",
    "FrameDecoder",
    "ProtocolHeader",
    "encode_frame",
]

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"
FRAME_AMQP: Final = 0
FRAME_SASL: Final = 1
FRAME_HEADER_SIZE: Final = 8
FRAMING_ERROR = "amqp:connection:framing-error"

_HEADER = struct.Struct(">IBBH")  # size, doff, type, channel
_pack_header = _HEADER.pack
_unpack_header: Final = _HEADER.unpack_from
_MAX_SIZE = 0xFFFFFFFF

EMPTY_FRAME = _pack_header(FRAME_HEADER_SIZE, 2, FRAME_AMQP, 0)
"""An AMQP frame with no body: what a peer sends to keep an idle connection alive."""


class Frame(NamedTuple):
    """One decoded frame; ``body`` is ``b""`` for an empty frame."""

    frame_type: int
    channel: int
    body: bytes


class ProtocolHeader(NamedTuple):
    """The 8 bytes ``"AMQP" id major minor revision`` starting a (SASL) connection."""

    raw: bytes

    @property
    def protocol_id(self) -> int:
        return self.raw[4]


_new_tuple: Final = tuple.__new__  # NamedTuple construction without its Python-level __new__


def _framing_error(description: str) -> AMQP10Error:
    return AMQP10Error(FRAMING_ERROR, description, Scope.CONNECTION)


class FrameDecoder:
    """Incremental, sans-IO frame parser.

    ``max_frame_size`` is the largest frame (header included) we accept: the value we sent in
    ``open``. ``expect_header`` makes the next 8 bytes a :class:`ProtocolHeader` (at the start,
    and after a successful SASL exchange); it clears itself once the header is returned.

    A SASL frame ends a pass: the bytes after it stay buffered until the next :meth:`feed`
    (``feed(b"")`` resumes), because what follows a SASL frame — another SASL frame or the
    AMQP header — depends on how the connection machine answers it.

    After an error the decoder is poisoned: every later :meth:`feed` raises the same error;
    frames completed before the bad one in the failing call are kept in :attr:`salvaged`.
    """

    __slots__ = ("_buf", "_error", "_need", "expect_header", "max_frame_size", "salvaged")

    def __init__(self, max_frame_size: int = _MAX_SIZE, *, expect_header: bool = True) -> None:
        if max_frame_size < MIN_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size {max_frame_size} is below {MIN_MAX_FRAME_SIZE}")
        self.max_frame_size = max_frame_size
        self.expect_header = expect_header
        self._buf = bytearray()
        self._need = 0  # size of the incomplete frame at the head of the buffer, if known
        self._error: AMQP10Error | None = None
        self.salvaged: list[Frame | ProtocolHeader] = []

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame | ProtocolHeader]:
        """Add ``data``; return every header and frame now complete, in order."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        src: bytes
        if buf:
            buf += data
            if len(buf) < self._need:
                return []  # still inside the frame we are waiting for: no copy, no parse
            src = bytes(buf)
        elif type(data) is bytes:
            src = data  # the common case: parse the bytes from data_received directly
        else:
            src = bytes(data)
        n = len(src)
        self._need = 0
        out: list[Frame | ProtocolHeader] = []
        append = out.append
        off = 0
        limit = self.max_frame_size
        while n - off >= FRAME_HEADER_SIZE:
            if self.expect_header:
                raw = src[off : off + 8]
                if raw[:4] != b"AMQP":
                    self._fail(_framing_error(f"expected a protocol header, got {raw!r}"), out)
                self.expect_header = False
                append(ProtocolHeader(raw))
                off += 8
                continue
            size, doff, ftype, channel = _unpack_header(src, off)
            if size > limit:
                self._fail(
                    _framing_error(f"frame of {size} bytes exceeds max-frame-size {limit}"), out
                )
            if size < FRAME_HEADER_SIZE or doff < 2 or doff * 4 > size:
                self._fail(_framing_error(f"malformed frame header: size {size}, doff {doff}"), out)
            end = off + size
            if end > n:
                self._need = size
                break
            if ftype == FRAME_AMQP:
                append(_new_tuple(Frame, (ftype, channel, src[off + doff * 4 : end])))
                off = end
                continue
            if ftype != FRAME_SASL:
                self._fail(_framing_error(f"unknown frame type {ftype}"), out)
            append(_new_tuple(Frame, (ftype, channel, src[off + doff * 4 : end])))
            off = end
            break
        if buf:
            del buf[:off]
        elif off < n:
            buf += memoryview(src)[off:]
        return out

    def _fail(self, error: AMQP10Error, frames: list[Frame | ProtocolHeader]) -> None:
        self._error = error
        self.salvaged = frames
        self._buf = bytearray()
        raise error


def encode_frame(channel: int, body: bytes, frame_type: int = FRAME_AMQP) -> bytes:
    """One frame: the 8-byte header (doff 2, no extended header) and ``body``."""
    return _pack_header(FRAME_HEADER_SIZE + len(body), 2, frame_type, channel) + body
