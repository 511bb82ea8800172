"""AMQP 0-9-1 frames: the sans-IO frame decoder and the frame encoders.

A frame (spec 4.2.3) is ``type octet, channel short, size long, payload[size], 0xCE``.
:class:`FrameDecoder` parses every complete frame in its buffer in one pass (DESIGN.md,
"The hot path"); the ``encode_*`` functions build frames with precompiled structs and as few
copies as possible (:func:`encode_message_frames` builds a whole delivery in one allocation).

Malformed frames raise :class:`leveret.errors.FrameError` (501).
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

from leveret.errors import FrameError

__all__ = [
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_END_BYTES",
    "FRAME_HEADER",
    "FRAME_HEADER_SIZE",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "FRAME_OVERHEAD",
    "FRAME_TYPES",
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER",
    "VIEW_FRAME",
    "Frame",
    "FrameDecoder",
    "encode_content_frames",
    "encode_frame",
    "encode_message_frames",
    "encode_method_frame",
    "parse_content_header",
    "read_u64",
]

# Final: the compiled build inlines them where the connection tests a frame's type (a
# plain module global is a module attribute lookup there, per frame).
FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 206
FRAME_HEADER_SIZE: Final = 7
FRAME_OVERHEAD: Final = 8  # 7-byte header + frame-end octet

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))
"""The frame types 0-9-1 defines (0-8 and 0-9 define more: their own framing modules)."""
# The frame-end octet as bytes, for joins (the front end's pre-encoded deliveries too).
FRAME_END_BYTES = b"\xce"
_MAX_SIZE: Final = 0xFFFFFFFF
# A held frame's pieces from this size on are kept as views of their reads; smaller ones
# are copied together (``FrameDecoder._keep``).
_SMALL_PIECE: Final = 4096
# A frame payload this large is worth parsing from a view of the adapter's read buffer
# (``FrameDecoder.feed_view``): its copy out of the buffer is the only one it pays, where a
# read's ``bytes`` cost it one more. Smaller frames are cheaper to parse from ``bytes``.
VIEW_FRAME: Final = 16384
# Views are given up after this many reads in a row without a large frame (or at once after
# a read of ``VIEW_FRAME`` octets or more without one): a client that writes a message's
# method and header frames apart from its body must not flip the adapter's reads back and
# forth with every message, and one that moved on to small messages reads ``bytes`` again.
_QUIET_READS: Final = 8

_HEADER: Final = struct.Struct(">BHI")  # type, channel, payload size
_CONTENT_HEADER = struct.Struct(">HHQ")  # class-id, weight, body-size
# Frame header + content-header prefix of a header frame (19 bytes).
_HEADER_FRAME_PREFIX = struct.Struct(">BHIHHQ")
# Frame-end of the previous frame + header frame header + content-header prefix (20 bytes).
_END_HEADER_FRAME_PREFIX = struct.Struct(">BBHIHHQ")
# Frame-end of the previous frame + body frame header (8 bytes).
_END_BODY_HEADER = struct.Struct(">BBHI")


Frame: TypeAlias = tuple[int, int, bytes]
"""One decoded frame: its type, channel and payload (without the frame-end octet). A plain
tuple, not a NamedTuple: the decoder makes one per frame (three per published message, one
per ack), and the compiled build makes a plain tuple natively, where a NamedTuple's
``tuple.__new__`` was a generic call that built two tuples (issue 26, scenario b)."""


class FrameDecoder:
    """Incremental, sans-IO frame parser.

    ``frame_max`` is the negotiated maximum frame size; a received payload may be up to
    ``frame_max`` bytes (RabbitMQ's leniency: 8 bytes beyond the spec's whole-frame size);
    0 means no limit (beyond the 32-bit size field).  It may be changed at any time
    (after connection.tune-ok).

    Payloads are returned as independent ``bytes`` objects (slices of the input).  Measured on
    CPython 3.11 for 10-200 byte frames, a ``bytes`` slice is cheaper to make than a
    ``memoryview`` slice of an immutable copy of the buffer (which also costs one whole-buffer
    copy per feed and keeps that buffer alive for as long as any payload is referenced), and
    ``bytes`` payloads can be stored, hashed and joined with no further conversion.

    Errors, checked per frame: frame-end octet not 0xCE, then frame size over ``frame_max``,
    then unknown frame type.  A frame whose header alone shows it is over ``frame_max`` is
    rejected as soon as its header arrives (without buffering its payload), as RabbitMQ does.
    After an error the decoder is poisoned: every later :meth:`feed` raises the same error.
    Frames completed in the failing call before the bad one are kept in :attr:`salvaged`.

    ``frame_types`` are the types accepted (default 0-9-1's); the 0-8 and 0-9 codecs, whose
    frames have the same layout, pass their larger sets.
    """

    __slots__ = (
        "_error",
        "_frame_types",
        "_head",
        "_held",
        "_held_channel",
        "_held_size",
        "_held_type",
        "_parts",
        "_quiet",
        "frame_max",
        "salvaged",
        "wants_views",
    )

    def __init__(self, frame_max: int = 131072, frame_types: frozenset[int] = FRAME_TYPES) -> None:
        self.frame_max = frame_max
        self._frame_types = frame_types
        # The frame held back from the last read: its header while fewer than 7 octets of
        # it are known (``_head``), then its type, channel and payload size, and the
        # payload octets read so far as views of the reads that brought them (``_parts``,
        # ``_held`` of them; small pieces copied together, ``_keep``). A large body
        # straddles nearly every read: its pieces are joined once when the frame completes,
        # one copy, where a growing buffer copied them in and then out again (and again
        # whenever it grew).
        self._head = b""
        self._held_type = 0
        self._held_channel = 0
        self._held_size = -1  # -1: no header held
        self._parts: list[memoryview | bytearray] = []
        self._held = 0
        self._error: FrameError | None = None
        self.salvaged: list[Frame] = []
        # A frame of ``VIEW_FRAME`` octets or more came in the last read (either path):
        # the next read is worth a view (``feed_view``). Cleared by a view of small frames.
        self.wants_views = False
        self._quiet = 0  # reads in a row parsed in place without a large frame

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        if self._held_size < 0:
            return len(self._head)
        return FRAME_HEADER_SIZE + self._held

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add ``data``; return every frame now complete, in order (possibly ``[]``)."""
        if self._error is not None:
            raise self._error
        src = data if type(data) is bytes else bytes(data)
        frames: list[Frame] = []
        off = 0
        if self._held_size >= 0 or len(self._head):
            # Only the frame held back from the last read waits for this one: it takes the
            # bytes it lacks, and the rest of this read is parsed where it lies.
            off = self._complete(src, frames)
            if off < 0:
                return frames
        n = len(src)
        if n - off >= FRAME_OVERHEAD:
            off = self._scan(src, off, frames)
        if off < n:
            self._hold(src, off)
        return frames

    def feed_view(self, view: memoryview) -> list[Frame]:
        """:meth:`feed` of a view of a buffer its caller reuses once this returns (the
        adapter's read buffer, ``server/read_buffer.py``): nothing of ``view`` is kept,
        every payload is copied out of it once, and a frame held back for the next read
        is copied into a ``bytearray`` of its own. The same frames, errors and holds as
        :meth:`feed` of ``bytes(view)``, without that whole-read copy; but a view's
        headers and slices cost more than ``bytes``' per frame, so ``wants_views`` says
        when the caller should use it."""
        if self._error is not None:
            raise self._error
        frames: list[Frame] = []
        off = 0
        if self._held_size >= 0 or len(self._head):
            off = self._complete(view, frames)
            if off < 0:
                return frames
        n = len(view)
        if n - off >= FRAME_OVERHEAD:
            off = self._scan_view(view, off, frames)
        if off < n:
            self._hold(view, off)
        return frames

    def _hold(self, src: bytes | memoryview, off: int) -> None:
        """Keep the incomplete frame at ``off`` (the end of ``src``) for the next read."""
        if len(src) - off <= FRAME_HEADER_SIZE:
            # A header alone waits as it is: its size is checked when the next read comes
            # (an oversized one longer was rejected by ``_scan``).
            tail = src[off:]
            self._head = tail if type(tail) is bytes else bytes(tail)
            return
        self._start(src, off)
        start = off + FRAME_HEADER_SIZE
        if start < len(src):
            self._keep(memoryview(src)[start:], type(src) is bytes)

    def _start(self, header: bytes | memoryview, off: int) -> None:
        """The held frame's header is known: 7 octets of ``header`` at ``off``."""
        ftype, channel, size = _HEADER.unpack_from(header, off)
        self._held_type = ftype
        self._held_channel = channel
        self._held_size = size
        self._held = 0
        if size >= VIEW_FRAME:
            self.wants_views = True
            self._quiet = 0

    def _keep(self, piece: memoryview, owned: bool) -> None:
        """Hold ``piece`` of the held frame's payload. A small one is copied onto the
        small ones before it: a peer trickling a frame in tiny reads must not make us keep
        an object per read. A large one is kept as it is when its read is ``owned`` (a
        ``bytes`` no one changes), else copied (a view of the reused read buffer)."""
        parts = self._parts
        self._held += len(piece)
        if len(piece) >= _SMALL_PIECE:
            parts.append(piece if owned else bytearray(piece))
        elif parts and type(last := parts[-1]) is bytearray:
            last += piece
        else:
            parts.append(bytearray(piece))

    def _complete(self, src: bytes | memoryview, frames: list[Frame]) -> int:
        """Finish the held frame from ``src``: the offset in ``src`` after it, or -1 when
        ``src`` did not finish it (then all of ``src`` is held)."""
        taken = 0
        if self._held_size < 0:
            head = self._head
            taken = min(FRAME_HEADER_SIZE - len(head), len(src))
            head += src[:taken]
            if len(head) < FRAME_HEADER_SIZE:
                self._head = head
                return -1
            self._head = b""
            self._start(head, 0)
        size = self._held_size
        # Checked at every read, as frame_max may have changed since the header came: an
        # oversized frame is rejected without buffering its payload, as RabbitMQ does.
        limit = self.frame_max if self.frame_max > 0 else _MAX_SIZE
        if size > limit:
            self._fail(self._too_large(size), frames)
        # What the frame lacks: the rest of its payload and the frame-end octet.
        need = size - self._held + 1
        n = len(src)
        if n - taken < need:
            if n > taken:
                self._keep(memoryview(src)[taken:], type(src) is bytes)
            return -1
        end = taken + need - 1
        ftype = self._held_type
        if src[end] != FRAME_END or ftype not in self._frame_types:
            self._reject(ftype, self._held_channel, size, src[end], frames)
        parts = self._parts
        if end > taken:
            parts.append(memoryview(src)[taken:end])
        payload = b"".join(parts)
        frames.append((ftype, self._held_channel, payload))
        self._parts = []
        self._held_size = -1
        self._held = 0
        return end + 1

    def _scan(self, src: bytes, off: int, frames: list[Frame]) -> int:
        """Append every complete frame of ``src`` from ``off``; the offset after them."""
        n = len(src)
        frame_max = self.frame_max
        frame_types = self._frame_types
        # The payload may fill frame_max itself: RabbitMQ accepts 8 bytes more than the
        # spec's frame size, and clients that count frame_max as the payload (rabbitpy)
        # rely on it. What we send still fits frame_max whole (encode_message_frames).
        limit = frame_max if frame_max > 0 else _MAX_SIZE
        while n - off >= FRAME_OVERHEAD:
            # The header read octet by octet, and frames.append called as a method: native
            # in the compiled build, where a struct call per frame made a lone publish's
            # three frames cost 1.2 µs against 0.6 (the pure build's cost moves by 0.1 µs;
            # issue 26, docs/benchmarks.md "A lone message on each of 1000 sockets").
            ftype = src[off]
            channel = src[off + 1] << 8 | src[off + 2]
            size = src[off + 3] << 24 | src[off + 4] << 16 | src[off + 5] << 8 | src[off + 6]
            start = off + FRAME_HEADER_SIZE
            end = start + size
            if size >= VIEW_FRAME:
                self.wants_views = True
                self._quiet = 0
            if end >= n:
                # Incomplete: reject an oversized frame now rather than buffer it.
                if size > limit:
                    self._fail(self._too_large(size), frames)
                break
            if src[end] != FRAME_END or size > limit or ftype not in frame_types:
                self._reject(ftype, channel, size, src[end], frames)
            frames.append((ftype, channel, src[start:end]))
            off = end + 1
        return off

    def _scan_view(self, view: memoryview, off: int, frames: list[Frame]) -> int:
        """``_scan`` of a view: the header by one struct call (a view's octets are read
        by generic calls in the compiled build), each payload copied out as ``bytes``.
        Reads without a large frame clear ``wants_views`` (``_QUIET_READS``)."""
        n = len(view)
        frame_max = self.frame_max
        frame_types = self._frame_types
        limit = frame_max if frame_max > 0 else _MAX_SIZE
        large = False
        unpack = _HEADER.unpack_from
        while n - off >= FRAME_OVERHEAD:
            ftype, channel, size = unpack(view, off)
            start = off + FRAME_HEADER_SIZE
            end = start + size
            if size >= VIEW_FRAME:
                large = True
            if end >= n:
                if size > limit:
                    self._fail(self._too_large(size), frames)
                break
            end_octet: int = view[end]
            if end_octet != FRAME_END or size > limit or ftype not in frame_types:
                self._reject(ftype, channel, size, end_octet, frames)
            frames.append((ftype, channel, view[start:end].tobytes()))
            off = end + 1
        if large:
            self._quiet = 0
        elif n >= VIEW_FRAME:
            self.wants_views = False
        else:
            self._quiet += 1
            if self._quiet >= _QUIET_READS:
                self.wants_views = False
        return off

    def _reject(
        self, ftype: int, channel: int, size: int, end_octet: int, frames: list[Frame]
    ) -> None:
        """Raise the first error of a whole frame that failed a check, in RabbitMQ's
        order: frame end, size, type."""
        if end_octet != FRAME_END:
            self._fail(
                FrameError(
                    f"frame_end: expected 0xCE after a {size}-byte payload of a"
                    f" type {ftype} frame on channel {channel}, got 0x{end_octet:02x}"
                ),
                frames,
            )
        limit = self.frame_max if self.frame_max > 0 else _MAX_SIZE
        if size > limit:
            self._fail(self._too_large(size), frames)
        self._fail(FrameError(f"unknown frame type {ftype} on channel {channel}"), frames)

    def _too_large(self, size: int) -> FrameError:
        return FrameError(
            f"frame too large: {size + FRAME_OVERHEAD} bytes exceeds frame_max {self.frame_max}"
        )

    def _fail(self, error: FrameError, frames: list[Frame]) -> None:
        self._error = error
        self.salvaged = frames
        self._head = b""
        self._parts = []
        self._held_size = -1
        self._held = 0
        raise error


def read_u64(data: bytes, at: int) -> int:
    """The big-endian unsigned 64-bit integer at ``at`` of ``data`` (8 octets there: the
    caller checked). Octet by octet: native in the compiled build, where a struct call costs
    a generic method call, an argument tuple and a result tuple (a delivery tag of every
    ack, a body size of every content header)."""
    return (
        data[at] << 56
        | data[at + 1] << 48
        | data[at + 2] << 40
        | data[at + 3] << 32
        | data[at + 4] << 24
        | data[at + 5] << 16
        | data[at + 6] << 8
        | data[at + 7]
    )


_pack_header = _HEADER.pack


def encode_frame(frame_type: int, channel: int, payload: bytes | memoryview) -> bytes:
    """Encode one frame: 7-byte header, ``payload``, frame-end octet."""
    return b"".join((_pack_header(frame_type, channel, len(payload)), payload, FRAME_END_BYTES))


HEARTBEAT_FRAME: bytes = encode_frame(FRAME_HEARTBEAT, 0, b"")


def encode_method_frame(channel: int, method_payload: bytes) -> bytes:
    """Encode a method frame around a generated method's ``encode()`` output."""
    return (
        _pack_header(FRAME_METHOD, channel, len(method_payload)) + method_payload + FRAME_END_BYTES
    )


def _body_pieces(
    out: list[bytes | memoryview], channel: int, body: bytes | memoryview, frame_max: int
) -> None:
    """Append body frames (after a frame whose end octet is still missing) and the last end."""
    size = len(body)
    chunk = frame_max - FRAME_OVERHEAD if frame_max > 0 else size
    if chunk <= 0:
        raise ValueError(f"frame_max {frame_max} leaves no room for a body")
    pack = _END_BODY_HEADER.pack
    if size <= chunk:
        out.append(pack(FRAME_END, FRAME_BODY, channel, size))
        out.append(body)
    else:
        view = memoryview(body)
        for i in range(0, size, chunk):
            piece = view[i : i + chunk]
            out.append(pack(FRAME_END, FRAME_BODY, channel, len(piece)))
            out.append(piece)
    out.append(FRAME_END_BYTES)


def encode_content_frames(
    channel: int,
    class_id: int,
    body: bytes | memoryview,
    properties: bytes,
    frame_max: int,
) -> list[bytes]:
    """Encode a content header frame and its body frames, as separate list elements.

    ``properties`` is the raw property flags + property list.  Each body frame carries at most
    ``frame_max - 8`` bytes (``frame_max`` 0: unlimited); an empty body yields no body frame.
    """
    size = len(body)
    frames = [
        b"".join(
            (
                _HEADER_FRAME_PREFIX.pack(
                    FRAME_HEADER, channel, 12 + len(properties), class_id, 0, size
                ),
                properties,
                FRAME_END_BYTES,
            )
        )
    ]
    if size == 0:
        return frames
    chunk = frame_max - FRAME_OVERHEAD if frame_max > 0 else size
    if chunk <= 0:
        raise ValueError(f"frame_max {frame_max} leaves no room for a body")
    if size <= chunk:
        frames.append(encode_frame(FRAME_BODY, channel, body))
        return frames
    view = memoryview(body)
    frames.extend(
        encode_frame(FRAME_BODY, channel, view[i : i + chunk]) for i in range(0, size, chunk)
    )
    return frames


def encode_message_frames(
    channel: int,
    method_payload: bytes,
    class_id: int,
    body: bytes | memoryview,
    properties: bytes,
    frame_max: int,
) -> bytes:
    """Encode method + content header + body frames joined into one ``bytes`` object.

    The delivery hot path: one ``bytes.join`` allocation per message, with precompiled structs
    for the method frame header, the header frame header + content-header prefix, and each body
    frame header (each struct also writes the previous frame's end octet).
    """
    size = len(body)
    out: list[bytes | memoryview] = [
        _pack_header(FRAME_METHOD, channel, len(method_payload)),
        method_payload,
        _END_HEADER_FRAME_PREFIX.pack(
            FRAME_END, FRAME_HEADER, channel, 12 + len(properties), class_id, 0, size
        ),
        properties,
    ]
    if size == 0:
        out.append(FRAME_END_BYTES)
    elif frame_max <= 0 or size <= frame_max - FRAME_OVERHEAD:
        out.append(_END_BODY_HEADER.pack(FRAME_END, FRAME_BODY, channel, size))
        out.append(body)
        out.append(FRAME_END_BYTES)
    else:
        _body_pieces(out, channel, body, frame_max)
    return b"".join(out)


def parse_content_header(payload: bytes | memoryview) -> tuple[int, int, bytes]:
    """Split a content header payload into (class_id, body_size, raw property bytes).

    A payload shorter than 14 bytes (class-id, weight, body-size, property flags) raises
    :class:`~leveret.errors.FrameError` (501), as RabbitMQ treats a bad content header as a
    frame error.
    """
    if len(payload) < 14:
        raise FrameError(f"content header: {len(payload)} bytes, shorter than the 14 minimum")
    class_id, _weight, body_size = _CONTENT_HEADER.unpack_from(payload, 0)
    return class_id, body_size, bytes(payload[12:])
