"""One AMQP 0-9-1 channel on the server side: the session's sink (deliveries, returns,
confirms, server-sent cancels become frames) and the assembly of published content
(method, header, body frames → one ``Message``). Owned by ``AMQP091Connection``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from leveret.errors import ContentTooLarge, FrameError, UnexpectedFrame
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.server.amqp091_message import wire_message

if TYPE_CHECKING:
    from leveret.model.broker import Client
    from leveret.model.message import Message
    from leveret.model.session import Session
    from leveret.server.amqp091 import AMQP091Connection


class PendingPublish(NamedTuple):
    """The fields of a basic.publish whose content is being assembled. A tuple rather than
    the generated ``BasicPublish``: the front end's fast path (amqp091.py) builds it straight
    from the frame, and a tuple is the cheapest object to make once per message."""

    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool


class Channel:
    """Server side of one channel: the session's sink and the content being assembled."""

    __slots__ = (
        "_body",
        "_body_received",
        "_body_size",
        "_raw_properties",
        "closing",
        "conn",
        "id",
        "publish",
        "session",
    )

    def __init__(self, conn: AMQP091Connection, channel_id: int, client: Client) -> None:
        self.conn = conn
        self.id = channel_id
        self.closing = False
        # The publish whose content is expected (None: none). Public so that the front
        # end's fast path tests it without a method call.
        self.publish: PendingPublish | None = None
        self._raw_properties = b""
        self._body: list[bytes] = []
        self._body_size = 0
        self._body_received = 0
        self.session: Session = client.open_session(channel_id, self)

    # -- SessionSink -----------------------------------------------------------------

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None:
        method = m.BasicDeliver(
            consumer_tag=consumer_tag,
            delivery_tag=delivery_tag,
            redelivered=redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        self.conn.send_content(self.id, method.encode(), message)

    def returned(self, reply_code: int, reply_text: str, message: Message) -> None:
        method = m.BasicReturn(
            reply_code=reply_code,
            reply_text=reply_text,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        self.conn.send_content(self.id, method.encode(), message)

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

    # -- content assembly ------------------------------------------------------------

    def start_content(self, method: m.BasicPublish) -> None:
        self.start_publish(method.exchange, method.routing_key, method.mandatory, method.immediate)

    def start_publish(
        self, exchange: str, routing_key: str, mandatory: bool, immediate: bool
    ) -> None:
        self.publish = PendingPublish(exchange, routing_key, mandatory, immediate)
        self._body_size = -1

    def expecting_content(self) -> bool:
        return self.publish is not None

    def content_header(self, payload: bytes | memoryview, max_size: int) -> bool:
        """Returns True when the message is complete (an empty body)."""
        if self.publish is None or self._body_size != -1:
            raise UnexpectedFrame(f"unexpected content header frame on channel {self.id}")
        class_id, body_size, raw = framing.parse_content_header(payload)
        if class_id != m.BasicPublish.CLASS_ID:
            # Spec 4.2.6.1: a class-id that does not match the method is a frame error.
            raise FrameError(f"content header for class {class_id} on channel {self.id}")
        if body_size > max_size:
            self.publish = None
            raise ContentTooLarge(
                f"message size {body_size} is larger than configured max size {max_size}",
                class_id=60,
                method_id=40,
            )
        self._raw_properties = bytes(raw)
        self._body_size = body_size
        self._body_received = 0
        self._body = []
        return body_size == 0

    def content_body(self, payload: bytes | memoryview) -> bool:
        """Returns True when the message is complete."""
        if self.publish is None or self._body_size < 0:
            raise UnexpectedFrame(f"unexpected content body frame on channel {self.id}")
        self._body.append(bytes(payload))
        self._body_received += len(payload)
        if self._body_received > self._body_size:
            raise FrameError(
                f"content body of {self._body_received} bytes exceeds the announced "
                f"{self._body_size} on channel {self.id}"
            )
        return self._body_received == self._body_size

    def take_content(self) -> tuple[PendingPublish, Message]:
        publish = self.publish
        assert publish is not None
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self.publish = None
        self._body = []
        message = wire_message(publish.exchange, publish.routing_key, self._raw_properties, body)
        return publish, message

    def drop_content(self) -> None:
        self.publish = None
        self._body = []
