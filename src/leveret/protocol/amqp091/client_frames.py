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
# A frame header with the class-id and method-id a method frame's payload starts with.
_FRAME_METHOD_ID = struct.Struct(">BHII")
_DELIVER_ID = (60 << 16) | 60  # basic.deliver
_END = framing.FRAME_END
_TYPES = frozenset(
    (framing.FRAME_METHOD, framing.FRAME_HEADER, framing.FRAME_BODY, framing.FRAME_HEARTBEAT)
)


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


class _Incomplete(Exception):
    """A delivery has begun but its last frame is not in the buffer yet."""


class _Irregular(Exception):
    """Not laid out as the column path expects: the frame callback takes it frame by frame."""


_ANY_CHANNEL = range(0x10000)
_NO_CHANNEL: frozenset[int] = frozenset()
_NO_COLUMNS = Deliveries()  # never appended to: with _NO_CHANNEL no delivery takes that path


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
    if out is None:
        out = _NO_COLUMNS
        channels = _NO_CHANNEL
    elif channels is None:
        channels = _ANY_CHANNEL
    n = len(buf)
    unpack = _FRAME.unpack_from
    unpack_with_method = _FRAME_METHOD_ID.unpack_from
    unpack_header = _END_HEADER.unpack_from
    unpack_body = _END_BODY.unpack_from
    unpack_deliver = _QBB.unpack_from
    frame_end = _END
    chans = out.channels
    tags = out.tags
    redelivered = out.redelivered
    exchanges = out.exchanges
    routing_keys = out.routing_keys
    properties = out.properties
    bodies = out.bodies
    while n - off >= 8:
        if n - off >= 11:
            # The method id comes with the frame header (one struct call, no startswith).
            ftype, channel, size, method_id = unpack_with_method(buf, off)
        else:
            ftype, channel, size = unpack(buf, off)
            method_id = 0
        start = off + 7
        end = start + size
        if end >= n:
            if size > limit:
                raise _too_large(size, limit)
            break
        # A payload under 4 bytes cannot match: its frame-end octet would be part of the id,
        # and a wrong frame-end octet sends it to the frame callback's error.
        if method_id == _DELIVER_ID and ftype == 1 and channel in channels:
            # The column path: every way out but the last line raises, to the slow path
            # (_Irregular) or to wait for more bytes (_Incomplete).
            try:
                if n - end < 20:
                    raise _Incomplete
                fend, htype, hch, hsize, _cls, _weight, body_size = unpack_header(buf, end)
                # (a | b) > limit is true whenever a or b is over it (and sometimes when
                # neither is: the frame callback then checks them one by one).
                if fend != frame_end or htype != 2 or hch != channel or (size | hsize) > limit:
                    raise _Irregular
                hstart = end + 8
                hend = hstart + hsize
                if hend >= n:
                    raise _Incomplete
                if body_size == 0:
                    if buf[hend] != frame_end or hsize < 14:
                        raise _Irregular
                    body = b""
                    p = hend + 1
                else:
                    if n - hend < 8:
                        raise _Incomplete
                    bfend, btype, bch, bsize = unpack_body(buf, hend)
                    if bfend != frame_end or btype != 3 or bch != channel or hsize < 14:
                        raise _Irregular
                    bstart = hend + 8
                    p = bstart + bsize
                    if p >= n:
                        raise _Incomplete
                    if bsize == body_size:
                        if buf[p] != frame_end or bsize > limit:
                            raise _Irregular
                        body = buf[bstart:p]
                        p += 1
                    else:
                        body, p = _more_body(buf, hend, channel, limit, body_size)
                # The deliver arguments: consumer-tag, delivery-tag, redelivered, exchange,
                # key; past the end of the frame (or of the buffer) means malformed.
                o = start + 5 + buf[start + 4]
                tag, bits, elen = unpack_deliver(buf, o)
                o += 10
                kend = o + elen
                rend = kend + 1 + buf[kend]
                if rend > end:
                    raise _Irregular
                chans.append(channel)
                tags.append(tag)
                redelivered.append(bits & 1)
                exchanges.append(buf[o:kend])
                routing_keys.append(buf[kend + 1 : rend])
                properties.append(buf[hstart + 12 : hend])
                bodies.append(body)
                off = p
                continue
            except _Incomplete:
                break
            except (_Irregular, struct.error, IndexError):
                pass
        if buf[end] != frame_end:
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


def _more_body(buf: bytes, p: int, channel: int, limit: int, body_size: int) -> tuple[bytes, int]:
    """A body split over body frames from ``p`` on, and the offset after the last one.

    Raises _Incomplete when not all of it is in ``buf`` yet, _Irregular when the frames are
    not consecutive, well-formed body frames of ``channel`` adding up to ``body_size``.
    """
    n = len(buf)
    pieces = []
    got = 0
    while got < body_size:
        if n - p < 8:
            raise _Incomplete
        btype, bch, bsize = _FRAME.unpack_from(buf, p + 1)
        if buf[p] != _END or btype != 3 or bch != channel or bsize > limit:
            raise _Irregular
        bstart = p + 8
        bend = bstart + bsize
        if bend >= n:
            raise _Incomplete
        got += bsize
        if got > body_size:
            raise _Irregular
        pieces.append(buf[bstart:bend])
        p = bend
    if buf[p] != _END:
        raise _Irregular
    return b"".join(pieces), p + 1
