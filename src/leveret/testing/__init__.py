"""Test helpers that ship with Leveret: an in-memory 0-9-1 client for the sans-IO front end,
the AMQP/Fast 0.8a2 client (sans-IO, and over a blocking socket), the 0-8/0-9 client (in
memory, and over a blocking socket), and a real broker inside the test run (``embedded``,
``pytest_plugin``: ``docs/testing.md``).

The names below are imported when first used: pytest imports this package in every test
run where Leveret is installed (the plugin's entry point), which must not cost the codecs'
import time to suites that never use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from leveret.testing.embedded import EmbeddedBroker
    from leveret.testing.legacy_client import LegacyClient
    from leveret.testing.legacy_socket import LegacySocket
    from leveret.testing.pager import MemoryPager

__all__ = [
    "DEFAULT_CAPABILITIES",
    "CodecClient",
    "Delivery",
    "EmbeddedBroker",
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

_HOMES = {
    "EmbeddedBroker": "leveret.testing.embedded",
    "FastClient": "leveret.testing.amqpfast_client",
    "FastSocket": "leveret.testing.amqpfast_socket",
    "LegacyClient": "leveret.testing.legacy_client",
    "LegacySocket": "leveret.testing.legacy_socket",
    "MemoryPager": "leveret.testing.pager",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES.get(name, "leveret.testing.client")), name)
    globals()[name] = value
    return value
