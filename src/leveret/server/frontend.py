"""How the front end for a connection is chosen from the first bytes the client sends.

Every front end is a sans-IO machine with the same surface (``FrontEnd``, defined with
``FrontEndContext`` in ``frontend_contract.py`` and handed on from here): bytes in with
``data_received(data, now)``, encoded output out with ``take_output(now)``, turns for
fairness (``pending``/``paced``/``run_turn``), timers (``tick``), flow control (``blocked``,
``block``/``unblock``, ``set_writable``) and closing. ``FRONT_ENDS`` maps a protocol header
to the factory of its front end; a header that is not in it goes to the default front end
(AMQP 0-9-1), which answers an unsupported header with its own and closes, as RabbitMQ does.
The choice is made once per connection, so the per-message path does not pay for it.
"""

from __future__ import annotations

from leveret.protocol.amqp010.framing import PROTOCOL_HEADER as AMQP010_HEADER
from leveret.server.amqp010 import AMQP010Connection
from leveret.server.amqp091 import AMQP091Connection
from leveret.server.amqp10.connection import AMQP10Connection
from leveret.server.amqpfast import FastConnection
from leveret.server.frontend_contract import FrontEnd, FrontEndContext, FrontEndFactory
from leveret.server.legacy.connection import LegacyConnection
from leveret.server.legacy.dialects import DIALECTS, Dialect

__all__ = [
    "FRONT_ENDS",
    "HEADER_SIZE",
    "INITIATIONS",
    "FrontEnd",
    "FrontEndContext",
    "FrontEndFactory",
    "choose",
]

# Every AMQP protocol header is 8 octets ("AMQP" + 4 octets of version).
HEADER_SIZE = 8


def _amqp091(context: FrontEndContext) -> FrontEnd:
    return AMQP091Connection(
        context.broker,
        context.users,
        peer=context.peer,
        loopback=context.loopback,
        limits=context.limits,
        now=context.now,
        certificate_identity=context.certificate_identity,
    )


def _amqp010(context: FrontEndContext) -> FrontEnd:
    return AMQP010Connection(
        context.broker,
        context.users,
        peer=context.peer,
        loopback=context.loopback,
        now=context.now,
        certificate_identity=context.certificate_identity,
    )


def _amqp10(context: FrontEndContext) -> FrontEnd:
    return AMQP10Connection(
        context.broker,
        context.users,
        peer=context.peer,
        loopback=context.loopback,
        limits=context.limits,
        now=context.now,
        certificate_identity=context.certificate_identity,
    )


DEFAULT_FRONT_END: FrontEndFactory = _amqp091


def _legacy(dialect: Dialect) -> FrontEndFactory:
    def make(context: FrontEndContext) -> FrontEnd:
        return LegacyConnection(
            context.broker,
            context.users,
            dialect,
            choose=choose,
            peer=context.peer,
            loopback=context.loopback,
            limits=context.limits,
            now=context.now,
        )

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


def _amqpfast(context: FrontEndContext) -> FrontEnd:
    return FastConnection(
        context.broker,
        context.users,
        peer=context.peer,
        loopback=context.loopback,
        limits=context.limits,
        now=context.now,
    )


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
