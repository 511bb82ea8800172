"""How the front end for a connection is chosen from the first bytes the client sends.

Every front end implements ``server/shell/contract.py``'s ``FrontEnd`` and is made by a
factory from the connection's ``Shell`` (which owns the lifecycle every protocol shares).
``FRONT_ENDS`` maps a protocol header to the factory of its front end; a header that is not
in it goes to the default front end (AMQP 0-9-1), which answers an unsupported header with
its own and closes, as RabbitMQ does. Initiations shorter than a header (AMQP/Fast's
``128 1``) are told apart by their first octet (``INITIATIONS``). The choice is made once
per connection, so the per-message path does not pay for it. The stream protocol has a port
of its own, whose listener names its front end instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.protocol.amqp010.framing import PROTOCOL_HEADER as AMQP010_HEADER
from leveret.server.amqp010 import AMQP010Connection
from leveret.server.amqp091 import AMQP091Connection
from leveret.server.amqp10.connection import AMQP10Connection
from leveret.server.amqpfast import FastConnection
from leveret.server.legacy.connection import LegacyConnection
from leveret.server.legacy.dialects import DIALECTS, Dialect
from leveret.server.shell.contract import FrontEnd
from leveret.server.shell.shell import FrontEndFactory

if TYPE_CHECKING:
    from leveret.server.shell.shell import Shell

__all__ = [
    "DEFAULT_FRONT_END",
    "FRONT_ENDS",
    "HEADER_SIZE",
    "INITIATIONS",
    "FrontEnd",
    "FrontEndFactory",
    "choose",
]

# Every AMQP protocol header is 8 octets ("AMQP" + 4 octets of version).
HEADER_SIZE = 8


def _amqp091(shell: Shell) -> FrontEnd:
    return AMQP091Connection(shell)


def _amqp010(shell: Shell) -> FrontEnd:
    return AMQP010Connection(shell)


def _amqp10(shell: Shell) -> FrontEnd:
    return AMQP10Connection(shell)


def _amqpfast(shell: Shell) -> FrontEnd:
    return FastConnection(shell)


DEFAULT_FRONT_END: FrontEndFactory = _amqp091


def _legacy(dialect: Dialect) -> FrontEndFactory:
    def make(shell: Shell) -> FrontEnd:
        return LegacyConnection(shell, dialect, choose=choose)

    return make


# Protocol header -> front end. AMQP 0-9-1 (``AMQP 0 0 9 1``) is the default for every header
# not listed here. AMQP 0-8 (``AMQP 1 1 8 0`` and ``AMQP 1 1 9 1``) and 0-9 (``AMQP 1 1 0 9``):
# the 0-9-1 front end with their differences translated at its edge (server/legacy/).
FRONT_ENDS: dict[bytes, FrontEndFactory] = {
    AMQP010_HEADER: _amqp010,  # AMQP 1 1 0 10
    # AMQP 1.0, and its SASL layer's header (spec 2.2, 5.3.1): the 1.0 front end.
    b"AMQP\x00\x01\x00\x00": _amqp10,
    b"AMQP\x03\x01\x00\x00": _amqp10,
    **{header: _legacy(dialect) for dialect in DIALECTS for header in dialect.headers},
}


# Initiations shorter than an AMQP header, told apart by their first octet (never "A"):
# AMQP/Fast 0.8a2's ``128 <version>`` (RFC 006, 3.2.2; the version is the machine's to check).
INITIATIONS: dict[int, FrontEndFactory] = {128: _amqpfast}


def choose(head: bytes) -> FrontEndFactory | None:
    """The front end for a connection whose first bytes are ``head``; None while more bytes
    are needed to tell (a prefix of a listed header shorter than a whole header)."""
    if head and head[0] in INITIATIONS:
        return INITIATIONS[head[0]]
    if len(head) >= HEADER_SIZE:
        return FRONT_ENDS.get(head[:HEADER_SIZE], DEFAULT_FRONT_END)
    if any(header.startswith(head) for header in FRONT_ENDS):
        return None
    return DEFAULT_FRONT_END
