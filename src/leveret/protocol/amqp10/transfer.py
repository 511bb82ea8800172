"""The per-message path of AMQP 1.0: decoding a ``transfer`` and encoding outgoing ones.

Every message crosses a ``transfer`` frame, so both directions are hand-tuned rather than
going through the generated ``Transfer`` class (which stays the reference: the slow path of
:func:`decode_transfer` is ``Transfer.decode_body``, and the tests check the two agree).

- :func:`decode_transfer` reads the first six fields inline for the encodings clients use
  (list8/list32; uint as uint0/smalluint/uint; binary tag; boolean constants) and falls back
  to the generated decoder for anything else (a delivery state, a 64-bit tag, …).
- :class:`TransferEncoder` holds what is fixed for one link (frame channel, encoded handle)
  and builds each transfer frame with one struct call, splitting a payload larger than the
  peer's max-frame-size into ``more`` frames; the payload itself is never copied (the frame is
  returned as pieces for ``transport.writelines``), as ``server/amqp091_channel.py``
  pre-encodes ``basic.deliver``.

Only ``leveret.protocol.amqp10`` imports this module.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from leveret.protocol.amqp10._generated import encodings as fc
from leveret.protocol.amqp10._generated.composites import Transfer
from leveret.protocol.amqp10.errors import DecodeError
from leveret.protocol.amqp10.types import DECODE_ERRORS, decode_error, write_uint

if TYPE_CHECKING:
    from leveret.protocol.amqp10.types import Value

__all__ = ["TRANSFER_PREFIX", "TransferEncoder", "TransferFields", "decode_transfer"]

TRANSFER_PREFIX = b"\x00\x53\x14"
"""How a transfer frame body starts (described, smallulong 0x14): the dispatch test."""

TransferFields = tuple[
    int, "int | None", "bytes | None", int, "bool | None", bool, "int | None", "Value", bool, int
]
"""(handle, delivery_id, delivery_tag, message_format, settled, more, rcv_settle_mode, state,
aborted, offset of the payload in the body)."""

_u32 = struct.Struct(">I").unpack_from
_u32x2 = struct.Struct(">II").unpack_from

_SMALLUINT = fc.SMALLUINT
_UINT0 = fc.UINT0
_UINT = fc.UINT
_NULL = fc.NULL
_TRUE = fc.TRUE
_FALSE = fc.FALSE
_VBIN8 = fc.VBIN8
_LIST8 = fc.LIST8


def _slow(body: bytes) -> TransferFields:
    t, end = Transfer.decode_body(body, 3, 0)
    return (
        t.handle,
        t.delivery_id,
        t.delivery_tag,
        0 if t.message_format is None else t.message_format,
        t.settled,
        t.more,
        t.rcv_settle_mode,
        t.state,
        t.aborted,
        end,
    )


def decode_transfer(body: bytes) -> TransferFields:
    """Decode the transfer performative at the start of ``body`` (which starts with
    :data:`TRANSFER_PREFIX`); the payload is ``body[fields[-1]:]``."""
    try:
        code = body[3]
        if code == fc.LIST8:
            count = body[5]
            off = 6
            end = 5 + body[4]
        elif code == fc.LIST32:
            size, count = _u32x2(body, 4)
            off = 12
            end = 8 + size
        else:
            return _slow(body)
        if count > 6 or count < 2 or end > len(body):
            return _slow(body)
        # handle
        c = body[off]
        if c == _SMALLUINT:
            handle = body[off + 1]
            off += 2
        elif c == _UINT0:
            handle = 0
            off += 1
        elif c == _UINT:
            handle = _u32(body, off + 1)[0]
            off += 5
        else:
            return _slow(body)
        # delivery-id
        c = body[off]
        delivery_id: int | None
        if c == _UINT:
            delivery_id = _u32(body, off + 1)[0]
            off += 5
        elif c == _SMALLUINT:
            delivery_id = body[off + 1]
            off += 2
        elif c == _UINT0:
            delivery_id = 0
            off += 1
        elif c == _NULL:
            delivery_id = None
            off += 1
        else:
            return _slow(body)
        tag: bytes | None = None
        fmt = 0
        settled: bool | None = None
        more = False
        if count > 2:
            c = body[off]
            if c == _VBIN8:
                start = off + 2
                off = start + body[off + 1]
                tag = body[start:off]
            elif c == _NULL:
                off += 1
            else:
                return _slow(body)
            if count > 3:
                c = body[off]
                if c in (_UINT0, _NULL):
                    off += 1
                elif c == _SMALLUINT:
                    fmt = body[off + 1]
                    off += 2
                else:
                    return _slow(body)
                if count > 4:
                    c = body[off]
                    if c == _TRUE:
                        settled = True
                    elif c == _FALSE:
                        settled = False
                    elif c != _NULL:
                        return _slow(body)
                    off += 1
                    if count > 5:
                        c = body[off]
                        if c == _TRUE:
                            more = True
                        elif c != _FALSE and c != _NULL:
                            return _slow(body)
                        off += 1
        if off != end:
            raise DecodeError("transfer: list size does not match its fields")
        return handle, delivery_id, tag, fmt, settled, more, None, None, False, end
    except DecodeError:
        raise
    except DECODE_ERRORS as exc:
        raise decode_error("transfer", exc) from exc


# A transfer frame up to its delivery-id: frame header (size, doff 2, type 0, channel) and the
# performative's descriptor, list8 code, list size and count.
_HEAD = struct.Struct(">IBBHBBBBBB")
# delivery-id as a uint, then the vbin8 code and length of the tag.
_ID_TAG = struct.Struct(">BIBB")
_CONT_TAIL = b"\x40\x40\x40\x40\x41"  # continuation: no id/tag/format/settled, more=true
_LAST_FORMAT = {True: b"\x43\x41", False: b"\x43\x42"}  # message-format 0, settled


class TransferEncoder:
    """Encodes the transfers of one sending link: ``channel`` and ``handle`` are fixed, the
    largest frame is the peer's ``max_frame_size``."""

    __slots__ = ("_cont_last", "_cont_more", "_handle", "_structs", "channel", "max_frame_size")

    def __init__(self, channel: int, handle: int, max_frame_size: int) -> None:
        self.channel = channel
        self.max_frame_size = max_frame_size
        self._handle = write_uint(handle)
        # One struct per delivery-tag length packs a whole single-frame transfer head:
        # frame header, descriptor, list8 header, handle, delivery-id, tag, format, settled.
        self._structs: dict[int, struct.Struct] = {}
        # Continuation frames' performatives (with and without more=true), fixed per link.
        h = self._handle
        more = h + _CONT_TAIL
        self._cont_more = TRANSFER_PREFIX + bytes((fc.LIST8, len(more) + 1, 6)) + more
        self._cont_last = TRANSFER_PREFIX + bytes((fc.LIST8, len(h) + 1, 1)) + h

    def encode(
        self,
        delivery_id: int,
        delivery_tag: bytes,
        payload: bytes | memoryview,
        settled: bool,
        message_format: int = 0,
    ) -> list[bytes | memoryview]:
        """The frames of one delivery, as pieces to write in order (``payload`` not copied)."""
        tag_size = len(delivery_tag)
        if tag_size > 32:
            raise ValueError("a delivery-tag is at most 32 bytes")
        tail = (
            _LAST_FORMAT[settled]
            if message_format == 0
            else (write_uint(message_format) + (b"\x41" if settled else b"\x42"))
        )
        fields_size = len(self._handle) + 7 + tag_size + len(tail)
        # Single frame: 8 header + 3 descriptor + 3 list8 header + fields + payload.
        size = 14 + fields_size + len(payload)
        if size > self.max_frame_size:
            return self._split(delivery_id, delivery_tag, payload, tail, fields_size)
        if message_format == 0:
            st = self._structs.get(tag_size)
            if st is None:
                st = self._structs[tag_size] = struct.Struct(
                    f">IBBHBBBBBB{len(self._handle)}sBIBB{tag_size}s2s"
                )
            head = st.pack(
                size, 2, 0, self.channel, 0, 0x53, 0x14, _LIST8, fields_size + 1, 5,
                self._handle, _UINT, delivery_id, _VBIN8, tag_size, delivery_tag, tail,
            )  # fmt: skip
            return [head, payload]
        head = _HEAD.pack(size, 2, 0, self.channel, 0, 0x53, 0x14, _LIST8, fields_size + 1, 5)
        return [
            head + self._handle + _ID_TAG.pack(_UINT, delivery_id, _VBIN8, tag_size)
            + delivery_tag + tail,
            payload,
        ]  # fmt: skip

    def _split(
        self,
        delivery_id: int,
        delivery_tag: bytes,
        payload: bytes | memoryview,
        tail: bytes,
        fields_size: int,
    ) -> list[bytes | memoryview]:
        view = memoryview(payload)
        n = len(view)
        # First frame: its fields plus more=true.
        first_room = self.max_frame_size - 14 - fields_size - 1
        more_room = self.max_frame_size - 8 - len(self._cont_more)
        last_room = self.max_frame_size - 8 - len(self._cont_last)
        if first_room <= 0 or more_room <= 0:
            raise ValueError(f"max-frame-size {self.max_frame_size} leaves no room for payload")
        pieces: list[bytes | memoryview] = [
            _HEAD.pack(
                14 + fields_size + 1 + first_room, 2, 0, self.channel,
                0, 0x53, 0x14, fc.LIST8, fields_size + 2, 6,
            )
            + self._handle
            + _ID_TAG.pack(_UINT, delivery_id, _VBIN8, len(delivery_tag))
            + delivery_tag
            + tail
            + b"\x41",
            view[:first_room],
        ]  # fmt: skip
        off = first_room
        header = struct.Struct(">IBBH").pack
        while n - off > last_room:
            chunk = view[off : off + more_room]
            pieces.append(header(8 + len(self._cont_more) + len(chunk), 2, 0, self.channel))
            pieces.append(self._cont_more)
            pieces.append(chunk)
            off += len(chunk)
        chunk = view[off:]
        pieces.append(header(8 + len(self._cont_last) + len(chunk), 2, 0, self.channel))
        pieces.append(self._cont_last)
        pieces.append(chunk)
        return pieces
