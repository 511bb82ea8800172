"""Errors of the stream-protocol codec: the peer broke the framing or sent what its role may
not send. Each carries the response code a server closes the connection with."""

from __future__ import annotations

from typing import ClassVar

from leveret.errors import BrokerError
from leveret.protocol.rabbitstream.constants import Code


class StreamProtocolError(BrokerError):
    """The peer sent bytes the protocol does not allow; close with ``code``."""

    code: ClassVar[Code] = Code.UNKNOWN_FRAME


class UnknownFrame(StreamProtocolError):
    """An unknown key or version, a command this role may not receive, or a malformed body."""

    code = Code.UNKNOWN_FRAME


class FrameTooLarge(StreamProtocolError):
    """A frame over the negotiated ``frame_max``."""

    code = Code.FRAME_TOO_LARGE
