"""One AMQP 0-9-1 channel on the server side, as the protocol sees it (sans-IO): whether it
is closing, the assembly of published content (method, header and body frames into one
message's properties and body, with the spec's order and size errors), and the encoding of
``basic.deliver`` from pieces prepared once per consumer tag, exchange and routing key.

``ServerConnection`` (``connection.py``) keeps one per open channel; a front end subclasses
it to add what the channel means to the broker.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from leveret.errors import ContentTooLarge, FrameError, UnexpectedFrame
from leveret.protocol.amqp091 import framing

# A module global: looked up once per delivery on the hot path, not through the module.
from leveret.protocol.amqp091.framing import FRAME_END_BYTES, read_u64

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.protocol.amqp091._generated import methods as m

__all__ = ["LARGE_BODY", "ChannelState", "PendingPublish"]


class PendingPublish:
    """The fields of a basic.publish whose content is being assembled. A plain class rather
    than the generated ``BasicPublish`` (the connection's fast path builds it straight from
    the frame) or a NamedTuple (whose ``tuple.__new__`` is a generic call building two
    tuples): the compiled build makes it with one native call, once per message."""

    __slots__ = ("exchange", "immediate", "mandatory", "routing_key")

    def __init__(self, exchange: str, routing_key: str, mandatory: bool, immediate: bool) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate


# Bodies from this size on are handed to the transport as they are (no joined copy).
LARGE_BODY = 16 * 1024
# basic's class id, the one class with content in 0-9-1 (a Final: inlined where a content
# header is checked, where the generated class's attribute was two lookups a message).
_BASIC_CLASS: Final = 60
# The most property lengths a channel keeps a deliver struct for (then it starts again).
_DELIVER_PACKS: Final = 16
_DELIVER_HEAD = struct.Struct(">BHIHHB")  # method frame header, 60/60, consumer-tag length


class ChannelState:
    """A channel's protocol state: closing, content being assembled, deliver encoding."""

    def __init__(self, channel_id: int) -> None:
        self.id = channel_id
        self.closing = False
        # The publish whose content is expected (None: none). Public so that the
        # connection's fast path tests it without a method call.
        self.publish: PendingPublish | None = None
        self._raw_properties = b""
        self._body: list[bytes] = []
        self._body_size = 0
        self._body_received = 0
        # basic.deliver's pre-encoded pieces for the last consumer tag, exchange and routing
        # key delivered (they rarely change from one delivery to the next): see encode_deliver.
        self._deliver_consumer = ""
        self._deliver_exchange = ""
        self._deliver_routing_key = ""
        self._deliver_prefix = b""
        self._deliver_names = b""
        self._deliver_encodable = False
        # A struct's pack of everything before the body, for each length of properties met
        # since the names last changed (a publisher's properties rarely change length).
        self._deliver_packs: dict[int, Callable[..., bytes]] = {}

    # -- basic.deliver -------------------------------------------------------------------

    def encode_deliver(
        self,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        size: int,
        frame_max: int,
    ) -> bytes | None:
        """basic.deliver's method frame, the content header frame and the body frame's
        header, in one struct call, from parts encoded once for the consumer tag, exchange
        and routing key of the previous delivery (the generated BasicDeliver and
        ``framing.encode_message_frames`` cost a dataclass, three str.encode calls and two
        joins per message); the caller adds the body and the frame end. None when the body
        does not fit one frame (or is empty, or a name is too long): the caller takes the
        generic path."""
        if (
            consumer_tag != self._deliver_consumer
            or exchange != self._deliver_exchange
            or routing_key != self._deliver_routing_key
            or not self._deliver_encodable
        ):
            self._prepare_deliver(consumer_tag, exchange, routing_key)
            if not self._deliver_encodable:
                return None
        if not size or (frame_max > 0 and size > frame_max - 8):
            return None
        props_size = len(raw_properties)
        packs = self._deliver_packs
        pack = packs.get(props_size)
        if pack is None:
            if len(packs) >= _DELIVER_PACKS:
                packs.clear()
            pack = packs[props_size] = struct.Struct(
                f">{len(self._deliver_prefix)}sQB{len(self._deliver_names)}sIHHQ{props_size}sBBHI"
            ).pack
        return pack(
            self._deliver_prefix,
            delivery_tag,
            redelivered,
            self._deliver_names,
            12 + props_size,
            60,
            0,
            size,
            raw_properties,
            206,
            3,
            self.id,
            size,
        )

    def _prepare_deliver(self, consumer_tag: str, exchange: str, routing_key: str) -> None:
        """Encode the constant parts of basic.deliver for this tag, exchange and routing key:
        the prefix (method frame header up to the consumer tag), and the names with what
        follows them up to the header frame's size; ``encode_deliver`` packs them with the
        delivery's own fields in one call."""
        self._deliver_consumer = consumer_tag
        self._deliver_exchange = exchange
        self._deliver_routing_key = routing_key
        self._deliver_packs.clear()
        tag = consumer_tag.encode()
        ex = exchange.encode()
        rk = routing_key.encode()
        if max(len(tag), len(ex), len(rk)) > 255:
            self._deliver_encodable = False  # the generic path raises the error
            return
        self._deliver_encodable = True
        method_size = 4 + 1 + len(tag) + 8 + 1 + 1 + len(ex) + 1 + len(rk)
        self._deliver_prefix = _DELIVER_HEAD.pack(1, self.id, method_size, 60, 60, len(tag)) + tag
        # After the delivery tag and the redelivered bit: the names, the method frame's end,
        # the header frame's type and channel (all constant for this tag and these names),
        # then the header frame's size and the content-header prefix.
        names = bytes((len(ex),)) + ex + bytes((len(rk),)) + rk
        self._deliver_names = names + FRAME_END_BYTES + bytes((2,)) + self.id.to_bytes(2, "big")

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

    def content_expected(self) -> str:
        """What a method frame interrupted, in RabbitMQ's words (505's reply text)."""
        if self._body_size == -1:
            return "expected content header for class 60, got non content header frame instead"
        return "expected content body, got non content body frame instead"

    def content_header(self, payload: bytes, max_size: int) -> bool:
        """Returns True when the message is complete (an empty body)."""
        if self.publish is None:
            raise UnexpectedFrame("expected method frame, got non method frame instead")
        if self._body_size != -1:
            raise UnexpectedFrame(
                "expected content body, got non content body frame instead",
                class_id=60,
                method_id=40,
            )
        # framing.parse_content_header, inlined (once per published message), and read
        # octet by octet (native in the compiled build: no struct call, no result tuple).
        if len(payload) < 14:
            framing.parse_content_header(payload)  # raises its FrameError
        class_id = payload[0] << 8 | payload[1]
        body_size = read_u64(payload, 4)
        if class_id != _BASIC_CLASS:
            # RabbitMQ answers 505 naming the publish (spec 4.2.6.1 would say 501).
            raise UnexpectedFrame(
                f"expected content header for class 60, got one for class {class_id} instead",
                class_id=60,
                method_id=40,
            )
        if body_size > max_size:
            self.publish = None
            raise ContentTooLarge(
                f"message size {body_size} is larger than configured max size {max_size}",
                class_id=60,
                method_id=40,
            )
        # The payload is bytes (the decoder's), so is its slice: no bytes() call, which
        # on CPython 3.11 looks up and binds bytes.__bytes__ even for bytes.
        self._raw_properties = payload[12:]
        self._body_size = body_size
        self._body_received = 0
        self._body.clear()  # one list for the channel's messages, not one each
        return body_size == 0

    def content_body(self, payload: bytes) -> bool:
        """Returns True when the message is complete."""
        if self.publish is None:
            raise UnexpectedFrame("expected method frame, got non method frame instead")
        if self._body_size < 0:
            raise UnexpectedFrame(
                "expected content header for class 60, got non content header frame instead",
                class_id=60,
                method_id=40,
            )
        self._body.append(payload)
        self._body_received += len(payload)
        if self._body_received > self._body_size:
            raise FrameError(
                f"content body of {self._body_received} bytes exceeds the announced "
                f"{self._body_size} on channel {self.id}"
            )
        return self._body_received == self._body_size

    def take_content(self) -> tuple[PendingPublish, bytes, bytes]:
        """The completed publish: its fields, the raw properties and the body."""
        publish = self.publish
        assert publish is not None
        parts = self._body
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self.publish = None
        parts.clear()
        return publish, self._raw_properties, body

    def drop_content(self) -> None:
        self.publish = None
        self._body.clear()
