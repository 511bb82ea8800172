"""The protocol-neutral message container; model code and every front end import it.

A front end builds a ``Message`` from what arrived on the wire and keeps the properties in
their encoded form (``raw_properties``). They are decoded lazily, once, and only when a
feature needs them (a headers exchange, mandatory returns never do). Deliveries re-send
the original bytes, so a property set that is never looked at is never decoded.

``hints`` is a bit set the front end fills from what it sees cheaply in the encoded form
(which properties are present), so that the hot path can skip features a message does not
use without decoding anything. Features that must change a message (dead-lettering adds
``x-death``, quorum queues add ``x-delivery-count``, direct reply-to rewrites ``reply_to``)
call ``Message.replace``, which re-encodes through the encoder the front end supplied.

``format`` says which wire format ``raw_properties`` and ``body`` are in (as RabbitMQ's
``mc`` keeps the protocol a message came in): 0, the default, is AMQP 0-9-1's encoded basic
properties and the body; ``convert/formats.py`` numbers the others. The model
never looks inside either; it carries the number through copies, pages and the store, so a
message is converted only when a consumer of another protocol takes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Protocol


class PropertiesView(Protocol):
    """What the model reads of message properties; front ends supply a decoder for it."""

    @property
    def headers(self) -> Mapping[str, object] | None: ...

    @property
    def delivery_mode(self) -> int | None: ...

    @property
    def priority(self) -> int | None: ...

    @property
    def expiration(self) -> str | None: ...

    @property
    def user_id(self) -> str | None: ...

    @property
    def reply_to(self) -> str | None: ...


PropertiesDecoder = Callable[[bytes], PropertiesView]
# Re-encode ``view`` with some properties replaced (None removes one); returns raw bytes.
PropertiesEncoder = Callable[[PropertiesView, Mapping[str, object]], bytes]

# Message.hints bits: which properties are present (set by the front end). Final, as the
# compiled modules then inline them: a plain module global imported from here is a
# dictionary lookup in the importer's globals at every use (the publisher, the queue and the
# 0-9-1 front end test them once per message or more).
HINT_EXPIRATION: Final = 1
HINT_PRIORITY: Final = 2
HINT_HEADERS: Final = 4
HINT_REPLY_TO: Final = 8
# delivery-mode 2: stored when it reaches a durable queue.
HINT_PERSISTENT: Final = 16
# A user-id property is present (front ends that check it against the login read it only
# then; the 0-9-1 one reads its raw property flags instead).
HINT_USER_ID: Final = 32
# The front end read the encoded headers: the decoder takes them and no CC or BCC header
# routes the message (the router need not decode them). Cleared when headers are replaced.
HINT_PLAIN_HEADERS: Final = 64
# Put in several queues of a leader by one publish across the inter-node link (an
# ``Also``): its deliveries to the link's consumers may cross again by a kept slot
# (``protocol/cluster/codec.py``, ``DeliverKept``). Set by the link's front end.
HINT_SHARED: Final = 128  # Final: a constant where the link reads it, not a lookup
# What a queue looks at (expiration, priority); the rest matters at routing only.
QUEUE_HINTS: Final = HINT_EXPIRATION | HINT_PRIORITY


class Message:
    """One published message: routing data, encoded properties and the body."""

    __slots__ = (
        "_decode",
        "_encode",
        "_properties",
        "body",
        "exchange",
        "format",
        "hints",
        "origin",
        "raw_properties",
        "routing_key",
        "store_id",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
        decode: PropertiesDecoder,
        encode: PropertiesEncoder | None = None,
        hints: int = 0,
        format: int = 0,  # the wire format (module docstring)
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.raw_properties = raw_properties
        self.body = body
        self._decode = decode
        self._encode = encode
        self.hints = hints
        self.format = format
        self._properties: PropertiesView | None = None
        # The store's id for this message once it was written (0: not stored).
        self.store_id = 0
        # Where it was published, for a front end that cares (AMQP 0-10's no-local: the
        # publishing connection's token); None otherwise. Not stored.
        self.origin: object | None = None

    def replace(
        self,
        *,
        exchange: str | None = None,
        routing_key: str | None = None,
        hints: int | None = None,
        **properties: object,
    ) -> Message:
        """A copy with other routing data and/or properties (``headers=...`` etc.)."""
        raw = self.raw_properties
        new_hints = self.hints if hints is None else hints
        for name, bit in (
            ("headers", HINT_HEADERS),
            ("expiration", HINT_EXPIRATION),
            ("reply_to", HINT_REPLY_TO),
            ("priority", HINT_PRIORITY),
        ):
            if name in properties:
                new_hints = new_hints | bit if properties[name] is not None else new_hints & ~bit
        if "headers" in properties:
            new_hints &= ~HINT_PLAIN_HEADERS
        if properties:
            if self._encode is None:
                raise TypeError("this message's front end supplied no properties encoder")
            raw = self._encode(self.properties, properties)
        copy = Message(
            self.exchange if exchange is None else exchange,
            self.routing_key if routing_key is None else routing_key,
            raw,
            self.body,
            self._decode,
            self._encode,
            new_hints,
            self.format,
        )
        copy.origin = self.origin
        return copy

    @property
    def properties(self) -> PropertiesView:
        props = self._properties
        if props is None:
            props = self._properties = self._decode(self.raw_properties)
        return props

    @property
    def headers(self) -> Mapping[str, object] | None:
        # The front end saw no headers in the encoded form: skip the decode.
        if not self.hints & HINT_HEADERS:
            return None
        return self.properties.headers

    @property
    def body_size(self) -> int:
        return len(self.body)

    def __repr__(self) -> str:
        return f"Message({self.exchange!r}, {self.routing_key!r}, {len(self.body)} bytes)"
