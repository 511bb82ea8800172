"""The stream protocol's sans-IO codec, in either role: bytes in, commands out.

Theory of operation: a frame is ``size u32`` then ``size`` bytes (key u16, version u16,
body). ``StreamCodec.receive(data)`` cuts every complete frame from its buffer in one
pass and decodes it; incomplete input stays buffered (never an exception). A frame over
``frame_max`` is refused as soon as its size is read (``FrameTooLarge``, without buffering
it); an unknown key or version, a command the peer's role may not send, or a malformed
body is ``UnknownFrame``. After an error the codec is poisoned: the server closes the
connection with the error's ``code``.

Roles: the client sends the requests (publish, subscribe, ...) and the answers to the
server's tune, close and consumer update; the server sends deliveries, confirms, metadata
updates, consumer updates, tune, close and the responses. Heartbeat goes both ways.
``send(command)`` refuses (``ValueError``, our bug) a command our role may not send.

Any module may import this one.
"""

from __future__ import annotations

import struct
from enum import Enum

from leveret.protocol.rabbitstream.commands import Command, decode_body
from leveret.protocol.rabbitstream.constants import RESPONSE, Key
from leveret.protocol.rabbitstream.errors import FrameTooLarge, StreamProtocolError, UnknownFrame

_SIZE = struct.Struct(">I")
_KEY_VERSION = struct.Struct(">HH")


class Role(Enum):
    CLIENT = "client"
    SERVER = "server"


_FROM_SERVER_ONLY = frozenset(
    {
        Key.PUBLISH_CONFIRM,
        Key.PUBLISH_ERROR,
        Key.DELIVER,
        Key.METADATA_UPDATE,
        Key.CONSUMER_UPDATE,
    }
)
_BOTH_WAYS = frozenset({Key.TUNE, Key.CLOSE, Key.HEARTBEAT})
_UNFLAGGED_RESPONSES = frozenset({Key.ROUTE, Key.PARTITIONS})


def sent_by(key: int) -> frozenset[Role]:
    """The roles that may send a frame with this wire ``key``."""
    base = key & ~RESPONSE
    if base in _BOTH_WAYS:
        return _EITHER
    server_initiated = base in _FROM_SERVER_ONLY
    if key & RESPONSE:
        # A response comes from whoever did not send the request.
        return _CLIENT if server_initiated else _SERVER
    return _SERVER if server_initiated else _CLIENT


_EITHER = frozenset({Role.CLIENT, Role.SERVER})
_CLIENT = frozenset({Role.CLIENT})
_SERVER = frozenset({Role.SERVER})


class StreamCodec:
    """One side of a stream-protocol connection; see the module docstring."""

    __slots__ = ("_buf", "_error", "frame_max", "peer", "role")

    def __init__(self, role: Role, frame_max: int = 0) -> None:
        self.role = role
        self.peer = Role.SERVER if role is Role.CLIENT else Role.CLIENT
        # Largest frame accepted, size prefix included; 0 = no limit (set after tune).
        self.frame_max = frame_max
        self._buf = bytearray()
        self._error: StreamProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    def receive(self, data: bytes | bytearray | memoryview) -> list[Command]:
        """Every command now complete, in order (possibly ``[]``)."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        out: list[Command] = []
        n = len(buf)
        at = 0
        limit = self.frame_max
        view = memoryview(buf)
        try:
            while n - at >= 4:
                size = _SIZE.unpack_from(buf, at)[0]
                if limit and size + 4 > limit:
                    raise FrameTooLarge(f"frame of {size + 4} bytes exceeds frame_max {limit}")
                end = at + 4 + size
                if end > n:
                    break
                out.append(self._decode(view[at + 4 : end]))
                at = end
        except StreamProtocolError as exc:
            self._error = exc
            view.release()
            self._buf = bytearray()
            raise
        view.release()
        if at:
            del buf[:at]
        return out

    def _decode(self, body: memoryview) -> Command:
        if len(body) < 4:
            raise UnknownFrame(f"frame of {len(body)} bytes has no key and version")
        key, version = _KEY_VERSION.unpack_from(body)
        if key in _UNFLAGGED_RESPONSES and self.role is Role.CLIENT:
            # RabbitMQ 3.10.8 answers route and partitions without the response bit.
            key |= RESPONSE
            body = memoryview(_KEY_VERSION.pack(key, version) + body[4:])
        if self.peer not in sent_by(key):
            raise UnknownFrame(f"command 0x{key:04x} may not be sent by a {self.peer.value}")
        return decode_body(key, version, body)

    def send(self, command: Command) -> bytes:
        """The frame of ``command``; our role must be one that sends it."""
        frame = command.encode()
        key = _KEY_VERSION.unpack_from(frame, 4)[0]
        if self.role not in sent_by(key):
            raise ValueError(f"a {self.role.value} does not send {type(command).__name__}")
        return frame
