"""AMQP 1.0, sans-IO: the type system, the described types generated from the spec XML,
framing, the message format and the connection machine (client or server role).

Import the codec through this package; ``_generated`` is private. Modules: ``types`` (values
and their encodings), ``framing``, ``message``, ``transfer`` (the per-message path),
``connection`` (+ ``session``, ``events``, ``sasl``), ``errors``.
"""

from __future__ import annotations

from leveret.protocol.amqp10._generated import composites, definitions
from leveret.protocol.amqp10._generated.composites import *  # noqa: F403
from leveret.protocol.amqp10._generated.definitions import *  # noqa: F403
from leveret.protocol.amqp10.connection import (
    ECHO,
    Connection,
    ConnectionConfig,
    ConnectionState,
    Side,
)
from leveret.protocol.amqp10.errors import AMQP10Error, DecodeError, LocalProtocolError, Scope
from leveret.protocol.amqp10.events import (
    ConnectionClosed,
    ConnectionOpened,
    CreditGranted,
    DispositionReceived,
    Event,
    FlowReceived,
    LinkAttached,
    LinkAttachRequested,
    LinkDetached,
    MessageReceived,
    SaslAuthRequested,
    SaslOutcomeReceived,
    SessionBegun,
    SessionEnded,
)
from leveret.protocol.amqp10.message import MessageSections, encode_message, parse_message
from leveret.protocol.amqp10.types import (
    Array,
    Described,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    Value,
    decode_value,
    encode_value,
)

__all__ = [
    "ECHO",
    "AMQP10Error",
    "Array",
    "Connection",
    "ConnectionClosed",
    "ConnectionConfig",
    "ConnectionOpened",
    "ConnectionState",
    "CreditGranted",
    "DecodeError",
    "Described",
    "DispositionReceived",
    "Event",
    "FlowReceived",
    "LinkAttachRequested",
    "LinkAttached",
    "LinkDetached",
    "LocalProtocolError",
    "MessageReceived",
    "MessageSections",
    "SaslAuthRequested",
    "SaslOutcomeReceived",
    "Scope",
    "SessionBegun",
    "SessionEnded",
    "Side",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "Value",
    "decode_value",
    "encode_message",
    "encode_value",
    "parse_message",
]
__all__ += composites.__all__
__all__ += definitions.__all__
