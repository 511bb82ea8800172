"""AMQP 0-10 frames and their assembly into controls and commands; the amqp010 package uses it.

The frame format (spec 4.4) is a 12-octet header then the payload::

    octet 0     0 0 0 0 B E b e     version (2 bits, 0), reserved, first/last segment,
                                    first/last frame
    octet 1     segment type        control 0, command 1, header 2, body 3
    octets 2-3  frame size          the whole frame, header included (big-endian)
    octet 4     reserved
    octet 5     0 0 0 0 track       control track 0, command track 1
    octets 6-7  channel
    octets 8-11 reserved

A control is one segment; a command is a command segment, then optionally a header segment
(struct32 values) and a body segment.  The segments of one assembly travel in order on one
(channel, track); a frame of the control track may come between the frames of a command.
:class:`FrameDecoder` turns bytes into frames, :class:`Assembler` frames into
:class:`Assembly` values, and :func:`encode_control` / :func:`encode_command` do the reverse,
splitting segments to the peer's maximum frame size.  Malformed input raises
:class:`ProtocolViolation` with the ``framing-error`` close code.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from leveret.protocol.amqp010._generated.constants import MIN_MAX_FRAME_SIZE
from leveret.protocol.amqp010.errors import ProtocolViolation
from leveret.protocol.amqp010.ops import encode_header

if TYPE_CHECKING:
    from collections.abc import Sequence

    from leveret.protocol.amqp010.types import Buffer, Command, Control, Struct

__all__ = [
    "FIRST_FRAME",
    "FIRST_SEGMENT",
    "FRAME_HEADER_SIZE",
    "LAST_FRAME",
    "LAST_SEGMENT",
    "MAX_FRAME_SIZE",
    "PROTOCOL_HEADER",
    "SEGMENT_BODY",
    "SEGMENT_COMMAND",
    "SEGMENT_CONTROL",
    "SEGMENT_HEADER",
    "TRACK_COMMAND",
    "TRACK_CONTROL",
    "Assembler",
    "Assembly",
    "Frame",
    "FrameDecoder",
    "encode_command",
    "encode_control",
    "encode_segment",
]

PROTOCOL_HEADER = b"AMQP\x01\x01\x00\x0a"
"""``AMQP``, protocol class 1, instance 1, version 0-10 (spec 4.2)."""

FRAME_HEADER_SIZE = 12
MAX_FRAME_SIZE = 0xFFFF  # the size field is 16 bits
FIRST_SEGMENT = 0x08
LAST_SEGMENT = 0x04
FIRST_FRAME = 0x02
LAST_FRAME = 0x01
SEGMENT_CONTROL = 0
SEGMENT_COMMAND = 1
SEGMENT_HEADER = 2
SEGMENT_BODY = 3
TRACK_CONTROL = 0
TRACK_COMMAND = 1

_HEADER = struct.Struct(">BBHxBH4x")  # flags, segment type, size, track, channel
_FRAMING_ERROR = 501


class Frame(NamedTuple):
    """One decoded frame."""

    flags: int
    segment_type: int
    track: int
    channel: int
    payload: bytes


class FrameDecoder:
    """Incremental, sans-IO frame parser: :meth:`feed` bytes, get every complete frame.

    ``max_frame_size`` is the largest whole frame accepted; it starts at the spec's
    MIN-MAX-FRAME-SIZE (4096) and the connection raises it once tuned.
    """

    __slots__ = ("_buf", "max_frame_size")

    def __init__(self, max_frame_size: int = MIN_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        """Octets received that do not yet make a whole frame."""
        return len(self._buf)

    def feed(self, data: Buffer) -> list[Frame]:
        """Add ``data``; return the frames now complete (possibly none)."""
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        off = 0
        end = len(buf)
        unpack = _HEADER.unpack_from
        while end - off >= FRAME_HEADER_SIZE:
            flags, seg_type, size, track, channel = unpack(buf, off)
            if size < FRAME_HEADER_SIZE:
                raise ProtocolViolation(f"frame size {size} is smaller than its header")
            if size > self.max_frame_size:
                raise ProtocolViolation(
                    f"frame of {size} octets exceeds the maximum of {self.max_frame_size}"
                )
            if flags & 0xF0:
                raise ProtocolViolation(f"frame flags {flags:#04x}: not a 0-10 frame")
            if seg_type > SEGMENT_BODY:
                raise ProtocolViolation(f"unknown segment type {seg_type}")
            if track & 0xF > TRACK_COMMAND:
                raise ProtocolViolation(f"unknown track {track & 0xF}")
            if end - off < size:
                break
            frames.append(
                Frame(flags, seg_type, track & 0xF, channel, bytes(buf[off + 12 : off + size]))
            )
            off += size
        if off:
            del buf[:off]
        return frames


@dataclass(frozen=True, slots=True)
class Assembly:
    """A whole control or command: its first segment and, for commands, header and body."""

    channel: int
    segment_type: int
    payload: bytes
    header: bytes | None = None
    body: bytes | None = None


class _Partial:
    __slots__ = ("body", "first", "header", "in_segment", "last_segment", "parts", "seg_type")

    def __init__(self, seg_type: int) -> None:
        self.seg_type = seg_type  # type of the segment being read
        self.first: bytes | None = None
        self.header: bytes | None = None
        self.body: list[bytes] | None = None
        self.parts: list[bytes] = []
        self.in_segment = True
        self.last_segment = False


class Assembler:
    """Frames to assemblies, per (channel, track) (spec 4.4.2, "Assemblies").

    ``max_size`` caps the octets one assembly may hold while incomplete (its body mostly).
    """

    __slots__ = ("_partial", "_size", "max_size")

    def __init__(self, max_size: int = 1 << 27) -> None:
        self._partial: dict[tuple[int, int], _Partial] = {}
        self._size: dict[tuple[int, int], int] = {}
        self.max_size = max_size

    def pending(self, channel: int) -> bool:
        """Whether an assembly on ``channel`` is incomplete (a command half received)."""
        return (channel, TRACK_COMMAND) in self._partial or (
            channel,
            TRACK_CONTROL,
        ) in self._partial

    def discard(self, channel: int) -> None:
        """Forget any incomplete assembly on ``channel`` (its session went away)."""
        for track in (TRACK_CONTROL, TRACK_COMMAND):
            self._partial.pop((channel, track), None)
            self._size.pop((channel, track), None)

    def add(self, frame: Frame) -> Assembly | None:
        """Take one frame; return the assembly it completes, if any."""
        flags, seg_type, track, channel, payload = frame
        key = (channel, track)
        part = self._partial.get(key)
        if part is None:
            # Fast path: a whole single-frame control or command segment.
            if flags & (FIRST_SEGMENT | FIRST_FRAME) != FIRST_SEGMENT | FIRST_FRAME:
                raise ProtocolViolation("frame continues an assembly that never started")
            if seg_type != track or seg_type > SEGMENT_COMMAND:
                raise ProtocolViolation(
                    f"assembly on track {track} starts with a segment of type {seg_type}"
                )
            if flags & LAST_FRAME and flags & LAST_SEGMENT:
                return Assembly(channel, seg_type, payload)
            if seg_type == SEGMENT_CONTROL and not flags & LAST_SEGMENT:
                raise ProtocolViolation("a control is one segment")
            part = _Partial(seg_type)
            self._partial[key] = part
            self._size[key] = 0
        elif part.in_segment:
            if flags & FIRST_FRAME or seg_type != part.seg_type:
                raise ProtocolViolation("frame interrupts an unfinished segment")
        else:
            if flags & FIRST_SEGMENT or not flags & FIRST_FRAME:
                raise ProtocolViolation("frame does not start the next segment")
            header_ok = seg_type == SEGMENT_HEADER and part.header is None and part.body is None
            if not header_ok and seg_type != SEGMENT_BODY:
                raise ProtocolViolation(f"segment of type {seg_type} out of order")
            part.seg_type = seg_type
            part.in_segment = True

        size = self._size[key] + len(payload)
        if size > self.max_size:
            raise ProtocolViolation(f"assembly larger than {self.max_size} octets")
        self._size[key] = size
        part.parts.append(payload)
        if not flags & LAST_FRAME:
            return None

        # The segment is complete.
        segment = part.parts[0] if len(part.parts) == 1 else b"".join(part.parts)
        part.parts = []
        part.in_segment = False
        if part.seg_type in (SEGMENT_CONTROL, SEGMENT_COMMAND):
            part.first = segment
        elif part.seg_type == SEGMENT_HEADER:
            part.header = segment
        elif part.body is None:
            part.body = [segment]
        else:
            part.body.append(segment)
        if not flags & LAST_SEGMENT:
            if part.seg_type == SEGMENT_CONTROL:
                raise ProtocolViolation("a control is one segment")
            return None
        del self._partial[key]
        del self._size[key]
        assert part.first is not None
        body = None if part.body is None else b"".join(part.body)
        return Assembly(channel, SEGMENT_COMMAND, part.first, part.header, body)


def encode_segment(
    out: list[bytes],
    channel: int,
    track: int,
    seg_type: int,
    payload: Buffer,
    first_segment: bool,
    last_segment: bool,
    max_frame_size: int,
) -> None:
    """Append the frames of one segment, each at most ``max_frame_size`` octets, to ``out``."""
    seg_flags = (FIRST_SEGMENT if first_segment else 0) | (LAST_SEGMENT if last_segment else 0)
    room = max_frame_size - FRAME_HEADER_SIZE
    total = len(payload)
    if total <= room:
        out.append(
            _HEADER.pack(
                seg_flags | FIRST_FRAME | LAST_FRAME,
                seg_type,
                total + FRAME_HEADER_SIZE,
                track,
                channel,
            )
        )
        out.append(bytes(payload))
        return
    view = memoryview(payload)
    for start in range(0, total, room):
        chunk = view[start : start + room]
        flags = seg_flags
        if start == 0:
            flags |= FIRST_FRAME
        if start + room >= total:
            flags |= LAST_FRAME
        out.append(_HEADER.pack(flags, seg_type, len(chunk) + FRAME_HEADER_SIZE, track, channel))
        out.append(bytes(chunk))


def encode_control(
    channel: int, control: Control, max_frame_size: int = MIN_MAX_FRAME_SIZE
) -> bytes:
    """The frames of one control."""
    out: list[bytes] = []
    encode_segment(
        out, channel, TRACK_CONTROL, SEGMENT_CONTROL, control.encode(), True, True, max_frame_size
    )
    return b"".join(out)


def encode_command(
    channel: int,
    command: Command | bytes,
    *,
    sync: bool = False,
    header: Sequence[Struct] | bytes | None = None,
    body: Buffer | None = None,
    max_frame_size: int = MIN_MAX_FRAME_SIZE,
) -> bytes:
    """The frames of one command, with its header and body segments when given.

    ``command`` may be an already encoded command segment (then ``sync`` is what it holds);
    ``header`` may be the structs or an already encoded header segment (kept as received,
    so a delivery re-sends the publisher's octets).
    """
    out: list[bytes] = []
    segment = command if isinstance(command, bytes) else command.encode(sync)
    header_bytes = header if isinstance(header, bytes) or header is None else encode_header(header)
    last = header_bytes is None and body is None
    encode_segment(
        out, channel, TRACK_COMMAND, SEGMENT_COMMAND, segment, True, last, max_frame_size
    )
    if header_bytes is not None:
        encode_segment(
            out,
            channel,
            TRACK_COMMAND,
            SEGMENT_HEADER,
            header_bytes,
            False,
            body is None,
            max_frame_size,
        )
    if body is not None:
        encode_segment(out, channel, TRACK_COMMAND, SEGMENT_BODY, body, False, True, max_frame_size)
    return b"".join(out)
