"""The client role's frame reader: one pass over a received buffer, deliveries into columns.

:func:`walk_frames` checks and cuts every complete frame of a buffer; each ``basic.deliver``
whose content header and body frames follow it on the same channel (the way brokers write
them: ``framing.encode_message_frames``) is appended straight into the columns of a
:class:`Deliveries`, with no per-message object; every other frame goes to a callback. The
client machine (``client.py``) is its user; anything that reads server output in bulk may be.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from leveret.errors import FrameError
from leveret.protocol.amqp091 import framing

if TYPE_CHECKING:
    from collections.abc import Callable, Container

__all__ = ["NO_LIMIT", "Deliveries", "walk_frames"]

NO_LIMIT = 0xFFFFFFFF
"""A payload-size limit that accepts every frame (no frame_max negotiated)."""

_FRAME = struct.Struct(">BHI")
# Frame-end octet + the next frame's header (+ content-header prefix), as brokers write them.
_END_HEADER = struct.Struct(">BBHIHHQ")
_END_BODY = struct.Struct(">BBHI")
_QBB = struct.Struct(">QBB")
_DELIVER = b"\x00\x3c\x00\x3c"  # class 60 (basic), method 60 (deliver)
_END = framing.FRAME_END
_TYPES = frozenset(
    (framing.FRAME_METHOD, framing.FRAME_HEADER, framing.FRAME_BODY, framing.FRAME_HEARTBEAT)
)
_INCOMPLETE = -1  # a delivery has begun but its last frame is not in the buffer yet
_IRREGULAR = -2  # not laid out as the column path expects: hand it to the frame callback


class Deliveries:
    """``basic.deliver`` messages in columns (one list per field), as :func:`walk_frames`
    appends them. ``redelivered`` holds 0/1; ``properties`` the raw property flags + list."""

    __slots__ = (
        "bodies",
        "channels",
        "exchanges",
        "properties",
        "redelivered",
        "routing_keys",
        "tags",
    )

    def __init__(self) -> None:
        self.channels: list[int] = []
        self.tags: list[int] = []
        self.redelivered: list[int] = []
        self.exchanges: list[bytes] = []
        self.routing_keys: list[bytes] = []
        self.properties: list[bytes] = []
        self.bodies: list[bytes] = []

    def __len__(self) -> int:
        return len(self.tags)

    def clear(self) -> None:
        for name in self.__slots__:
            getattr(self, name).clear()

    def take(self, n: int | None = None) -> Deliveries:
        """Remove the first ``n`` deliveries (all when None) into a new object."""
        out = Deliveries()
        if n is None or n >= len(self.tags):
            for name in self.__slots__:
                setattr(out, name, getattr(self, name))
                setattr(self, name, [])
            return out
        for name in self.__slots__:
            column = getattr(self, name)
            setattr(out, name, column[:n])
            del column[:n]
        return out


def _too_large(size: int, limit: int) -> FrameError:
    return FrameError(
        f"frame too large: {size + framing.FRAME_OVERHEAD} bytes exceeds frame_max"
        f" {limit + framing.FRAME_OVERHEAD}"
    )


def walk_frames(
    buf: bytes,
    off: int,
    out: Deliveries | None,
    channels: Container[int] | None,
    limit: int,
    handle: Callable[[int, int, bytes], bool],
) -> int:
    """Consume the complete frames of ``buf`` from ``off``; return the offset reached.

    A ``basic.deliver`` on a channel in ``channels`` (any channel when None) goes to ``out``
    (unless ``out`` is None) once its content header and every body frame are in ``buf``: a
    delivery is never split across calls, the caller keeps the rest and calls again with more.
    Every other frame, and a delivery laid out otherwise (frames of other channels in between,
    a malformed part), is passed to ``handle(frame_type, channel, payload)`` in order; the
    walk stops right after a frame for which ``handle`` returns True.

    ``limit`` is the largest payload accepted (``frame_max - 8``; :data:`NO_LIMIT`). A bad
    frame-end octet, an unknown frame type or a frame over the limit raises
    :class:`~leveret.errors.FrameError` (501); an oversized frame as soon as its header is in.
    """
    n = len(buf)
    unpack = _FRAME.unpack_from
    unpack_header = _END_HEADER.unpack_from
    unpack_body = _END_BODY.unpack_from
    unpack_deliver = _QBB.unpack_from
    startswith = buf.startswith
    fast = out is not None
    if out is not None:
        chans = out.channels
        tags = out.tags
        redelivered = out.redelivered
        exchanges = out.exchanges
        routing_keys = out.routing_keys
        properties = out.properties
        bodies = out.bodies
    while n - off >= 8:
        ftype, channel, size = unpack(buf, off)
        start = off + 7
        end = start + size
        if end >= n:
            if size > limit:
                raise _too_large(size, limit)
            break
        if (
            fast
            and ftype == 1
            and startswith(_DELIVER, start)
            and (channels is None or channel in channels)
        ):
            # One pass through this block; `break` leaves it with p telling what was found.
            p = _IRREGULAR
            while True:
                if buf[end] != _END or size > limit:
                    break
                if n - end < 20:
                    p = _INCOMPLETE
                    break
                _e, htype, hch, hsize, _cls, _weight, body_size = unpack_header(buf, end)
                if htype != 2 or hch != channel or hsize < 14 or hsize > limit:
                    break
                hstart = end + 8
                hend = hstart + hsize
                if hend >= n:
                    p = _INCOMPLETE
                    break
                if body_size == 0:
                    if buf[hend] != _END:
                        break
                    body = b""
                    p = hend + 1
                else:
                    if n - hend < 8:
                        p = _INCOMPLETE
                        break
                    bend_octet, btype, bch, bsize = unpack_body(buf, hend)
                    if (
                        bend_octet != _END
                        or btype != 3
                        or bch != channel
                        or bsize > limit
                        or bsize > body_size
                    ):
                        break
                    bstart = hend + 8
                    bend = bstart + bsize
                    if bend >= n:
                        p = _INCOMPLETE
                        break
                    if buf[bend] != _END:
                        break
                    if bsize == body_size:
                        body = buf[bstart:bend]
                        p = bend + 1
                    else:
                        first = buf[bstart:bend]
                        body, p = _more_body(buf, bend + 1, channel, limit, first, body_size)
                        if p < 0:
                            break
                # The deliver arguments: consumer-tag, delivery-tag, redelivered, exchange, key.
                o = start + 5 + buf[start + 4]
                if o + 11 > end:
                    p = _IRREGULAR
                    break
                tag, bits, elen = unpack_deliver(buf, o)
                o += 10
                kend = o + elen
                if kend >= end or kend + 1 + buf[kend] > end:
                    p = _IRREGULAR
                    break
                chans.append(channel)
                tags.append(tag)
                redelivered.append(bits & 1)
                exchanges.append(buf[o:kend])
                routing_keys.append(buf[kend + 1 : kend + 1 + buf[kend]])
                properties.append(buf[hstart + 12 : hend])
                bodies.append(body)
                break
            if p >= 0:
                off = p
                continue
            if p == _INCOMPLETE:
                break
        if buf[end] != _END:
            raise FrameError(
                f"frame_end: expected 0xCE after a {size}-byte payload of a type {ftype} frame"
                f" on channel {channel}, got 0x{buf[end]:02x}"
            )
        if size > limit:
            raise _too_large(size, limit)
        if ftype not in _TYPES:
            raise FrameError(f"unknown frame type {ftype} on channel {channel}")
        off = end + 1
        if handle(ftype, channel, buf[start:end]):
            break
    return off


def _more_body(
    buf: bytes, p: int, channel: int, limit: int, first: bytes, body_size: int
) -> tuple[bytes, int]:
    """The rest of a body split over several frames, and the offset after its last frame.

    The offset is ``_INCOMPLETE`` when not all of it is in ``buf`` and ``_IRREGULAR`` when the
    frames are not consecutive body frames of ``channel`` adding up to ``body_size``.
    """
    n = len(buf)
    pieces = [first]
    got = len(first)
    while got < body_size:
        if n - p < 8:
            return b"", _INCOMPLETE
        btype, bch, bsize = _FRAME.unpack_from(buf, p)
        bstart = p + 7
        bend = bstart + bsize
        if btype != 3 or bch != channel or bsize > limit or got + bsize > body_size:
            return b"", _IRREGULAR
        if bend >= n:
            return b"", _INCOMPLETE
        if buf[bend] != _END:
            return b"", _IRREGULAR
        pieces.append(buf[bstart:bend])
        got += bsize
        p = bend + 1
    return b"".join(pieces), p
