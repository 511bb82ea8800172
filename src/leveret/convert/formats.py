"""The wire formats a ``Message`` is kept in (``Message.format``), and the conversions
across them that every front end asks for: RabbitMQ's ``mc.erl`` for Leveret.

======  ==================  ====================================================================
format  kept as             ``raw_properties`` / ``body``
======  ==================  ====================================================================
0       AMQP 0-9-1          encoded basic properties / the body (``amqp091.py``); also what
                            0-10, 0-8/0-9 and AMQP/Fast publishes are mapped onto
1       AMQP 1.0            sections before the body / body sections and footer
                            (``amqp10.py``); also what a stream record that was not a 0-9-1
                            publish is read back as
======  ==================  ====================================================================

A message is converted only when a consumer of another protocol takes it: a 0-9-1 consumer
(and through 0-9-1's form a 0-10, 0-8/0-9 or AMQP/Fast one) calls :func:`amqp091_parts`,
which returns a 0-9-1 message's bytes as they are; a 1.0 consumer calls
``amqp10.payload_for_amqp10`` or ``amqp10_amqp091.payload_from_amqp091`` by the format (the
link picks, on its compiled path). The store keeps the format with the bytes; recovery, the
pager and the stream logs rebuild messages with :func:`stored_message`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.convert import amqp10
from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10_amqp091 import amqp091_parts as amqp10_to_amqp091

if TYPE_CHECKING:
    from leveret.model.message import Message

__all__ = ["AMQP091", "AMQP10", "amqp091_parts", "stored_message"]

AMQP091 = 0
AMQP10 = amqp10.FORMAT


def amqp091_parts(message: Message) -> tuple[bytes, bytes]:
    """(encoded basic properties, body) of ``message`` for a 0-9-1 consumer."""
    if message.format == AMQP10:
        return amqp10_to_amqp091(message)
    return message.raw_properties, message.body


def stored_message(exchange: str, routing_key: str, raw: bytes, body: bytes, fmt: int) -> Message:
    """A message as the store, a page or a stream log kept it."""
    if fmt == AMQP10:
        return amqp10.stored_message(exchange, routing_key, raw, body)
    return wire_message(exchange, routing_key, raw, body)
