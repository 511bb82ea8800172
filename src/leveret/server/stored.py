"""Messages of every wire format rebuilt from what the store and the stream logs kept, and
stamped for stream readers: the factories ``server/server.py`` hands to recovery and to
``StreamStore`` (the formats are in ``server/formats.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.model.message import HINT_HEADERS
from leveret.model.stream import OFFSET_HEADER, TIMESTAMP_HEADER
from leveret.server.amqp091.message import wire_message
from leveret.server.amqp091.stream_headers import stamp_stream as stamp_amqp091
from leveret.server.amqp10 import message as amqp10
from leveret.server.formats import AMQP10

if TYPE_CHECKING:
    from leveret.model.message import Message

__all__ = ["stamp_stream", "stored_message"]


def stored_message(exchange: str, routing_key: str, raw: bytes, body: bytes, fmt: int) -> Message:
    """A message as the store, a page or a stream log kept it."""
    if fmt == AMQP10:
        return amqp10.stored_message(exchange, routing_key, raw, body)
    return wire_message(exchange, routing_key, raw, body)


def stamp_stream(message: Message, offset: int, timestamp: int) -> Message:
    """``message`` with ``x-stream-offset`` and ``x-stream-timestamp``: spliced into 0-9-1
    properties, or added as message annotations of a 1.0 message (as RabbitMQ 4 does)."""
    if message.format == AMQP10:
        headers = dict(message.headers or {})
        headers[OFFSET_HEADER] = offset
        headers[TIMESTAMP_HEADER] = timestamp
        return message.replace(headers=headers, hints=message.hints | HINT_HEADERS)
    return stamp_amqp091(message, offset, timestamp)
