"""A consumer's frames read into one reused buffer, each body passed over but for its stamp.

The load generator reads only the first 16 bytes of a body (the stamp: send time, sequence
number, publisher id); the rest is padding. Through the client machine a 64 KiB delivery costs
the consumer several copies of its body: uvloop's ``bytes`` of each read, the machine's join
of a delivery that spans reads (and of its kept tail), and its slice of the body. A
:class:`StampReader` is handed the socket's reads in place (``asyncio.BufferedProtocol``:
:meth:`StampReader.get_buffer`, then :meth:`StampReader.updated`) and walks the frames as
they come, a body frame's payload as soon as part of it is in: it keeps the stamp and steps
over the rest, so no body is ever copied or held, and the buffer is reused from its start
whenever the walk has caught up with the reads (only a frame header or a small frame cut by
the read's end is moved there).

Only ``basic.deliver`` content on the reader's channel takes this path, as long as it comes
the way the spec orders it (deliver, content header, body frames adding up to the header's
size); every other frame is handed whole to ``on_frame`` (the client machine, which keeps
the connection's state and raises the spec's errors). The checks the machine makes on a
delivery are made here too: the frame-end octet, the negotiated frame size, the content
header's class, and body frames adding up to exactly the announced size; a breach raises the
:class:`~leveret.errors.AMQPError` of its reply code.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from bench.stats import STAMP_SIZE
from leveret.errors import FrameError, UnexpectedFrame
from leveret.protocol.amqp091 import framing

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["StampReader"]

_FRAME = struct.Struct(">BHI")
_HEADER = struct.Struct(">HHQ")  # content header payload: class-id, weight, body size
_DELIVER = b"\x00\x3c\x00\x3c"  # basic.deliver (60, 60)
_TAG_BITS = struct.Struct(">QB")
_END = framing.FRAME_END
_BASIC = 60
_FREE = 1 << 16  # move the unread tail to the buffer's start when less is free after it

# What the walk waits for.
_FRAME_START = 0  # a frame header (a whole frame unless it is a delivery's body frame)
_PAYLOAD = 1  # the rest of a body frame's payload
_FRAME_END = 2  # the frame-end octet after a body frame's payload


class StampReader:
    """The frames of one connection's reads; see the module docstring.

    ``on_deliver(delivery_tag, redelivered, stamp)`` runs once a delivery's last body byte is
    in (``stamp`` is the body's first 16 bytes, fewer if the body is shorter);
    ``on_frame(frame)`` takes every other frame, whole (header to frame-end octet).
    ``limit`` is the largest frame payload accepted (frame_max - 8).
    """

    __slots__ = (
        "_buf",
        "_channel",
        "_end",
        "_left",
        "_limit",
        "_on_deliver",
        "_on_frame",
        "_received",
        "_redelivered",
        "_size",
        "_stamp",
        "_start",
        "_state",
        "_tag",
        "_view",
    )

    def __init__(
        self,
        channel: int,
        limit: int,
        on_deliver: Callable[[int, int, bytes], None],
        on_frame: Callable[[bytes], None],
        capacity: int = 1 << 18,
    ) -> None:
        # A whole non-body frame must fit behind a moved tail, with room for a read after it.
        capacity = max(capacity, limit + framing.FRAME_OVERHEAD + _FREE)
        self._buf = bytearray(capacity)
        self._view = memoryview(self._buf)
        self._start = 0  # the first byte not walked yet
        self._end = 0  # the end of what was read
        self._channel = channel
        self._limit = limit
        self._on_deliver = on_deliver
        self._on_frame = on_frame
        self._state = _FRAME_START
        self._left = 0  # payload bytes of the current body frame still to come
        # The delivery in progress: tag -1 when none; size -1 until its content header.
        self._tag = -1
        self._redelivered = 0
        self._size = -1
        self._received = 0
        self._stamp = bytearray()

    @property
    def pending(self) -> int:
        """Bytes read and not walked yet (part of a frame)."""
        return self._end - self._start

    def get_buffer(self) -> memoryview:
        """Where the next read goes (``BufferedProtocol.get_buffer``)."""
        start, end = self._start, self._end
        if start == end:
            self._start = self._end = 0
        elif len(self._buf) - end < _FREE:
            self._buf[: end - start] = self._view[start:end]
            self._start, self._end = 0, end - start
        return self._view[self._end :]

    def updated(self, nbytes: int) -> None:
        """``nbytes`` were read into the last :meth:`get_buffer`: walk them."""
        self._end += nbytes
        self._walk()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Walk ``data`` (copied in through :meth:`get_buffer`, as a read would be)."""
        view = memoryview(data)
        while view:
            room = self.get_buffer()
            n = min(len(room), len(view))
            room[:n] = view[:n]
            view = view[n:]
            self.updated(n)

    def _walk(self) -> None:
        buf, p, end = self._buf, self._start, self._end
        channel = self._channel
        try:
            while True:
                state = self._state
                if state == _PAYLOAD:
                    n = min(self._left, end - p)
                    need = STAMP_SIZE - len(self._stamp)
                    if need > 0:
                        self._stamp += self._view[p : p + min(need, n)]
                    p += n
                    self._left -= n
                    self._received += n
                    if self._left:
                        break
                    self._state = state = _FRAME_END
                if state == _FRAME_END:
                    if p >= end:
                        break
                    if buf[p] != _END:
                        raise FrameError(
                            f"frame_end: expected 0xCE after a body frame on channel {channel},"
                            f" got 0x{buf[p]:02x}"
                        )
                    p += 1
                    self._state = _FRAME_START
                    if self._received == self._size:
                        self._delivered()
                    continue
                # _FRAME_START
                if end - p < framing.FRAME_HEADER_SIZE:
                    break
                ftype, ch, size = _FRAME.unpack_from(buf, p)
                if size > self._limit:
                    raise FrameError(
                        f"frame too large: {size + framing.FRAME_OVERHEAD} bytes exceeds"
                        f" frame_max {self._limit + framing.FRAME_OVERHEAD}"
                    )
                ours = ch == channel and self._tag >= 0
                if ours and ftype == framing.FRAME_BODY and self._size >= 0:
                    if self._received + size > self._size:
                        raise FrameError(
                            f"body of {self._received + size}+ bytes on channel {ch}, the"
                            f" content header announced {self._size}"
                        )
                    p += framing.FRAME_HEADER_SIZE
                    self._left = size
                    self._state = _PAYLOAD
                    continue
                frame_end = p + framing.FRAME_HEADER_SIZE + size
                if frame_end >= end:
                    break
                if buf[frame_end] != _END:
                    raise FrameError(
                        f"frame_end: expected 0xCE after a {size}-byte payload of a type"
                        f" {ftype} frame on channel {ch}, got 0x{buf[frame_end]:02x}"
                    )
                payload = p + framing.FRAME_HEADER_SIZE
                if ours:
                    self._content_frame(ftype, payload, size)
                elif (
                    ftype == framing.FRAME_METHOD
                    and ch == channel
                    and buf.startswith(_DELIVER, payload)
                ):
                    self._deliver(payload, frame_end)
                else:
                    self._on_frame(bytes(self._view[p : frame_end + 1]))
                p = frame_end + 1
        finally:
            self._start = p

    def _deliver(self, payload: int, frame_end: int) -> None:
        buf = self._buf
        # consumer-tag (shortstr), delivery-tag, redelivered (bit), exchange, routing-key.
        at = payload + 4
        at += 1 + buf[at]
        if at + _TAG_BITS.size > frame_end:
            raise FrameError(f"basic.deliver on channel {self._channel}: malformed arguments")
        tag, bits = _TAG_BITS.unpack_from(buf, at)
        self._tag = tag
        self._redelivered = bits & 1
        self._size = -1
        self._received = 0
        self._stamp.clear()

    def _content_frame(self, ftype: int, payload: int, size: int) -> None:
        """A whole frame of our channel while a delivery is in progress (not a body frame
        after its header: those are walked as they come)."""
        channel = self._channel
        if ftype == framing.FRAME_HEADER and self._size < 0:
            if size < 14:
                raise FrameError(f"content header of {size} bytes on channel {channel}")
            class_id, _weight, body_size = _HEADER.unpack_from(self._buf, payload)
            if class_id != _BASIC:
                raise UnexpectedFrame(
                    f"content header of class {class_id} after basic.deliver on channel {channel}"
                )
            self._size = body_size
            if body_size == 0:
                self._delivered()
            return
        what = {
            framing.FRAME_METHOD: "method frame",
            framing.FRAME_HEADER: "second content header",
            framing.FRAME_BODY: "body frame before the content header",
        }.get(ftype, f"frame of type {ftype}")
        raise UnexpectedFrame(f"{what} on channel {channel} during a delivery")

    def _delivered(self) -> None:
        tag = self._tag
        self._tag = -1
        self._size = -1
        self._on_deliver(tag, self._redelivered, bytes(self._stamp))
