"""One AMQP 0-9-1 channel on the server side: the session's sink (deliveries, returns,
confirms, server-sent cancels become frames) and the assembly of published content
(method, header, body frames → one ``Message``). Owned by ``AMQP091Connection``.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

from leveret.errors import ContentTooLarge, FrameError, UnexpectedFrame
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m

# A module global: looked up once per delivery on the hot path, not through the module.
from leveret.protocol.amqp091.framing import FRAME_END_BYTES
from leveret.server.amqp091_message import wire_message

if TYPE_CHECKING:
    from collections.abc import Callable

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


# Bodies from this size on are handed to the transport as they are (no joined copy).
LARGE_BODY = 16 * 1024
_new_tuple = tuple.__new__
_CONTENT_HEADER = struct.Struct(">HHQ")  # class-id, weight, body-size
_BODY_HEADER = struct.Struct(">BBHI")  # end of the header frame, body frame header
_DELIVER_HEAD = struct.Struct(">BHIHHB")  # method frame header, 60/60, consumer-tag length


class Channel:
    """Server side of one channel: the session's sink and the content being assembled."""

    __slots__ = (
        "_body",
        "_body_received",
        "_body_size",
        "_deliver_consumer",
        "_deliver_exchange",
        "_deliver_names",
        "_deliver_pack",
        "_deliver_prefix",
        "_deliver_routing_key",
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
        # basic.deliver's pre-encoded pieces for the last consumer tag, exchange and routing
        # key delivered (they rarely change from one delivery to the next): see deliver.
        self._deliver_consumer = ""
        self._deliver_exchange = ""
        self._deliver_routing_key = ""
        self._deliver_prefix = b""
        self._deliver_names = b""
        self._deliver_pack: Callable[..., bytes] | None = None
        self.session: Session = client.open_session(channel_id, self)

    # -- SessionSink -----------------------------------------------------------------

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None:
        # The hot path: the method, header and body frames in one join, from pieces encoded
        # once for the consumer tag, exchange and routing key of the previous delivery.
        # The generated BasicDeliver + encode_message_frames (below) cost a dataclass, three
        # str.encode calls and two joins per message.
        body = message.body
        size = len(body)
        frame_max = self.conn.frame_max
        if (
            consumer_tag != self._deliver_consumer
            or message.exchange != self._deliver_exchange
            or message.routing_key != self._deliver_routing_key
            or self._deliver_pack is None
        ):
            self._prepare_deliver(consumer_tag, message.exchange, message.routing_key)
        pack = self._deliver_pack
        if pack is not None and size and (frame_max <= 0 or size <= frame_max - 8):
            raw = message.raw_properties
            parts = [
                self._deliver_prefix,
                pack(delivery_tag, redelivered, self._deliver_names, 12 + len(raw), 60, 0, size),
                raw,
                _BODY_HEADER.pack(206, 3, self.id, size),
            ]
            if size >= LARGE_BODY:
                self.conn.send_encoded(b"".join(parts), body)
            else:
                parts.append(body)
                parts.append(FRAME_END_BYTES)
                self.conn.send_encoded(b"".join(parts))
            return
        method = m.BasicDeliver(
            consumer_tag=consumer_tag,
            delivery_tag=delivery_tag,
            redelivered=redelivered,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        self.conn.send_content(self.id, method.encode(), message)

    def _prepare_deliver(self, consumer_tag: str, exchange: str, routing_key: str) -> None:
        """Encode the constant parts of basic.deliver for this tag, exchange and routing key:
        the prefix (method frame header up to the consumer tag), the names with what follows
        them up to the header frame's size, and a struct that packs everything from the
        delivery tag up to the properties in one call."""
        self._deliver_consumer = consumer_tag
        self._deliver_exchange = exchange
        self._deliver_routing_key = routing_key
        tag = consumer_tag.encode()
        ex = exchange.encode()
        rk = routing_key.encode()
        if max(len(tag), len(ex), len(rk)) > 255:
            self._deliver_pack = None  # not encodable: the generic path raises the error
            return
        method_size = 4 + 1 + len(tag) + 8 + 1 + 1 + len(ex) + 1 + len(rk)
        self._deliver_prefix = _DELIVER_HEAD.pack(1, self.id, method_size, 60, 60, len(tag)) + tag
        # After the delivery tag and the redelivered bit: the names, the method frame's end,
        # the header frame's type and channel (all constant for this tag and these names),
        # then the header frame's size and the content-header prefix.
        names = bytes((len(ex),)) + ex + bytes((len(rk),)) + rk
        self._deliver_names = names + FRAME_END_BYTES + bytes((2,)) + self.id.to_bytes(2, "big")
        self._deliver_pack = struct.Struct(f">QB{len(self._deliver_names)}sIHHQ").pack

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
        # tuple.__new__: the NamedTuple's own constructor is a (slower) Python-level lambda.
        self.publish = _new_tuple(PendingPublish, (exchange, routing_key, mandatory, immediate))
        self._body_size = -1

    def expecting_content(self) -> bool:
        return self.publish is not None

    def content_header(self, payload: bytes | memoryview, max_size: int) -> bool:
        """Returns True when the message is complete (an empty body)."""
        if self.publish is None or self._body_size != -1:
            raise UnexpectedFrame(f"unexpected content header frame on channel {self.id}")
        # framing.parse_content_header, inlined (once per published message).
        if len(payload) < 14:
            framing.parse_content_header(payload)  # raises its FrameError
        body_size: int
        class_id, _weight, body_size = _CONTENT_HEADER.unpack_from(payload, 0)
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
        self._raw_properties = bytes(payload[12:])
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
