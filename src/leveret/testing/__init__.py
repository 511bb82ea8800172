"""Test helpers that ship with Leveret: an in-memory 0-9-1 client for the sans-IO front end,
the AMQP/Fast 0.8a2 client (sans-IO, and over a blocking socket) and the 0-8/0-9 client (in
memory, and over a blocking socket)."""

from __future__ import annotations

from leveret.testing.amqpfast_client import FastClient
from leveret.testing.amqpfast_socket import FastSocket
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
from leveret.testing.legacy_client import LegacyClient
from leveret.testing.legacy_socket import LegacySocket
from leveret.testing.pager import MemoryPager

__all__ = [
    "DEFAULT_CAPABILITIES",
    "CodecClient",
    "Delivery",
    "FakeClock",
    "FastClient",
    "FastSocket",
    "Heartbeat",
    "LegacyClient",
    "LegacySocket",
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
