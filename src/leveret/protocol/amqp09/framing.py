"""AMQP 0-9 and 0-9 draft frames: 0-9-1's layout and codec, with their headers and frame types.

Both lay frames out as 0-9-1 does (type octet, channel short, size long, payload, ``0xCE``;
content headers and heartbeats alike), so the 0-9-1 codec is shared. What differs: the
protocol header, and the frame types. 0-9 keeps 0-8's out-of-band method/header/body (4, 5,
6) and trace (7) frames; the working draft drops the out-of-band ones and keeps trace. Their
payloads are not defined by the XML; the decoder returns them as frames.
"""

from __future__ import annotations

from leveret.protocol.amqp09._generated import constants
from leveret.protocol.amqp09.draft._generated import constants as draft_constants
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
    "DRAFT_FRAME_TYPES",
    "DRAFT_PROTOCOL_HEADER",
    "FRAME_END",
    "FRAME_OVERHEAD",
    "FRAME_TYPES",
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER",
    "Frame",
    "draft_frame_decoder",
    "encode_content_frames",
    "encode_frame",
    "encode_message_frames",
    "encode_method_frame",
    "frame_decoder",
    "parse_content_header",
]

PROTOCOL_HEADER: bytes = b"AMQP\x01\x01\x00\x09"
"""What 0-9 clients (Qpid's) send: class 1, instance 1, version 0-9."""
DRAFT_PROTOCOL_HEADER: bytes = b"AMQP\x01\x01\x63\x00"
"""The working draft's: its XML numbers the version major 99, minor 0."""

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
DRAFT_FRAME_TYPES = frozenset(
    {
        draft_constants.FRAME_METHOD,
        draft_constants.FRAME_HEADER,
        draft_constants.FRAME_BODY,
        draft_constants.FRAME_TRACE,
        draft_constants.FRAME_HEARTBEAT,
    }
)


def frame_decoder(frame_max: int = 131072) -> FrameDecoder:
    """A frame decoder that accepts every 0-9 frame type."""
    return FrameDecoder(frame_max, FRAME_TYPES)


def draft_frame_decoder(frame_max: int = 131072) -> FrameDecoder:
    """A frame decoder that accepts every frame type of the 0-9 working draft."""
    return FrameDecoder(frame_max, DRAFT_FRAME_TYPES)
