"""AMQP/Fast 0.8a2 framing (AMQ RFC 006, 3.1 and 3.4): initiation, commands, fragments.

::

    initiation   = %d128 protocol-version                  (the client's highest; 1)
    command      = command-size command-payload %xCE
    command-size = %x0000..%xFFFE                          (two octets)
                 / %xFFFF 4OCTET                           (escape, then four octets)
    message      = fragment-size octets right after a HANDLE SEND, NOTIFY or PREPARE

The size counts the payload (type octet and fields) and the command-end octet, not itself
("the command-end byte is included in the command-size"). Message fragments travel outside
commands: after a HANDLE SEND, NOTIFY or PREPARE whose ``fragment_size`` is N (and, for the
first two, ``out_of_band`` is 0), the next N octets of the stream are message data; the first
fragment of a message starts with its header block (``commands.MessageHeader``).

Readings taken where the RFC is silent (docs/compatibility.md): the long size form is written
only for sizes of 0xFFFF and more, but read for any size; the frame-size limit (4096 octets
before tuning, FRAME_MAX after) applies to the command-size value and to each fragment-size.

:class:`CommandDecoder` is sans-IO and lazy: :meth:`~CommandDecoder.receive` buffers,
:meth:`~CommandDecoder.next` returns the next command or :class:`Fragment` (``None`` until
more data arrives), so a limit changed between two items applies to the second. Malformed
framing raises :class:`leveret.errors.FrameError` (501), a malformed command
``SyntaxError_`` (502), an unknown one ``CommandInvalid`` (503); after an error the decoder
raises it again on every call.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from leveret.errors import AMQPError, FrameError
from leveret.protocol.amqpfast.commands import (
    FRAGMENT_CARRIERS,
    Command,
    HandleNotify,
    HandlePrepare,
    HandleSend,
    MessageHeader,
    decode_command,
)

__all__ = [
    "COMMAND_END",
    "INITIATION",
    "PRE_TUNE_FRAME_MAX",
    "PROTOCOL_ID",
    "PROTOCOL_VERSION",
    "CommandDecoder",
    "Fragment",
    "encode_command",
    "split_message",
]

PROTOCOL_ID = 128
PROTOCOL_VERSION = 1
INITIATION = bytes((PROTOCOL_ID, PROTOCOL_VERSION))
COMMAND_END = 0xCE
PRE_TUNE_FRAME_MAX = 4096
"""Largest CONNECTION CHALLENGE, RESPONSE and TUNE frame (3.2.3-3.2.5)."""

_ESCAPE = 0xFFFF
_H = struct.Struct(">H")
_L = struct.Struct(">L")
_END = bytes((COMMAND_END,))


@dataclass(frozen=True, slots=True)
class Fragment:
    """Message octets that followed a HANDLE SEND, NOTIFY or PREPARE in the stream."""

    data: bytes


def encode_command(command: Command) -> bytes:
    """The whole command: size (short, or 0xFFFF and long), payload, command-end."""
    payload = command.encode()
    size = len(payload) + 1
    head = _H.pack(size) if size < _ESCAPE else _H.pack(_ESCAPE) + _L.pack(size)
    return head + payload + _END


def split_message(header: MessageHeader, body: bytes, fragment_max: int) -> list[bytes]:
    """The message (header block + body) cut into fragments of at most ``fragment_max``."""
    if fragment_max < 1:
        raise ValueError(f"fragment_max {fragment_max} leaves no room for data")
    data = header.encode() + body
    return [data[i : i + fragment_max] for i in range(0, len(data), fragment_max)] or [b""]


def _expects_fragment(command: Command) -> int:
    """How many message octets follow ``command`` in the stream."""
    if isinstance(command, HandleSend | HandleNotify):
        return 0 if command.out_of_band else command.fragment_size
    if isinstance(command, HandlePrepare):
        return command.fragment_size
    return 0


class CommandDecoder:
    """Incremental, lazy parser of the command stream that follows the initiation."""

    __slots__ = ("_buf", "_error", "_fragment", "frame_max")

    def __init__(self, frame_max: int = PRE_TUNE_FRAME_MAX) -> None:
        self.frame_max = frame_max
        self._buf = bytearray()
        self._fragment = 0  # message octets still owed by the last SEND/NOTIFY/PREPARE
        self._error: AMQPError | None = None

    @property
    def buffered(self) -> int:
        """Octets received and not yet returned."""
        return len(self._buf)

    @property
    def awaiting_fragment(self) -> bool:
        """The next item is a fragment (the previous command announced one)."""
        return self._fragment > 0

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        """Add ``data`` to the buffer."""
        self._buf += data

    def next(self) -> Command | Fragment | None:
        """The next complete command or fragment, or ``None`` if more data is needed."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except AMQPError as exc:
            self._error = exc
            raise

    def _next(self) -> Command | Fragment | None:
        buf = self._buf
        if self._fragment:
            need = self._fragment
            if len(buf) < need:
                return None
            data = bytes(buf[:need])
            del buf[:need]
            self._fragment = 0
            return Fragment(data)
        if len(buf) < 2:
            return None
        size = _H.unpack_from(buf, 0)[0]
        head = 2
        if size == _ESCAPE:
            if len(buf) < 6:
                return None
            size = _L.unpack_from(buf, 2)[0]
            head = 6
        if size < 2:
            raise FrameError(f"command size {size}: too small for a type octet and the end")
        if size > self.frame_max:
            raise FrameError(f"command of {size} octets exceeds the frame limit {self.frame_max}")
        if len(buf) < head + size:
            return None
        end = head + size - 1
        if buf[end] != COMMAND_END:
            raise FrameError(f"command-end: expected 0xCE, got 0x{buf[end]:02x}")
        payload = bytes(buf[head:end])
        del buf[: end + 1]
        command = decode_command(payload)
        if command.TYPE in FRAGMENT_CARRIERS:
            owed = _expects_fragment(command)
            if owed > self.frame_max:
                raise FrameError(
                    f"fragment of {owed} octets exceeds the frame limit {self.frame_max}"
                )
            self._fragment = owed
        return command
