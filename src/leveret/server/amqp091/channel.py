"""One AMQP 0-9-1 channel of the broker: the protocol's channel state (content assembly,
deliver encoding) plus the ``Session`` behind it, whose output (deliveries, returns,
confirms, server-sent cancels) it turns into frames, and the connection's ``Guard``.
Owned by the front end's connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.convert.formats import amqp091_parts
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.channel import LARGE_BODY, ChannelState

# A module global: looked up once per delivery on the hot path, not through the module.
from leveret.protocol.amqp091.framing import FRAME_END_BYTES
from leveret.server.amqp091.session import Session

if TYPE_CHECKING:
    from leveret.model.broker import Client
    from leveret.model.message import Message
    from leveret.protocol.amqp091.connection import ServerConnection
    from leveret.server.guard import Guard


class Channel(ChannelState):
    """A channel of the broker's 0-9-1 front end: the session's sink."""

    def __init__(
        self,
        conn: ServerConnection,
        channel_id: int,
        client: Client,
        consumer_timeout: float | None,
        guard: Guard,
    ) -> None:
        super().__init__(channel_id)
        self.conn = conn
        # The connection's access checks, which the handlers make before the core acts.
        self.guard = guard
        self.session = Session(client.vhost, client, self, consumer_timeout=consumer_timeout)
        client.attach(channel_id, self.session)

    # -- SessionSink -----------------------------------------------------------------

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None:
        # The hot path: method, header and body frames in one join (ChannelState).
        body = message.body
        raw = message.raw_properties
        if message.format:
            # Published in another protocol: converted for this consumer (convert/formats.py).
            raw, body = amqp091_parts(message)
        size = len(body)
        conn = self.conn
        head = self.encode_deliver(
            consumer_tag,
            delivery_tag,
            redelivered,
            message.exchange,
            message.routing_key,
            raw,
            size,
            conn.frame_max,
        )
        if head is not None:
            if size >= LARGE_BODY:
                conn.send_encoded(head, body)
            else:
                conn.send_encoded(b"".join([head, body, FRAME_END_BYTES]))
            return
        method = m.BasicDeliver(
            consumer_tag=consumer_tag,
            delivery_tag=delivery_tag,
            redelivered=redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        conn.send_content(self.id, method.encode(), raw, body)

    def returned(self, reply_code: int, reply_text: str, message: Message) -> None:
        method = m.BasicReturn(
            reply_code=reply_code,
            reply_text=reply_text,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        raw, body = amqp091_parts(message)
        self.conn.send_content(self.id, method.encode(), raw, body)

    def confirm(self, delivery_tag: int, *, multiple: bool, ack: bool) -> None:
        method: m.Method
        if ack:
            method = m.BasicAck(delivery_tag=delivery_tag, multiple=multiple)
        else:
            method = m.BasicNack(delivery_tag=delivery_tag, multiple=multiple, requeue=False)
        self.conn.send_method(self.id, method)

    def consumer_cancelled(self, consumer_tag: str) -> None:
        if self.conn.client_capabilities.get("consumer_cancel_notify") is True:
            self.conn.send_method(self.id, m.BasicCancel(consumer_tag=consumer_tag, no_wait=True))
