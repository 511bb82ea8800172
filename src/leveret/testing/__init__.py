"""Test helpers that ship with Leveret: an in-memory 0-9-1 client for the sans-IO front end."""

from __future__ import annotations

from leveret.testing.client import (
    DEFAULT_CAPABILITIES,
    CodecClient,
    Delivery,
    FakeClock,
    Heartbeat,
    MethodFrame,
    ProtocolHeader,
    Received,
    RecordingSink,
    SinkEvent,
    amqplain_response,
    make_message,
    plain_response,
)
from leveret.testing.pager import MemoryPager

__all__ = [
    "DEFAULT_CAPABILITIES",
    "CodecClient",
    "Delivery",
    "FakeClock",
    "Heartbeat",
    "MemoryPager",
    "MethodFrame",
    "ProtocolHeader",
    "Received",
    "RecordingSink",
    "SinkEvent",
    "amqplain_response",
    "make_message",
    "plain_response",
]
