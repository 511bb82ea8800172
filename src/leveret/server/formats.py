"""The wire formats a ``Message`` can be kept in (``Message.format``), and what the server
does with a message of a format other than the one a consumer speaks.

======  ==================  ====================================================================
format  kept as             ``raw_properties`` / ``body``
======  ==================  ====================================================================
0       AMQP 0-9-1          encoded basic properties / the body (``server/amqp091/message.py``)
1       AMQP 1.0            sections before the body / body sections and footer
                            (``server/amqp10/message.py``)
======  ==================  ====================================================================

A message is converted only when a consumer of another protocol takes it: the 0-9-1 front
end calls :func:`amqp091_parts` for a message that is not in its format (the 1.0 front end
does the same the other way round in its own package). The store keeps the format with the
bytes; recovery and the stream logs rebuild messages with ``stored.py``. The front ends
import this module (it imports no front end's connection, so the 0-9-1 channel can); the
model never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.server.amqp10 import message as amqp10
from leveret.server.amqp10.to_amqp091 import amqp091_parts as amqp10_to_amqp091

if TYPE_CHECKING:
    from leveret.model.message import Message

__all__ = ["AMQP091", "AMQP10", "amqp091_parts"]

AMQP091 = 0
AMQP10 = amqp10.FORMAT


def amqp091_parts(message: Message) -> tuple[bytes, bytes]:
    """(encoded basic properties, body) of ``message`` for a 0-9-1 consumer."""
    if message.format == AMQP10:
        return amqp10_to_amqp091(message)
    return message.raw_properties, message.body
