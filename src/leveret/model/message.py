"""The protocol-neutral message container; model code and every front end import it.

A front end builds a ``Message`` from what arrived on the wire and keeps the properties in
their encoded form (``raw_properties``). They are decoded lazily, once, and only when a
feature needs them (a headers exchange, mandatory returns never do). Deliveries re-send
the original bytes, so a property set that is never looked at is never decoded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol


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


class Message:
    """One published message: routing data, encoded properties and the body."""

    __slots__ = ("_decode", "_properties", "body", "exchange", "raw_properties", "routing_key")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
        decode: PropertiesDecoder,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.raw_properties = raw_properties
        self.body = body
        self._decode = decode
        self._properties: PropertiesView | None = None

    @property
    def properties(self) -> PropertiesView:
        props = self._properties
        if props is None:
            props = self._properties = self._decode(self.raw_properties)
        return props

    @property
    def headers(self) -> Mapping[str, object] | None:
        # Without properties there cannot be headers: skip the decode.
        if self.raw_properties[:2] == b"\x00\x00":
            return None
        return self.properties.headers

    @property
    def body_size(self) -> int:
        return len(self.body)

    def __repr__(self) -> str:
        return f"Message({self.exchange!r}, {self.routing_key!r}, {len(self.body)} bytes)"
