"""AMQP/Fast 0.8a2 (AMQ RFC 006, 2005): the pre-0-8 wire protocol, sans-IO; front ends import it.

No XML exists for it, so the codec is hand-written from the RFC's tables:
``fieldtable`` (its 2-octet-length field tables), ``commands`` (the 28 connection, channel
and handle commands and the message header block), ``framing`` (the ``128 1`` initiation,
command frames and the message fragments that follow HANDLE SEND/NOTIFY/PREPARE),
``events`` (what the server machine reports) and ``server`` (the server role's connection
machine). The readings taken where the RFC is silent are listed in docs/compatibility.md.
"""

from __future__ import annotations

from leveret.protocol.amqpfast.commands import COMMANDS, Command, MessageHeader, decode_command
from leveret.protocol.amqpfast.framing import INITIATION, CommandDecoder, Fragment, encode_command
from leveret.protocol.amqpfast.server import NEED_DATA, PAUSED, FastServer, State

__all__ = [
    "COMMANDS",
    "INITIATION",
    "NEED_DATA",
    "PAUSED",
    "Command",
    "CommandDecoder",
    "FastServer",
    "Fragment",
    "MessageHeader",
    "State",
    "decode_command",
    "encode_command",
]
