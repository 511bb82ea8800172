"""AMQP 0-8 frames: 0-9-1's layout and codec, with 0-8's protocol header and frame types.

A 0-8 frame is laid out as a 0-9-1 one (type octet, channel short, size long, payload,
``0xCE``), and so are its content header (class-id, weight, body-size, property flags) and
heartbeat, so the 0-9-1 codec is shared. What differs: the header a 0-8 client sends, and
three frame types 0-9-1 dropped, out-of-band method/header/body (4, 5, 6) and trace (7),
which the decoder returns as frames (their payload is not defined by the XML; a front end
that does not use them answers them as RabbitMQ answers any bad frame type).
"""

from __future__ import annotations

from leveret.protocol.amqp08._generated import constants
from leveret.protocol.amqp091.framing import (
    FRAME_END,
    FRAME_OVERHEAD,
    HEARTBEAT_FRAME,
    Frame,
    FrameDecoder,
    encode_content_frames,
    encode_frame,
    encode_message_frames,
    encode_method_frame,
    parse_content_header,
)

__all__ = [
    "FRAME_END",
    "FRAME_OVERHEAD",
    "FRAME_TYPES",
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER",
    "PROTOCOL_HEADERS",
    "Frame",
    "encode_content_frames",
    "encode_frame",
    "encode_message_frames",
    "encode_method_frame",
    "frame_decoder",
    "parse_content_header",
]

PROTOCOL_HEADER: bytes = b"AMQP\x01\x01\x08\x00"
"""What 0-8 clients send: the 0-8 document numbers the version 8-0."""
PROTOCOL_HEADERS: frozenset[bytes] = frozenset({PROTOCOL_HEADER, b"AMQP\x01\x01\x09\x01"})
"""Both 0-8 headers: ``AMQP 1 1 9 1`` is the one printed in the 0-8 document itself, which
some libraries (py-amqplib) send when asked for 0-8; RabbitMQ treats it as 0-8."""

FRAME_TYPES = frozenset(
    {
        constants.FRAME_METHOD,
        constants.FRAME_HEADER,
        constants.FRAME_BODY,
        constants.FRAME_OOB_METHOD,
        constants.FRAME_OOB_HEADER,
        constants.FRAME_OOB_BODY,
        constants.FRAME_TRACE,
        constants.FRAME_HEARTBEAT,
    }
)


def frame_decoder(frame_max: int = 131072) -> FrameDecoder:
    """A frame decoder that accepts every 0-8 frame type."""
    return FrameDecoder(frame_max, FRAME_TYPES)
